/* Counts IPv4 TCP packets by what ctx_l4_csum_whole and ctx_l4_csum_partial (bpf/lib/ctx.h)
 * say of their checksum state: [1] whole (CHECKSUM_NONE or UNNECESSARY: the datapath updates
 * the field in place), [2] partial (CHECKSUM_PARTIAL: the helper updates it for addresses,
 * nothing for ports), [0] neither (CHECKSUM_COMPLETE), [3] both (never). Passes every
 * packet on. test/bpf/csum-state.test.ts feeds it the kinds a test can make. */
#include "lib/ctx.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} by_state SEC(".maps");

SEC("tc")
int csum_state(struct __sk_buff *ctx)
{
	struct ethhdr eth;
	struct iphdr ip;
	__u32 state;
	__u64 *n;

	if (ctx_load_bytes(ctx, 0, &eth, sizeof(eth)) < 0 || eth.h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_UNSPEC;
	if (ctx_load_bytes(ctx, sizeof(eth), &ip, sizeof(ip)) < 0 || ip.protocol != IPPROTO_TCP)
		return TC_ACT_UNSPEC;
	state = (ctx_l4_csum_whole(ctx) ? 1 : 0) | (ctx_l4_csum_partial(ctx) ? 2 : 0);
	n = bpf_map_lookup_elem(&by_state, &state);
	if (n)
		__sync_fetch_and_add(n, 1);
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";
