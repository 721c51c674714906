/* Carries every shared enum into BTF, so a test can check the TypeScript mirrors of the
 * enums against the C headers (enums used only as constants never reach BTF), and the ring
 * buffer's record (no map's type names it: the programs only reserve its size). Never
 * loaded in production. */
#include "lib/common.h"
#include "shared/lb.h"
#include "shared/ct.h"
#include "shared/ct6.h"
#include "shared/lb6.h"
#include "shared/metrics.h"
#include "shared/events.h"

struct ferry_enum_witness {
	enum lb_scope scope;
	enum lb4_filter_slot filter_slot;
	enum lb4_first_slots first_slots;
	enum lb_flags lb_flags;
	enum fwd_mode fwd_mode;
	enum dsr_option dsr_option;
	enum lb_backend_flags backend_flags;
	enum ct_flags ct_flags;
	enum ct_lifetime ct_lifetime;
	enum frag_action frag_action;
	enum ferry_stat stat;
	enum ferry_drop_reason drop_reason;
	enum ferry_event_type event_type;
	enum ferry_monitor_flags monitor_flags;
	enum ferry_hook hook;
	enum ferry_layout layout;
	enum ferry_handover_flags handover_flags;
	enum ferry_hop_epoch_flags hop_epoch_flags;
	enum host_ports_slot host_ports_slot;
	enum local_remap local_remap;
	enum ct6_dir ct6_dir;
	enum lb6_src_range_bits lb6_src_range_bits;
	struct ferry_event event;
};

const volatile struct ferry_enum_witness ferry_enum_witness = {};

SEC("tc")
int contract(struct __sk_buff *skb)
{
	return ferry_enum_witness.scope;
}

char LICENSE[] SEC("license") = "GPL";
