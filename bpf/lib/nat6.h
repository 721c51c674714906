/* What IPv6 translation shares (lib/nodeport6.h, lib/snat6.h, lib/icmp6_related.h): the
 * flow hash and the rewrite of one end of a packet (the node's IPv6 address: lib/config.h). */
#ifndef FERRY_LIB_NAT6_H
#define FERRY_LIB_NAT6_H

#include "config.h"
#include "parse6.h"
#include "hash.h"
#include "csum.h"

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
 * address change as a pseudo-header change (one helper call with the summed difference),
 * the port change as a plain one; a checksum the sender left partial takes the first only,
 * which the helper knows. */
static __always_inline int nat6_rewrite(struct __ctx_buff *ctx, const struct pkt6 *p, __u32 addr_off, __u32 port_off,
					const __u8 *from, const __u8 *to, __be16 from_port, __be16 to_port)
{
	__u32 csum_off = p->l4_off + (p->proto == IPPROTO_TCP ? 16 : 6);
	__u64 mangled0 = p->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 diff = csum_diff16(from, to);
	__u8 addr[16];

	__builtin_memcpy(addr, to, 16);
	/* BPF_F_IPV6: IPv6 has no header checksum to take the address change, so a received
	 * packet's whole-packet sum (CHECKSUM_COMPLETE) does not move; without it the helper
	 * moves it as for IPv4. A kernel from before that fix (2025, in the stable series too)
	 * refuses the flag: then without it. */
	if (ctx_l4_csum_replace(ctx, csum_off, 0, diff, BPF_F_PSEUDO_HDR | FERRY_F_IPV6 | mangled0) < 0 &&
	    ctx_l4_csum_replace(ctx, csum_off, 0, diff, BPF_F_PSEUDO_HDR | mangled0) < 0)
		return -1;
	if (ctx_store_bytes(ctx, addr_off, addr, 16, 0) < 0)
		return -1;
	if (from_port == to_port)
		return 0;
	if (ctx_l4_csum_replace(ctx, csum_off, from_port, to_port, sizeof(to_port) | mangled0) < 0)
		return -1;
	return ctx_store_bytes(ctx, port_off, &to_port, sizeof(to_port), 0);
}

#endif
