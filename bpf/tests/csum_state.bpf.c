/* Counts IPv4 TCP packets by what ctx_l4_csum_whole (bpf/lib/ctx.h) says of their checksum
 * state: [1] whole (CHECKSUM_NONE or UNNECESSARY: the datapath updates the field in place),
 * [0] not (CHECKSUM_PARTIAL or COMPLETE: the kernel's helper updates it). Passes every
 * packet on. test/bpf/csum-state.test.ts feeds it both kinds. */
#include "lib/ctx.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} by_state SEC(".maps");

SEC("tc")
int csum_state(struct __sk_buff *ctx)
{
	struct ethhdr eth;
	struct iphdr ip;
	__u32 whole;
	__u64 *n;

	if (ctx_load_bytes(ctx, 0, &eth, sizeof(eth)) < 0 || eth.h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_UNSPEC;
	if (ctx_load_bytes(ctx, sizeof(eth), &ip, sizeof(ip)) < 0 || ip.protocol != IPPROTO_TCP)
		return TC_ACT_UNSPEC;
	whole = ctx_l4_csum_whole(ctx) ? 1 : 0;
	n = bpf_map_lookup_elem(&by_state, &whole);
	if (n)
		__sync_fetch_and_add(n, 1);
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";
