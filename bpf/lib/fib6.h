/* The route of an IPv6 packet this node forwards (lib/snat6.h): a next hop an earlier
 * packet found for the same destination, source and input device (fib6_hops), else the
 * FIB's, kept for the packets after it. An IPv6 FIB lookup was more than a third of an
 * established SNAT flow's packet (about 460 of 1280 ns here); kept as IPv4's hops are: for
 * a second, and not past a route, link or neighbour change the agent reports
 * (ferry_hop_epoch), nor at all where routes may depend on a flow's ports
 * (FERRY_HOPS_PER_FLOW: each packet is looked up with its own). */
#ifndef FERRY_LIB_FIB6_H
#define FERRY_LIB_FIB6_H

#include "maps.h"
#include "fib.h"

/* `fib` holds the packet's family, input device, protocol, ports and addresses; on
 * success, as bpf_fib_lookup leaves it (the device and both MACs: all fib4_send reads). */
static __always_inline long fib6_route(struct __ctx_buff *ctx, struct bpf_fib_lookup *fib, __u64 now)
{
	struct fib6_hop_key k = { .from_ifindex = fib->ifindex };
	__u64 epoch = hop_epoch();
	int keep = !(epoch & FERRY_HOPS_PER_FLOW);
	struct fib6_hop *h;
	long rc;

	if (keep) {
		__builtin_memcpy(k.daddr, fib->ipv6_dst, 16);
		__builtin_memcpy(k.saddr, fib->ipv6_src, 16);
		h = bpf_map_lookup_elem(&fib6_hops, &k);
		if (h && h->ifindex && now - h->looked_up_ns < BACKEND_HOP_MAX_AGE_NS &&
		    h->looked_up_ns >= hop_epoch_since(epoch)) {
			fib->ifindex = h->ifindex;
			__builtin_memcpy(fib->dmac, h->macs, ETH_ALEN);
			__builtin_memcpy(fib->smac, h->macs + ETH_ALEN, ETH_ALEN);
			return BPF_FIB_LKUP_RET_SUCCESS;
		}
	}
	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	if (keep && rc == BPF_FIB_LKUP_RET_SUCCESS) {
		struct fib6_hop v = { .looked_up_ns = now, .ifindex = fib->ifindex };

		__builtin_memcpy(v.macs, fib->dmac, ETH_ALEN);
		__builtin_memcpy(v.macs + ETH_ALEN, fib->smac, ETH_ALEN);
		bpf_map_update_elem(&fib6_hops, &k, &v, BPF_ANY);
	}
	return rc;
}

#endif
