/* Send a rewritten packet on its way: FIB lookup for the next hop, then redirect. */
#ifndef FERRY_LIB_FIB_H
#define FERRY_LIB_FIB_H

#include "maps.h"

/* A packet's identity as a route lookup sees it: policy rules may select by protocol,
 * ports and TOS, and multipath routes may hash the ports (the kernel's forwarding of the
 * same packet would). Fragments and ICMP errors have no ports: 0. */
struct fib4_flow {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 tos;
};

/* The route to `f->daddr`, as if the packet came from `f->saddr` on the device it came in
 * on. No MTU is checked here (tot_len 0): fib4_mtu_exceeded and dsr4_too_big check the
 * route's device, whether the route was looked up or kept. */
static __always_inline long fib4_lookup(struct __ctx_buff *ctx, const struct fib4_flow *f, struct bpf_fib_lookup *fib)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = AF_INET;
	fib->ifindex = ctx_fib_ifindex(ctx);
	fib->ipv4_src = f->saddr;
	fib->ipv4_dst = f->daddr;
	fib->l4_protocol = f->proto;
	fib->sport = f->sport;
	fib->dport = f->dport;
	fib->tos = f->tos;
	return bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
}

/* The route for a packet of a flow whose entry keeps its last next hop (`kept_ifindex`,
 * `kept_macs`: hop_ifindex and hop_macs of a ct4 or nat4 entry). The kept hop is used
 * unless `refresh` (the flow's lifetime is being written: a change of state, or a second
 * of traffic) or none is kept (a write of the other direction's lifetime lets it go); else
 * a lookup, whose complete result is kept. An established flow is so routed about once a
 * second instead of per packet (the lookup was a fifth of a forwarded packet's cost); a
 * route, link or neighbour change the agent reports (ferry_hop_epoch) makes the next
 * packet's write due, and reaches it within that second otherwise. `fib` holds the route
 * either way (only the device and MACs when kept: all fib4_send reads of a successful
 * route). */
static __always_inline long fib4_route_flow(struct __ctx_buff *ctx, const struct fib4_flow *f, __u32 *kept_ifindex,
					    __u8 *kept_macs, int refresh, struct bpf_fib_lookup *fib)
{
	long rc;

	if (!refresh) {
		/* Read once: another CPU may be writing the entry's hop. */
		fib->ifindex = *kept_ifindex;
		if (fib->ifindex) {
			__builtin_memcpy(fib->dmac, kept_macs, ETH_ALEN);
			__builtin_memcpy(fib->smac, kept_macs + ETH_ALEN, ETH_ALEN);
			return BPF_FIB_LKUP_RET_SUCCESS;
		}
	}
	rc = fib4_lookup(ctx, f, fib);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
		*kept_ifindex = 0;
		return rc;
	}
	__builtin_memcpy(kept_macs, fib->dmac, ETH_ALEN);
	__builtin_memcpy(kept_macs + ETH_ALEN, fib->smac, ETH_ALEN);
	*kept_ifindex = fib->ifindex;
	return rc;
}

/* As long as a flow keeps its hop between lookups (CT_REFRESH_NS). */
#define BACKEND_HOP_MAX_AGE_NS NSEC_PER_SEC

/* The shared hop of new flows to a backend (struct lb4_backend_hop), or NULL. */
static __always_inline struct lb4_backend_hop *backend_hop_of(__u32 backend_id)
{
	return bpf_map_lookup_elem(&lb4_backend_hops, &backend_id);
}

/* Is a backend's shared hop (NULL: none) one a new flow from device `from` may take: for
 * its backend's address, looked up less than a second ago and after the last reported
 * route change (`epoch`, the slot as read), and none is shared where routes depend on a
 * flow's ports (FERRY_HOPS_PER_FLOW)? */
static __always_inline int backend_hop_fresh(const struct lb4_backend_hop *h, __be32 daddr, __u32 from, __u64 now,
					     __u64 epoch)
{
	return h && !(epoch & FERRY_HOPS_PER_FLOW) && h->daddr == daddr && h->from_ifindex == from &&
	       now - h->looked_up_ns < BACKEND_HOP_MAX_AGE_NS && h->looked_up_ns >= hop_epoch_since(epoch) && h->hop_ifindex;
}

/* The route for a new flow's first packet: the hop a new flow to the same backend found
 * less than a second ago (from the same address, on the same device), else a lookup whose
 * complete result is shared. The flow keeps the hop either way. bpf_fib_lookup was the
 * largest part of a new flow after its conntrack insert; with this, a burst of new flows
 * to a backend looks its route up once a second, and a hop looked up before a reported
 * route change (ferry_hop_epoch) is not shared. Where routes may depend on a flow's
 * protocol and ports (FERRY_HOPS_PER_FLOW) nothing is shared: each flow is looked up. */
static __always_inline long fib4_route_new_flow(struct __ctx_buff *ctx, const struct fib4_flow *f, __u32 *kept_ifindex,
						__u8 *kept_macs, struct lb4_backend_hop *shared, __u64 now,
						struct bpf_fib_lookup *fib)
{
	__u32 from = ctx_fib_ifindex(ctx);
	__u64 epoch = hop_epoch();
	long rc;

