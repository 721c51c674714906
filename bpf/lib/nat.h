/* Rewriting IPv4 addresses and L4 ports with incremental checksum updates. */
#ifndef FERRY_LIB_NAT_H
#define FERRY_LIB_NAT_H

#include "csum.h"
#include "ctx.h"
#include "parse.h"

/* Which end of a packet (or of a quoted packet) a rewrite changes. */
enum nat_side {
	NAT_DST = 0,
	NAT_SRC = 1,
};

#define IP_CSUM_OFF(p) ((p)->l3_off + offsetof(struct iphdr, check))
#define IP_SADDR_OFF(p) ((p)->l3_off + offsetof(struct iphdr, saddr))
#define IP_DADDR_OFF(p) ((p)->l3_off + offsetof(struct iphdr, daddr))
#define IP_TTL_OFF(p) ((p)->l3_off + offsetof(struct iphdr, ttl))

/* Where the L4 checksum lives (0 if there is none we maintain). */
static __always_inline __u32 l4_csum_off(const struct pkt4 *p)
{
	if (p->proto == IPPROTO_TCP)
		return p->l4_off + 16;
	if (p->proto == IPPROTO_UDP)
		return p->l4_off + 6;
	return 0;
}

static __always_inline __u64 l4_csum_flags(const struct pkt4 *p)
{
	/* A zero UDP checksum means "none" and must stay zero. */
	return p->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
}

/* Rewrite the source or destination address. Returns <0 on helper failure. `store`: the
 * ctx_store_bytes flags (CTX_STORE_DIRECT where tc_egress never comes). */
static __always_inline int nat4_rewrite_addr(struct __ctx_buff *ctx, const struct pkt4 *p, enum nat_side side, __be32 from, __be32 to,
					     __u64 store)
{
	__u32 csum = l4_csum_off(p);

	if (from == to)
		return 0;
	if (csum && !p->fragment &&
	    ctx_l4_csum_replace(ctx, csum, from, to, BPF_F_PSEUDO_HDR | sizeof(to) | l4_csum_flags(p)) < 0)
		return -1;
	if (ctx_l3_csum_replace(ctx, IP_CSUM_OFF(p), from, to, sizeof(to)) < 0)
		return -1;
	return ctx_store_bytes(ctx, side == NAT_SRC ? IP_SADDR_OFF(p) : IP_DADDR_OFF(p), &to, sizeof(to), store);
}

/* Rewrite the source or destination port of TCP/UDP. */
static __always_inline int nat4_rewrite_port(struct __ctx_buff *ctx, const struct pkt4 *p, enum nat_side side, __be16 from, __be16 to,
					     __u64 store)
{
	__u32 csum = l4_csum_off(p);

	if (from == to)
		return 0;
	if (csum && ctx_l4_csum_replace(ctx, csum, from, to, sizeof(to) | l4_csum_flags(p)) < 0)
		return -1;
	return ctx_store_bytes(ctx, p->l4_off + (side == NAT_SRC ? 0 : 2), &to, sizeof(to), store);
}

/* A packet's destination or source endpoint, address and port together. */
static __always_inline int nat4_rewrite_endpoint(struct __ctx_buff *ctx, const struct pkt4 *p, enum nat_side side, __be32 addr, __be16 port,
						 __u64 store)
{
	if (nat4_rewrite_addr(ctx, p, side, side == NAT_SRC ? p->saddr : p->daddr, addr, store) < 0)
		return -1;
	return nat4_rewrite_port(ctx, p, side, side == NAT_SRC ? p->sport : p->dport, port, store);
}

/* The IPv4 header from the TTL to the destination address: what forwarding rewrites. */
struct ipv4_routed_part {
	__u8 ttl;
	__u8 protocol;
	__sum16 check;
	__be32 saddr;
	__be32 daddr;
};

/* Both ports of TCP or UDP, as they lie in the header (one 32-bit word, aligned). */
union l4_ports {
	struct {
		__be16 sport;
		__be16 dport;
	};
	__u32 word;
};

/* The L4 checksum (at `csum`) after the addresses changed by the partial sum `addrs` (left
 * out without `with_addrs`: a later fragment's checksum does not cover them) and the
 * ports from `old` to `now`. Where the skb holds it whole (ctx_l4_csum_whole) one update
 * in place, no helper call; else the kernel's helper, for the addresses (the pseudo
 * header) and for the ports, unless the sender left the checksum partial: a port change
 * leaves such a field as it is (the helper would do nothing). `store`: ctx_store_bytes
 * flags. */
