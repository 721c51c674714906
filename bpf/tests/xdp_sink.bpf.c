/* The node pps benchmark's sink (bench/pps-node.ts): on the switch port that faces the
 * forwarding node, it counts what that node forwarded to the sink's address and port from
 * its own address (translated both ways, as every dataplane compared must), right at the
 * first hop (veth runs it on the frame the node sent, or on its skb); anything else (ARP,
 * the nodes' own traffic) goes on through the switch.
 * xdp_sink drops what it counts: the source is the kernel (live-frames test runs).
 * xdp_recycle is the source where the kernel refuses those: it writes each counted frame
 * over with the next client frame (inject_frame.h) and sends it back to the node
 * (XDP_TX), so that a few frames, seeded once, circulate through the node's dataplane
 * until `loop`'s CIRCULATE slot is cleared; then each is dropped and counted as drained. */
#include "inject_frame.h"

const volatile __be32 sink_addr = 0;
const volatile __be16 sink_port = 0;
const volatile __be32 from_addr = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sunk SEC(".maps");

enum { LOOP_CIRCULATE, LOOP_DRAINED, LOOP_SLOTS };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LOOP_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} loop SEC(".maps");

/* A frame the node forwarded, translated both ways: counted. */
static __always_inline int counted(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	__be16 *ports = (void *)(ip + 1);
	__u32 key = 0;
	__u64 *n;

	if ((void *)(ports + 2) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5)
		return 0;
	if (ip->daddr != sink_addr || ports[1] != sink_port || ip->saddr != from_addr ||
	    (ip->protocol != IPPROTO_UDP && ip->protocol != IPPROTO_TCP))
		return 0;
	n = bpf_map_lookup_elem(&sunk, &key);
	if (n)
		*n += 1;
	return 1;
}

SEC("xdp")
int xdp_sink(struct xdp_md *ctx)
{
	return counted(ctx) ? XDP_DROP : XDP_PASS;
}

SEC("xdp")
int xdp_recycle(struct xdp_md *ctx)
{
	__u32 key = LOOP_CIRCULATE;
	__u64 *on;
	long len;

	if (!counted(ctx))
		return XDP_PASS;
	on = bpf_map_lookup_elem(&loop, &key);
	if (!on || !*on) {
		key = LOOP_DRAINED;
		on = bpf_map_lookup_elem(&loop, &key);
		if (on)
			__sync_fetch_and_add(on, 1);
		return XDP_DROP;
	}
	/* A seed may be longer (or shorter) than the benchmark's frame. */
	len = (long)ctx->data_end - (long)ctx->data;
	if (len != FRAME_LEN && bpf_xdp_adjust_tail(ctx, FRAME_LEN - len))
		return XDP_DROP;
	if (write_frame((void *)(long)ctx->data, (void *)(long)ctx->data_end) < 0)
		return XDP_DROP;
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
