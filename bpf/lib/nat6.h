/* What IPv6 translation shares (lib/nodeport6.h, lib/snat6.h, lib/icmp6_related.h): the
 * flow hash and the rewrite of one end of a packet (the node's IPv6 address: lib/config.h). */
#ifndef FERRY_LIB_NAT6_H
#define FERRY_LIB_NAT6_H

#include "config.h"
#include "parse6.h"
#include "hash.h"
#include "csum.h"
#include "nat.h"

static __always_inline __u32 fold6(const __u8 *a)
{
	const __u32 *w = (const __u32 *)a;

	return w[0] ^ w[1] ^ w[2] ^ w[3];
}

static __always_inline __u32 flow_hash6(const struct pkt6 *p)
{
	__u32 init = FERRY_HASH_INIT + hash_seed;

	return hash_final(fold6(p->saddr) + init, fold6(p->daddr) + init,
			  ((__u32)p->sport | ((__u32)p->dport << 16)) + p->proto + init);
}

/* Rewrite one end of a packet (its address at `addr_off`, its port at `port_off`) from
 * from/from_port to to/to_port. IPv6 has no header checksum: the L4 checksum takes the
 * address change as a pseudo-header change. Where the skb holds the checksum whole it is
 * updated in place for both changes at once, as for IPv4 (ctx_l4_csum_whole; two helper
 * calls were two fifths of an established IPv6 flow's time); else the kernel's helper takes
 * the address (one call with the summed difference) and the port, and knows a checksum the
 * sender left partial. `store`: ctx_store_bytes flags (tc ingress writes directly). */
static __always_inline int nat6_rewrite(struct __ctx_buff *ctx, const struct pkt6 *p, __u32 addr_off, __u32 port_off,
					const __u8 *from, const __u8 *to, __be16 from_port, __be16 to_port, __u64 store)
{
	__u32 csum_off = p->l4_off + (p->proto == IPPROTO_TCP ? 16 : 6);
	__u64 mangled0 = p->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 diff = csum_diff16(from, to);
	int whole = ctx_l4_csum_whole(ctx);
	__u8 addr[16];

	__builtin_memcpy(addr, to, 16);
	if (whole) {
		if (ctx_l4_csum_update(ctx, csum_off, 0, csum32_replace(diff, from_port, to_port), mangled0, store) < 0)
			return -1;
	} else if (ctx_l4_csum_replace(ctx, csum_off, 0, diff, BPF_F_PSEUDO_HDR | FERRY_F_IPV6 | mangled0) < 0 &&
		   ctx_l4_csum_replace(ctx, csum_off, 0, diff, BPF_F_PSEUDO_HDR | mangled0) < 0) {
		/* BPF_F_IPV6: IPv6 has no header checksum to take the address change, so a
		 * received packet's whole-packet sum (CHECKSUM_COMPLETE) does not move; without it
		 * the helper moves it as for IPv4. A kernel from before that fix (2025, in the
		 * stable series too) refuses the flag: then without it. */
		return -1;
	}
	if (ctx_store_bytes(ctx, addr_off, addr, 16, store) < 0)
		return -1;
	if (from_port == to_port)
		return 0;
	if (!whole && ctx_l4_csum_replace(ctx, csum_off, from_port, to_port, sizeof(to_port) | mangled0) < 0)
		return -1;
	return ctx_store_bytes(ctx, port_off, &to_port, sizeof(to_port), store);
}

/* The L4 checksum (at `csum`) after the addresses changed by the partial sum `addrs` and
 * the ports from `old` to `now`, as nat4_l4_csum_translate: in place where the skb holds
 * it whole, else the kernel's helper with BPF_F_IPV6 (see nat6_rewrite). */
static __always_inline int nat6_l4_csum_translate(struct __ctx_buff *ctx, const struct pkt6 *p, __u32 csum, __u32 addrs,
						  union l4_ports old, union l4_ports now)
{
	__u64 mangled0 = p->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 port_sum = csum32_replace(0, old.word, now.word);

	if (ctx_l4_csum_whole(ctx))
		return ctx_l4_csum_update(ctx, csum, 0, csum32_add(addrs, port_sum), mangled0, CTX_STORE_DIRECT) < 0 ? -1 : 0;
	if (ctx_l4_csum_replace(ctx, csum, 0, addrs, BPF_F_PSEUDO_HDR | FERRY_F_IPV6 | mangled0) < 0 &&
	    ctx_l4_csum_replace(ctx, csum, 0, addrs, BPF_F_PSEUDO_HDR | mangled0) < 0)
		return -1;
	if (old.word != now.word && !ctx_l4_csum_partial(ctx) && ctx_l4_csum_replace(ctx, csum, 0, port_sum, mangled0) < 0)
		return -1;
	return 0;
}

/* Forward a TCP or UDP packet with both ends translated, as nat4_rewrite_forwarded: `h`
 * (its head as read from the frame) gets both addresses, the hop limit one down and, with
 * `route` (a successful route lookup), both MACs, written back in one store; then the L4
 * checksum and both ports (a later fragment has neither). For tc_ingress only (direct
 * writes, ctx.h). */
static __always_inline int nat6_rewrite_forwarded(struct __ctx_buff *ctx, const struct pkt6 *p, struct eth_ipv6_head *h,
						  const __u8 *saddr, __be16 sport, const __u8 *daddr, __be16 dport,
						  const struct bpf_fib_lookup *route)
{
	union l4_ports ports = { .sport = sport, .dport = dport }, old_ports = { .sport = p->sport, .dport = p->dport };
	__u64 sum = csum64_diff16(csum64_diff16(0, (const __u8 *)&h->ip.saddr, saddr), (const __u8 *)&h->ip.daddr, daddr);
	__u32 addrs = csum64_fold(sum);
	long rc;

	/* Summed here, before the addresses are written over: else the compiler keeps their
	 * old words for a sum it makes later, spilling them (the frame's room is tight). */
	asm volatile("" : "+r"(addrs));
	h->ip.hop_limit--; /* not in the pseudo header: no checksum moves */
	__builtin_memcpy(&h->ip.saddr, saddr, 16);
	__builtin_memcpy(&h->ip.daddr, daddr, 16);
	if (route) {
		__builtin_memcpy(h->macs, route->dmac, ETH_ALEN);
		__builtin_memcpy(h->macs + ETH_ALEN, route->smac, ETH_ALEN);
		rc = ctx_store_bytes(ctx, 0, h->macs, ETH_HLEN + sizeof(h->ip), CTX_STORE_DIRECT);
	} else {
		rc = ctx_store_bytes(ctx, IP6_HOP_LIMIT_OFF, &h->ip.hop_limit, sizeof(h->ip) - offsetof(struct ipv6hdr, hop_limit),
				     CTX_STORE_DIRECT);
	}
	if (rc < 0)
		return -1;
	if (p->fragment == PKT6_LATER_FRAGMENT)
		return 0; /* no L4 header: the first fragment's checksum took the addresses */
	if (nat6_l4_csum_translate(ctx, p, p->l4_off + (p->proto == IPPROTO_TCP ? 16 : 6), addrs, old_ports, ports) < 0)
		return -1;
	if (ports.word == old_ports.word)
		return 0;
	return ctx_store_bytes(ctx, p->l4_off, &ports, sizeof(ports), CTX_STORE_DIRECT);
}

#endif