static __always_inline int nat4_l4_csum_translate(struct __ctx_buff *ctx, const struct pkt4 *p, __u32 csum, __u32 addrs,
						  int with_addrs, union l4_ports old, union l4_ports now, __u64 store)
{
	__u32 port_sum = csum32_replace(0, old.word, now.word);

	if (ctx_l4_csum_whole(ctx))
		return ctx_l4_csum_update(ctx, csum, 0, with_addrs ? csum32_add(addrs, port_sum) : port_sum,
					  l4_csum_flags(p), store) < 0 ? -1 : 0;
	if (with_addrs && ctx_l4_csum_replace(ctx, csum, 0, addrs, BPF_F_PSEUDO_HDR | l4_csum_flags(p)) < 0)
		return -1;
	if (old.word != now.word && !ctx_l4_csum_partial(ctx) &&
	    ctx_l4_csum_replace(ctx, csum, 0, port_sum, l4_csum_flags(p)) < 0)
		return -1;
	return 0;
}

/* The Ethernet header and the first 20 bytes of IPv4, as they lie from the frame's start,
 * two bytes ahead so that the IPv4 words are 4-byte aligned. */
struct eth_ipv4_head {
	__u8 align[2];
	__u8 macs[2 * ETH_ALEN]; /* destination, then source, as in struct ethhdr */
	__be16 h_proto;
	__u8 ip_unrouted[8];     /* version .. fragment offset: forwarding leaves them */
	struct ipv4_routed_part ip;
};

_Static_assert(__builtin_offsetof(struct eth_ipv4_head, ip) - __builtin_offsetof(struct eth_ipv4_head, macs) ==
		       ETH_HLEN + __builtin_offsetof(struct iphdr, ttl),
	       "the routed part where it lies in the frame");

/* Forward a packet as both endpoints translated (DNAT and SNAT at once): one read and one
 * write of the Ethernet header and the IPv4 header with its checksum computed here (with
 * `route`, a successful route lookup's MACs written in the same store; NULL: the MACs are
 * left, for a route whose neighbour the kernel resolves), one write of both
 * ports, and the L4 checksum (nat4_l4_csum_translate: in place where whole, else by the
 * kernel's helper). The TTL goes down by one:
 * forwarding to another host is routing. The words are summed as they lie in memory, so
 * the byte order takes care of itself. The parser put the IPv4 header right after the
 * Ethernet header (l3_off is ETH_HLEN). */
static __always_inline int nat4_rewrite_forwarded(struct __ctx_buff *ctx, const struct pkt4 *p, __be32 saddr, __be16 sport,
						  __be32 daddr, __be16 dport, const struct bpf_fib_lookup *route)
{
	__u32 csum = l4_csum_off(p);
	struct eth_ipv4_head h;
	union l4_ports ports = { .sport = sport, .dport = dport }, old_ports = { .sport = p->sport, .dport = p->dport };
	__u16 old_word, new_word;
	__u32 addrs, sum;
	long rc;

	if (ctx_load_bytes(ctx, 0, h.macs, ETH_HLEN + sizeof(struct iphdr)) < 0)
		return -1;
	addrs = csum32_replace(csum32_replace(0, h.ip.saddr, saddr), h.ip.daddr, daddr);
	__builtin_memcpy(&old_word, &h.ip, sizeof(old_word));
	h.ip.ttl--;
	__builtin_memcpy(&new_word, &h.ip, sizeof(new_word));
	sum = csum32_add(addrs, csum32_add((__u16)~old_word, new_word));
	h.ip.check = csum_fold32(csum32_add((__u16)~h.ip.check, sum));
	h.ip.saddr = saddr;
	h.ip.daddr = daddr;
	if (route) {
		__builtin_memcpy(h.macs, route->dmac, ETH_ALEN);
		__builtin_memcpy(h.macs + ETH_ALEN, route->smac, ETH_ALEN);
		rc = ctx_store_bytes(ctx, 0, h.macs, ETH_HLEN + sizeof(struct iphdr), CTX_STORE_DIRECT);
	} else {
		rc = ctx_store_bytes(ctx, IP_TTL_OFF(p), &h.ip, sizeof(h.ip), CTX_STORE_DIRECT);
	}
	if (rc < 0)
		return -1;
	if (!csum)
		return 0;
	if (nat4_l4_csum_translate(ctx, p, csum, addrs, !p->fragment, old_ports, ports, CTX_STORE_DIRECT) < 0)
		return -1;
	if (ports.word == old_ports.word)
		return 0;
	return ctx_store_bytes(ctx, p->l4_off, &ports, sizeof(ports), CTX_STORE_DIRECT);
}

