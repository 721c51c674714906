/* The L2 announcement responder: an ARP request for an address this node owns on the
 * interface it arrived on (l2_owned, unexpired) is turned into the reply in place and sent
 * back out of that interface. Anything else is left to the kernel. */
#ifndef FERRY_LIB_ARP_H
#define FERRY_LIB_ARP_H

#include "maps.h"
#include "clock.h"

#define ARP_HTYPE_ETHER 1
#define ARP_OP_REQUEST 1
#define ARP_OP_REPLY 2

/* ARP for IPv4 over Ethernet, as on the wire (RFC 826). */
struct arp4 {
	__be16 htype;
	__be16 ptype;
	__u8 hlen;
	__u8 plen;
	__be16 op;
	__u8 sha[ETH_ALEN];
	__u8 spa[4];
	__u8 tha[ETH_ALEN];
	__u8 tpa[4];
} __attribute__((packed));

static __always_inline int mac_equal(const __u8 *a, const __u8 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4] && a[5] == b[5];
}

__ferry_global int arp_respond(struct __ctx_buff *ctx)
{
	struct ethhdr eth;
	struct arp4 a;
	struct l2_key key = {};
	struct l2_entry *e;

	if (ctx_load_bytes(ctx, 0, &eth, sizeof(eth)) < 0 || eth.h_proto != bpf_htons(ETH_P_ARP))
		return CTX_ACT_UNSPEC;
	if (ctx_load_bytes(ctx, sizeof(eth), &a, sizeof(a)) < 0)
		return CTX_ACT_UNSPEC;
	if (a.htype != bpf_htons(ARP_HTYPE_ETHER) || a.ptype != bpf_htons(ETH_P_IP) || a.hlen != ETH_ALEN || a.plen != 4 || a.op != bpf_htons(ARP_OP_REQUEST))
		return CTX_ACT_UNSPEC;
	key.ifindex = ctx_ifindex(ctx);
	__builtin_memcpy(&key.addr, a.tpa, 4);
	e = bpf_map_lookup_elem(&l2_owned, &key);
	/* Expired: the agent stopped refreshing it (dead, or the address moved on). */
	if (!e || e->expires_ns < ferry_now())
		return CTX_ACT_UNSPEC;
	/* Our own request coming back, or another node's gratuitous ARP for the address. */
	if (mac_equal(a.sha, e->mac) || __builtin_memcmp(a.spa, a.tpa, 4) == 0)
		return CTX_ACT_UNSPEC;

	__builtin_memcpy(eth.h_dest, a.sha, ETH_ALEN);
	__builtin_memcpy(eth.h_source, e->mac, ETH_ALEN);
	a.op = bpf_htons(ARP_OP_REPLY);
	__builtin_memcpy(a.tha, a.sha, ETH_ALEN);
	__builtin_memcpy(a.sha, e->mac, ETH_ALEN);
	__builtin_memcpy(a.tpa, a.spa, 4);
	__builtin_memcpy(a.spa, &key.addr, 4);
	if (ctx_store_bytes(ctx, 0, &eth, sizeof(eth), 0) < 0 || ctx_store_bytes(ctx, sizeof(eth), &a, sizeof(a), 0) < 0)
		return count_drop(DROP_CSUM_FAILED, ctx_len(ctx));
	count_stat(STAT_ARP_REPLY, ctx_len(ctx));
	return ctx_bounce(ctx);
}

#endif
