/* Parse Ethernet + the fixed IPv6 header + the ports of TCP/UDP into a struct pkt6, and
 * what the IPv6 rewrites share (lib/nodeport6.h, lib/icmp6_related.h). */
#ifndef FERRY_LIB_PARSE6_H
#define FERRY_LIB_PARSE6_H

#include <linux/ipv6.h>
#include "ctx.h"
#include "parse.h"
#include "shared/ct6.h" /* struct pkt6 */

#ifndef IPPROTO_ICMPV6
#define IPPROTO_ICMPV6 58
#endif

/* The Fragment header (RFC 8200 4.5): the offset in 8-byte units above the M flag. */
#define IP6_NEXTHDR_FRAGMENT 44
#define IP6_FRAG_OFFSET_MASK 0xfff8
#define IP6_FRAG_MORE 0x0001

struct ip6_frag_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off;
	__be32 id;
};

/* The Ethernet header and the fixed IPv6 header as they lie from the frame's start, two
 * bytes ahead so that the addresses are 4-byte aligned. */
struct eth_ipv6_head {
	__u8 align[2];
	__u8 macs[2 * ETH_ALEN]; /* destination, then source, as in struct ethhdr */
	__be16 h_proto;
	struct ipv6hdr ip;
};

_Static_assert(__builtin_offsetof(struct eth_ipv6_head, ip) - __builtin_offsetof(struct eth_ipv6_head, macs) == ETH_HLEN,
	       "the IPv6 header where it lies in the frame");

/* Ethernet + the fixed IPv6 header + the ports (and TCP flags) when the next header is TCP
 * or UDP (the type when it is ICMPv6), the head read into `h` (a forward writes it back
 * changed, nat6_rewrite_forwarded). PARSE_NOT_IPV4 here means "not IPv6". A Fragment
 * header right after the fixed header is walked when TCP or UDP follows it (`fragment`
 * says which part of its datagram the packet is: a later fragment has no ports); other
 * extension headers are not: the caller leaves such packets to the kernel (proto is the
 * first next header). */
static __always_inline int parse_ipv6_head(struct __ctx_buff *ctx, struct pkt6 *p, struct eth_ipv6_head *h)
{
	if (ctx_load_bytes(ctx, 0, h->macs, ETH_HLEN + sizeof(h->ip)) < 0)
		return PARSE_NOT_IPV4;
	if (h->h_proto != bpf_htons(ETH_P_IPV6))
		return PARSE_NOT_IPV4;
	if (h->ip.version != 6)
		return PARSE_MALFORMED;
	__builtin_memcpy(p->saddr, &h->ip.saddr, 16);
	__builtin_memcpy(p->daddr, &h->ip.daddr, 16);
	p->proto = h->ip.nexthdr;
	p->l4_off = ETH_HLEN + sizeof(h->ip);
	p->len = ctx_len(ctx);
	p->sport = 0;
	p->dport = 0;
	p->tcp_flags = 0;
	p->icmp_type = 0;
	p->fragment = PKT6_WHOLE;
	p->frag_id = 0;
	if (p->proto == IP6_NEXTHDR_FRAGMENT) {
		struct ip6_frag_hdr fh;

		if (ctx_load_bytes(ctx, p->l4_off, &fh, sizeof(fh)) < 0)
			return PARSE_MALFORMED;
		if (fh.nexthdr != IPPROTO_TCP && fh.nexthdr != IPPROTO_UDP)
			return PARSE_OK; /* proto stays the Fragment header's: not translated */
		p->proto = fh.nexthdr;
		p->l4_off += sizeof(fh);
		p->frag_id = fh.id;
		if (fh.frag_off & bpf_htons(IP6_FRAG_OFFSET_MASK)) {
			p->fragment = PKT6_LATER_FRAGMENT;
			return PARSE_OK;
		}
		/* Offset 0 and no more fragments: an atomic fragment, a whole datagram. */
		p->fragment = (fh.frag_off & bpf_htons(IP6_FRAG_MORE)) ? PKT6_FIRST_FRAGMENT : PKT6_WHOLE;
	}
	if (p->proto == IPPROTO_TCP) {
		__u8 th[14];

		if (ctx_load_bytes(ctx, p->l4_off, th, sizeof(th)) < 0)
			return PARSE_MALFORMED;
		__builtin_memcpy(&p->sport, &th[0], 2);
		__builtin_memcpy(&p->dport, &th[2], 2);
		p->tcp_flags = th[13];
	} else if (p->proto == IPPROTO_UDP) {
		__be16 ports[2];

		if (ctx_load_bytes(ctx, p->l4_off, ports, sizeof(ports)) < 0)
			return PARSE_MALFORMED;
		p->sport = ports[0];
		p->dport = ports[1];
	} else if (p->proto == IPPROTO_ICMPV6) {
		if (ctx_load_bytes(ctx, p->l4_off, &p->icmp_type, 1) < 0)
			return PARSE_MALFORMED;
	}
	return PARSE_OK;
}

/* parse_ipv6_head, the head not kept. */
static __always_inline int parse_ipv6(struct __ctx_buff *ctx, struct pkt6 *p)
{
	struct eth_ipv6_head h;

	return parse_ipv6_head(ctx, p, &h);
}

/* bpf_l4_csum_replace's BPF_F_IPV6 (an enum in linux/bpf.h, which older headers lack, so
 * not testable by the preprocessor). */
#define FERRY_F_IPV6 (1ULL << 7)

#define IP6_SADDR_OFF (ETH_HLEN + offsetof(struct ipv6hdr, saddr))
#define IP6_DADDR_OFF (ETH_HLEN + offsetof(struct ipv6hdr, daddr))
#define IP6_HOP_LIMIT_OFF (ETH_HLEN + offsetof(struct ipv6hdr, hop_limit))

#endif
