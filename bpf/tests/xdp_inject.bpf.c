/* The node pps benchmark's packet source (bench/pps-node.ts): run by
 * BPF_PROG_TEST_RUN in live-frames mode "on" the forwarding node's device, as if each frame
 * had arrived there. Every run writes the whole frame (inject_frame.h: the kernel recycles
 * a frame's page with whatever the previous run's dataplane wrote into it), then hands it
 * to the dataplane under test: ferry's xdp_ingress by a tail call (slot 0 of `next`), or
 * the kernel's stack (XDP_PASS: tc, netfilter). */
#include "inject_frame.h"

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} next SEC(".maps");

SEC("xdp")
int xdp_inject(struct xdp_md *ctx)
{
	if (write_frame((void *)(long)ctx->data, (void *)(long)ctx->data_end) < 0)
		return XDP_ABORTED;
	bpf_tail_call(ctx, &next, 0);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
