/* The forward of IPv6 packets tc_ingress sends on to another host (lib/snat6.h's SNAT
 * flows and their replies, and the later fragments that follow them, lib/frag6.h): the
 * per-CPU slots through which the function that decided a packet's way hands it to the
 * next (pkt6_handoff: the packet as parsed; nat6_handoff: its new ends), and
 * nodeport6_forward, which rewrites it (MACs, hop limit and addresses in one store, the
 * L4 checksum, the ports) and sends it by its route (next hops kept: lib/fib6.h). */
#ifndef FERRY_LIB_FORWARD6_H
#define FERRY_LIB_FORWARD6_H

#include "config.h"
#include "maps.h"
#include "clock.h"
#include "parse6.h"
#include "nat6.h"
#include "fib.h"
#include "fib6.h"
#include "frag6.h"

#ifndef AF_INET6
#define AF_INET6 10
#endif

/* What nodeport6_ingress returns (no TC_ACT_* value) for a client's packet of a flow to a
 * backend on another node whose state needs a write, once it has handed the packet to
 * nodeport6_snat_flow (pkt6_handoff), which the caller calls. */
#define NODEPORT6_REMOTE 0x1002
/* ... what it and nodeport6_snat_flow return once they have handed a packet's new ends to
 * nodeport6_forward (nat6_handoff), which the caller calls. */
#define NODEPORT6_FORWARD 0x1005

/* What nodeport6_forward returns (no TC_ACT_* value either) for a
 * packet this node, as a router, answers with an ICMPv6 error (icmp6_send_error, lib/
 * icmp6.h: the caller's frame, not theirs): its hop limit spent, or too big for the device
 * its route leaves by (NODEPORT6_TOO_BIG + that MTU). */
#define NODEPORT6_HOP_LIMIT 0x1004
#define NODEPORT6_TOO_BIG 0x10000

static __always_inline struct nat6_ends *nat6_handoff_slot(void)
{
	return bpf_map_lookup_elem(&nat6_handoff, &only_slot);
}

static __always_inline struct pkt6_handoff *pkt6_handoff_slot(void)
{
	return bpf_map_lookup_elem(&pkt6_handoff, &only_slot);
}

/* A client's packet whose flow to a remote backend needs its state written (a new flow, a
 * lifetime due): the packet as parsed handed to nodeport6_snat_flow, which the caller
 * calls on NODEPORT6_REMOTE (lib/nodeport6.h); for a new flow with the backend `b` its
 * hash chose (NULL: none chosen). */
static __always_inline int snat6_hand_packet(const struct pkt6 *p, const struct lb6_service *b, __u8 ranged, __u32 hash)
{
	struct pkt6_handoff *slot = pkt6_handoff_slot();

	if (!slot)
		return count_drop(DROP_MALFORMED, p->len); /* never: the map has its one slot */
	slot->p = *p;
	slot->backend_port = b ? b->port : 0;
	if (b)
		__builtin_memcpy(slot->backend, b->address, 16);
	slot->ranged = ranged;
	slot->hash = hash;
	return NODEPORT6_REMOTE;
}

/* Hand a packet to nodeport6_forward: to go from saddr:sport to daddr:dport, counted as
 * `stat` once sent. */
static __always_inline int snat6_hand_ends(const struct pkt6 *p, const __u8 *saddr, __be16 sport, const __u8 *daddr,
					   __be16 dport, __u32 stat)
{
	struct nat6_ends *e = nat6_handoff_slot();

	if (!e)
		return count_drop(DROP_MALFORMED, p->len); /* never: the map has its one slot */
	__builtin_memcpy(e->saddr, __builtin_assume_aligned(saddr, 4), 16);
	__builtin_memcpy(e->daddr, __builtin_assume_aligned(daddr, 4), 16);
	e->sport = sport;
	e->dport = dport;
	e->from_sport = p->sport;
	e->from_dport = p->dport;
	e->stat = stat;
	return NODEPORT6_FORWARD;
}

/* A client's packet of a flow to a remote backend (its ct6 entry `flow`), handed on: from
 * the node's address and the flow's port, to the backend. */
