/* The cheapest possible XDP program: the baseline of the XDP per-packet cost benchmark, and
 * what the sandbox's switch ports run so that frames its nodes send back out with XDP_TX
 * reach them (a veth takes XDP frames only when its peer polls, which an XDP program on it
 * turns on). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
