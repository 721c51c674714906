/* Parse Ethernet + the fixed IPv6 header + the ports of TCP/UDP into a struct pkt6, and
 * what the IPv6 rewrites share (lib/nodeport6.h, lib/icmp6_related.h). */
#ifndef FERRY_LIB_PARSE6_H
#define FERRY_LIB_PARSE6_H

#include <linux/ipv6.h>
#include "ctx.h"
#include "parse.h"

#ifndef IPPROTO_ICMPV6
#define IPPROTO_ICMPV6 58
#endif

struct pkt6 {
	__u8 saddr[16];
	__u8 daddr[16];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 tcp_flags;
	__u8 icmp_type; /* ICMPv6 */
	__u8 pad;
	__u32 l4_off;
	__u32 len;
};

/* Ethernet + the fixed IPv6 header + the ports (and TCP flags) when the next header is TCP
 * or UDP (the type when it is ICMPv6). PARSE_NOT_IPV4 here means "not IPv6". Extension headers are not walked: the
 * caller leaves such packets to the kernel (proto is the first next header). */
static __always_inline int parse_ipv6(struct __ctx_buff *ctx, struct pkt6 *p)
{
	struct {
		__u8 align[2];
		struct ethhdr eth;
		struct ipv6hdr ip;
	} hdr;

	_Static_assert(__builtin_offsetof(typeof(hdr), ip) == __builtin_offsetof(typeof(hdr), eth) + ETH_HLEN, "adjacent headers");
	if (ctx_load_bytes(ctx, 0, &hdr.eth, ETH_HLEN + sizeof(hdr.ip)) < 0)
		return PARSE_NOT_IPV4;
	if (hdr.eth.h_proto != bpf_htons(ETH_P_IPV6))
		return PARSE_NOT_IPV4;
	if (hdr.ip.version != 6)
		return PARSE_MALFORMED;
	__builtin_memcpy(p->saddr, &hdr.ip.saddr, 16);
	__builtin_memcpy(p->daddr, &hdr.ip.daddr, 16);
	p->proto = hdr.ip.nexthdr;
	p->l4_off = ETH_HLEN + sizeof(hdr.ip);
	p->len = ctx_len(ctx);
	p->sport = 0;
	p->dport = 0;
	p->tcp_flags = 0;
	p->icmp_type = 0;
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

/* bpf_l4_csum_replace's BPF_F_IPV6 (an enum in linux/bpf.h, which older headers lack, so
 * not testable by the preprocessor). */
#define FERRY_F_IPV6 (1ULL << 7)

#define IP6_SADDR_OFF (ETH_HLEN + offsetof(struct ipv6hdr, saddr))
#define IP6_DADDR_OFF (ETH_HLEN + offsetof(struct ipv6hdr, daddr))

#endif
