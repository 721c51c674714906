/* Send a rewritten packet on its way: FIB lookup for the next hop, then redirect. */
#ifndef FERRY_LIB_FIB_H
#define FERRY_LIB_FIB_H

#include "maps.h"

/* Returns TC_ACT_REDIRECT, or TC_ACT_SHOT (counted) when there is no route. */
static __always_inline int fib_redirect4(struct __sk_buff *skb, __be32 saddr, __be32 daddr)
{
	struct bpf_fib_lookup fib = {};
	long rc;

	fib.family = AF_INET;
	fib.ifindex = skb->ingress_ifindex ? skb->ingress_ifindex : skb->ifindex;
	fib.ipv4_src = saddr;
	fib.ipv4_dst = daddr;
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		if (bpf_skb_store_bytes(skb, offsetof(struct ethhdr, h_dest), fib.dmac, ETH_ALEN, 0) < 0 ||
		    bpf_skb_store_bytes(skb, offsetof(struct ethhdr, h_source), fib.smac, ETH_ALEN, 0) < 0)
			return count_drop(DROP_CSUM_FAILED, skb->len);
		return bpf_redirect(fib.ifindex, 0);
	}
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		/* The route is known but not the neighbour's MAC: let the kernel resolve it. */
		struct bpf_redir_neigh nh = { .nh_family = AF_INET, .ipv4_nh = fib.ipv4_dst };

		return bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
	}
	return count_drop(DROP_FIB_FAILED, skb->len);
}

/* Would a packet of `tot_len` bytes to `daddr` fit the route's MTU? 0 if so (or unknown),
 * else the MTU. */
static __always_inline __u32 fib_mtu_exceeded4(struct __sk_buff *skb, __be32 saddr, __be32 daddr, __u16 tot_len)
{
	struct bpf_fib_lookup fib = {};

	fib.family = AF_INET;
	fib.ifindex = skb->ingress_ifindex ? skb->ingress_ifindex : skb->ifindex;
	fib.ipv4_src = saddr;
	fib.ipv4_dst = daddr;
	fib.tot_len = tot_len;
	if (bpf_fib_lookup(skb, &fib, sizeof(fib), 0) == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return fib.mtu_result ? fib.mtu_result : 1500;
	return 0;
}

#endif