static __always_inline int snat6_hand_flow(const struct pkt6 *p, const struct ct6_entry *flow)
{
	struct nat6_ends *e = nat6_handoff_slot();

	if (!e)
		return count_drop(DROP_MALFORMED, p->len);
	snat6_node_address(e->saddr);
	__builtin_memcpy(e->daddr, flow->addr, 16);
	e->sport = flow->nat_port;
	e->dport = flow->port;
	e->from_sport = p->sport;
	e->from_dport = p->dport;
	e->stat = STAT_FWD_REMOTE6;
	return NODEPORT6_FORWARD;
}

/* A remote backend's reply (its binding `nat`), handed on: from the frontend, to the
 * client. */
static __always_inline int snat6_hand_reply(const struct pkt6 *p, const struct nat6_entry *nat)
{
	return snat6_hand_ends(p, nat->frontend_addr, nat->frontend_port, nat->client_addr, nat->client_port,
			       STAT_REPLY_REMOTE6);
}

/* Rewrite both ends of an IPv6 packet leaving the node again, hop limit down, and send it
 * by its route: from `saddr`:`sport` to `daddr`:`dport` (a later fragment: the addresses
 * alone, ports 0). `h`: its head as parsed. */
static __always_inline int nat6_forward(struct __sk_buff *ctx, const struct pkt6 *p, struct eth_ipv6_head *h,
					const __u8 *saddr, __be16 sport, const __u8 *daddr, __be16 dport, __u32 stat)
{
	struct bpf_fib_lookup fib = {};
	__u32 mtu;
	long rc;

	if (h->ip.hop_limit <= 1)
		return NODEPORT6_HOP_LIMIT;
	fib.family = AF_INET6;
	fib.ifindex = ctx_fib_ifindex(ctx);
	fib.l4_protocol = p->proto;
	fib.sport = sport;
	fib.dport = dport;
	__builtin_memcpy(fib.ipv6_src, saddr, 16);
	__builtin_memcpy(fib.ipv6_dst, daddr, 16);
	rc = fib6_route(ctx, &fib, ferry_now());
	/* The lookup measures the packet against the route's device (a GSO packet passes it:
	 * its segments are measured below). */
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return NODEPORT6_TOO_BIG + (fib.mtu_result > 0xffff ? 0xffff : fib.mtu_result);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return count_drop(DROP_FIB_FAILED, p->len);
	if (fib4_mtu_exceeded(ctx, fib.ifindex, &mtu))
		return NODEPORT6_TOO_BIG + (mtu > 0xffff ? 0xffff : mtu);
	if (nat6_rewrite_forwarded(ctx, p, h, saddr, sport, daddr, dport, rc == BPF_FIB_LKUP_RET_SUCCESS ? &fib : NULL) < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	count_stat(stat, p->len);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		/* The route is known, not the neighbour's MAC: the kernel resolves it. */
		struct bpf_redir_neigh nh = { .nh_family = AF_INET6 };

		__builtin_memcpy(nh.ipv6_nh, fib.ipv6_dst, 16);
		ctx_mark_forwarded(ctx, fib.ifindex);
		return bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
	}
	return fib4_send_addressed(ctx, &fib, rc); /* the MACs are written */
}

/* A packet whose new ends were handed over (nat6_handoff) by the function before it in
 * this tc_ingress run: rewritten and sent. */
__ferry_global int nodeport6_forward(struct __sk_buff *ctx)
{
	struct nat6_ends *to = nat6_handoff_slot();
	struct eth_ipv6_head h;
	struct pkt6 p;

	if (!ctx || !to || parse_ipv6_head(ctx, &p, &h) != PARSE_OK || p.sport != to->from_sport || p.dport != to->from_dport)
		return count_drop(DROP_MALFORMED, ctx ? ctx->len : 0);
	/* Noted first: a first fragment the forward drops leaves a note no fragment uses. */
	frag6_note(&p, to->saddr, to->daddr, FRAG_ACT_REDIRECT);
	return nat6_forward(ctx, &p, &h, to->saddr, to->sport, to->daddr, to->dport, to->stat);
}

#endif
