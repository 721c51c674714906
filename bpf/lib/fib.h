/* Send a rewritten packet on its way: FIB lookup for the next hop, then redirect. */
#ifndef FERRY_LIB_FIB_H
#define FERRY_LIB_FIB_H

#include "maps.h"

/* The route to `daddr`, as if the packet came from `saddr` on the device it came in on. */
static __always_inline long fib4_lookup(struct __ctx_buff *ctx, __be32 saddr, __be32 daddr, struct bpf_fib_lookup *fib)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = AF_INET;
	fib->ifindex = ctx_fib_ifindex(ctx);
	fib->ipv4_src = saddr;
	fib->ipv4_dst = daddr;
	return bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
}

/* Can a packet take this route? tc: when the next hop's MAC is known, or when only the
 * neighbour is (the kernel resolves it). XDP: only with the MAC. Asked before a packet is
 * rewritten, which XDP could not undo. */
static __always_inline int fib4_usable(long rc)
{
	return rc == BPF_FIB_LKUP_RET_SUCCESS || (!CTX_IS_XDP && rc == BPF_FIB_LKUP_RET_NO_NEIGH);
}

/* A packet whose route is not usable: tc drops it (counted); XDP passes it untouched to
 * tc, which resolves the neighbour or drops it the same way. */
static __always_inline int fib4_unusable(__u32 len)
{
	if (CTX_IS_XDP)
		return CTX_ACT_UNSPEC;
	return count_drop(DROP_FIB_FAILED, len);
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
		return ctx_redirect(ctx, fib->ifindex);
	}
#if !CTX_IS_XDP
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		/* The route is known but not the neighbour's MAC: let the kernel resolve it. */
		struct bpf_redir_neigh nh = { .nh_family = AF_INET, .ipv4_nh = fib->ipv4_dst };

		return bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0);
	}
#endif
	return count_drop(DROP_FIB_FAILED, ctx_len(ctx));
}

/* Route a packet that is already rewritten (tc only: fragments, ICMP errors). Returns
 * TC_ACT_REDIRECT, or TC_ACT_SHOT (counted) when there is no route. */
static __always_inline int fib_redirect4(struct __ctx_buff *ctx, __be32 saddr, __be32 daddr)
{
	struct bpf_fib_lookup fib;
	long rc = fib4_lookup(ctx, saddr, daddr, &fib);

	if (!fib4_usable(rc))
		return count_drop(DROP_FIB_FAILED, ctx_len(ctx));
	return fib4_send(ctx, &fib, rc);
}

/* Would a packet of `tot_len` bytes to `daddr` fit the route's MTU? 0 if so (or unknown),
 * else the MTU. */
static __always_inline __u32 fib_mtu_exceeded4(struct __ctx_buff *ctx, __be32 saddr, __be32 daddr, __u16 tot_len)
{
	struct bpf_fib_lookup fib = {};

	fib.family = AF_INET;
	fib.ifindex = ctx_fib_ifindex(ctx);
	fib.ipv4_src = saddr;
	fib.ipv4_dst = daddr;
	fib.tot_len = tot_len;
	if (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return fib.mtu_result ? fib.mtu_result : 1500;
	return 0;
}

#endif
