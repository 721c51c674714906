/* North-south Service traffic at XDP, before the kernel builds an skb: the same decisions
 * as tc_ingress (the same lib/ code, built for XDP through lib/ctx.h), for what can leave
 * again without the stack:
 *
 *   reply to an SNATed flow        → restore, back out to the client;
 *   frontend, remote backend       → DNAT + SNAT, or DSR, out to the backend's node;
 *   frontend without backend       → ICMP port unreachable, back out;
 *   source range, unknown port,
 *   no local backend (ETP=Local)   → drop.
 *
 * Everything else passes untouched to the stack, where tc_ingress handles it as if XDP were
 * not there: flows to a local backend (the stack delivers them), fragments, ICMP errors,
 * DSR packets arriving for a local backend, ARP, a next hop whose MAC is not known yet.
 *
 * The agent loads one copy per device, with the device's MAC in device_mac: XDP sees frames
 * before the kernel sorts out those addressed to another host, and must not act on them. */
#define FERRY_XDP 1

#include "lib/common.h"
#include "lib/ctx.h"
#include "lib/config.h"
#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/lb.h"
#include "lib/ct.h"
#include "lib/icmp.h"
#include "lib/dsr.h"
#include "lib/frag.h"
#include "lib/nodeport.h"
#include "lib/monitor.h"

/* The MAC of the device this copy is attached to; all zero: not checked. */
const volatile __u8 device_mac[ETH_ALEN] = {};

/* Is the frame for this host: its MAC, or a group address (the kernel would take both)? */
static __always_inline int xdp_for_this_host(struct xdp_md *ctx)
{
	__u8 dst[ETH_ALEN];
	__u8 any = device_mac[0] | device_mac[1] | device_mac[2] | device_mac[3] | device_mac[4] | device_mac[5];

	if (!any)
		return 1;
	if (bpf_xdp_load_bytes(ctx, 0, dst, sizeof(dst)) < 0)
		return 0;
	if (dst[0] & 1)
		return 1;
	return dst[0] == device_mac[0] && dst[1] == device_mac[1] && dst[2] == device_mac[2] &&
	       dst[3] == device_mac[3] && dst[4] == device_mac[4] && dst[5] == device_mac[5];
}

static __always_inline int xdp_packet(struct xdp_md *ctx)
{
	struct pkt4 p;

	if (!xdp_for_this_host(ctx))
		return XDP_PASS;
	/* Not IPv4 (ARP among it), or malformed: tc answers or counts it. */
	if (parse_ipv4(ctx, &p) != PARSE_OK)
		return XDP_PASS;
	/* All fragments of a datagram go to tc, which follows the first with the rest. */
	if (p.fragment || p.frag_more)
		return XDP_PASS;
	if (p.proto != IPPROTO_TCP && p.proto != IPPROTO_UDP)
		return XDP_PASS;
	if (p.dsr_opt)
		return XDP_PASS;

	/* A reply to a flow this node SNATed toward a remote backend. */
	{
		__u64 now;
		__u64 unbound = 0; /* in a switch: its word, as the reply was judged by */
		struct nat4_entry *nat = snat4_reply_of(ctx, &p, &now, &unbound);

		if (nat)
			return nodeport_reply_remote(ctx, &p, nat, now);
		if (unbound)
			return handover_unplaced(p.len, unbound);
	}
	return nodeport_ingress(ctx, &p);
}

SEC("xdp")
int xdp_ingress(struct xdp_md *ctx)
{
	struct monitor_ctx m;

	monitor_begin(ctx, &m);
	return monitor_end(ctx, &m, xdp_packet(ctx), HOOK_XDP);
}

char LICENSE[] SEC("license") = "GPL";