	if (epoch & FERRY_HOPS_PER_FLOW)
		shared = NULL;
	/* The source first: in the other order clang's frame for nodeport_reply_remote grew 16
	 * bytes and the XDP build's three-call stack passed the verifier's 512. */
	if (shared && shared->saddr == f->saddr && backend_hop_fresh(shared, f->daddr, from, now, epoch)) {
		/* Taken as the flow's kept hop, which then routes it. Another CPU may be writing
		 * the slot: a torn read mixes two lookups of this route. */
		*kept_ifindex = shared->hop_ifindex;
		__builtin_memcpy(kept_macs, shared->hop_macs, 2 * ETH_ALEN);
		return fib4_route_flow(ctx, f, kept_ifindex, kept_macs, 0, fib);
	}
	rc = fib4_route_flow(ctx, f, kept_ifindex, kept_macs, 1, fib);
	if (shared && rc == BPF_FIB_LKUP_RET_SUCCESS) {
		shared->hop_ifindex = fib->ifindex;
		__builtin_memcpy(shared->hop_macs, kept_macs, 2 * ETH_ALEN);
		shared->daddr = f->daddr;
		shared->saddr = f->saddr;
		shared->from_ifindex = from;
		shared->looked_up_ns = now;
	}
	return rc;
}

/* Can XDP send a frame out of this device? Out of the one it arrived on (XDP_TX) always;
 * out of another only if the agent listed it (xdp_tx_devices): the kernel would drop it. */
static __always_inline int xdp_can_send(struct __ctx_buff *ctx, __u32 ifindex)
{
	return ifindex == ctx_ifindex(ctx) || bpf_map_lookup_elem(&xdp_tx_devices, &ifindex) != NULL;
}

/* Can a packet take this route? tc: when the next hop's MAC is known, or when only the
 * neighbour is (the kernel resolves it). XDP: only with the MAC, and out of a device it can
 * send by. Asked before a packet is rewritten, which XDP could not undo. */
static __always_inline int fib4_usable(struct __ctx_buff *ctx, long rc, const struct bpf_fib_lookup *fib)
{
	if (CTX_IS_XDP)
		return rc == BPF_FIB_LKUP_RET_SUCCESS && xdp_can_send(ctx, fib->ifindex);
	return rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH;
}

/* Is a packet too big for the device its route leaves by (`*mtu` then holds that MTU)? Only
 * another device than the one it came in on can be: that one carried it, and forwarding
 * keeps its size. A GSO packet (a NIC's segments merged by GRO, or a local sender's over a
 * veth) is judged by its segments, as the kernel's forwarding judges it: each leaves as large
 * as its sender made it. XDP frames are never GSO (and XDP's check takes no flags). */
static __always_inline int fib4_mtu_exceeded(struct __ctx_buff *ctx, __u32 ifindex, __u32 *mtu)
{
	long rc;

	*mtu = 0; /* an input length of 0: the packet's own (BPF_MTU_CHK_SEGS requires it) */
	if (ifindex == ctx_ifindex(ctx))
		return 0;
	rc = bpf_check_mtu(ctx, ifindex, mtu, 0, CTX_IS_XDP ? 0 : BPF_MTU_CHK_SEGS);
	return rc == BPF_MTU_CHK_RET_FRAG_NEEDED || rc == BPF_MTU_CHK_RET_SEGS_TOOBIG;
}

/* XDP: does a flow's kept hop (0: none) leave by a device XDP cannot send by? Then the
 * flow is tc's, left to it before its state is touched. */
static __always_inline int xdp_hop_elsewhere(struct __ctx_buff *ctx, __u32 hop_ifindex)
{
	return CTX_IS_XDP && hop_ifindex && !xdp_can_send(ctx, hop_ifindex);
}

/* A packet whose route is not usable: tc drops it (counted); XDP passes it untouched to
 * tc, which resolves the neighbour or drops it the same way. */
static __always_inline int fib4_unusable(__u32 len)
{
	if (CTX_IS_XDP)
		return CTX_ACT_UNSPEC;
	return count_drop(DROP_FIB_FAILED, len);
}

/* Send a rewritten packet whose MACs are written (when the route has them) by a usable
 * route: out of the route's device. */
static __always_inline int fib4_send_addressed(struct __ctx_buff *ctx, const struct bpf_fib_lookup *fib, long rc)
{
	if (rc == BPF_FIB_LKUP_RET_SUCCESS)
		return ctx_redirect(ctx, fib->ifindex);
#if !CTX_IS_XDP
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		/* The route is known but not the neighbour's MAC: let the kernel resolve it. */
		struct bpf_redir_neigh nh = { .nh_family = AF_INET, .ipv4_nh = fib->ipv4_dst };

		ctx_mark_forwarded(ctx, fib->ifindex);
		return bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0);
	}
#endif
	return count_drop(DROP_FIB_FAILED, ctx_len(ctx));
}

/* Send a rewritten packet by a usable route: both MACs, then out of the route's device. */
static __always_inline int fib4_send(struct __ctx_buff *ctx, const struct bpf_fib_lookup *fib, long rc)
{
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		__u8 macs[2 * ETH_ALEN]; /* as in struct ethhdr: destination, then source */

		__builtin_memcpy(macs, fib->dmac, ETH_ALEN);
		__builtin_memcpy(macs + ETH_ALEN, fib->smac, ETH_ALEN);
		if (ctx_store_bytes(ctx, 0, macs, sizeof(macs), 0) < 0)
			return count_drop(DROP_CSUM_FAILED, ctx_len(ctx));
	}
	return fib4_send_addressed(ctx, fib, rc);
}

/* Route a packet that is already rewritten (tc only: fragments, ICMP errors). Returns
 * TC_ACT_REDIRECT, or TC_ACT_SHOT (counted) when there is no route. */
static __always_inline int fib_redirect4(struct __ctx_buff *ctx, __be32 saddr, __be32 daddr)
{
	struct fib4_flow f = { .saddr = saddr, .daddr = daddr };
	struct bpf_fib_lookup fib;
	long rc = fib4_lookup(ctx, &f, &fib);

	if (!fib4_usable(ctx, rc, &fib))
		return count_drop(DROP_FIB_FAILED, ctx_len(ctx));
	return fib4_send(ctx, &fib, rc);
}

#endif