/* The IPv4 header from its checksum to the destination address, as it lies in the packet:
 * what translating one end rewrites, in one store. */
struct ipv4_addr_part {
	__sum16 check;
	__be32 saddr;
	__be32 daddr;
} __attribute__((packed));

/* One end of a packet translated for a local backend's flow: `side`'s address to `addr`,
 * and the ports to `ports` (the other end's port may change too: a remapped flow's client
 * port, contest.h). The IPv4 checksum is computed here and written with the addresses in
 * one store; the L4 checksum as nat4_l4_csum_translate updates it; then the ports in one
 * store. Three stores or helper calls where nat4_rewrite_endpoint makes five to six.
 * `store`: ctx_store_bytes flags. */
static __always_inline int nat4_rewrite_end(struct __ctx_buff *ctx, const struct pkt4 *p, enum nat_side side, __be32 addr,
					    union l4_ports ports, __u64 store)
{
	union l4_ports old_ports = { .sport = p->sport, .dport = p->dport };
	struct ipv4_addr_part h = { .saddr = p->saddr, .daddr = p->daddr };
	__u32 csum = l4_csum_off(p);
	__u32 addrs;

	if (!csum || p->fragment) {
		if (nat4_rewrite_endpoint(ctx, p, side, addr, side == NAT_SRC ? ports.sport : ports.dport, store) < 0)
			return -1;
		return side == NAT_SRC ? nat4_rewrite_port(ctx, p, NAT_DST, p->dport, ports.dport, store)
				       : nat4_rewrite_port(ctx, p, NAT_SRC, p->sport, ports.sport, store);
	}
	addrs = csum32_replace(0, side == NAT_SRC ? p->saddr : p->daddr, addr);
	if (ctx_load_bytes(ctx, IP_CSUM_OFF(p), &h.check, sizeof(h.check)) < 0)
		return -1;
	h.check = csum_fold32(csum32_add((__u16)~h.check, addrs));
	if (side == NAT_SRC)
		h.saddr = addr;
	else
		h.daddr = addr;
	if (ctx_store_bytes(ctx, IP_CSUM_OFF(p), &h, sizeof(h), store) < 0)
		return -1;
	if (nat4_l4_csum_translate(ctx, p, csum, addrs, 1, old_ports, ports, store) < 0)
		return -1;
	if (ports.word == old_ports.word)
		return 0;
	return ctx_store_bytes(ctx, p->l4_off, &ports, sizeof(ports), store);
}

/* A packet to a local backend (tc ingress): its destination endpoint, and a remapped
 * flow's source port (`sport`; 0 keeps it), rewritten in place (nat4_rewrite_end). A
 * global function (lib/common.h): its frame is not nodeport_send's, which has no room left
 * under the 512-byte stack of tc_ingress and its callees. */
__ferry_global int nat4_rewrite_to_local(struct __ctx_buff *ctx, const struct pkt4 *p, __be32 daddr, __be16 dport,
					 __be16 sport)
{
	if (!p)
		return -1;
	return nat4_rewrite_end(ctx, p, NAT_DST, daddr, (union l4_ports){ .sport = sport ? sport : p->sport, .dport = dport },
				CTX_STORE_DIRECT);
}

/* Forwarding to another host is routing: the TTL goes down by one. */
static __always_inline int ipv4_dec_ttl(struct __ctx_buff *ctx, const struct pkt4 *p)
{
	__u8 ttl = p->ttl - 1;
	__be16 old = bpf_htons((__u16)p->ttl << 8);
	__be16 new = bpf_htons((__u16)ttl << 8);

	if (ctx_l3_csum_replace(ctx, IP_CSUM_OFF(p), old, new, sizeof(new)) < 0)
		return -1;
	return ctx_store_bytes(ctx, IP_TTL_OFF(p), &ttl, sizeof(ttl), 0);
}

#endif
