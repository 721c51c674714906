/* Parse Ethernet + IPv4 + the first bytes of TCP/UDP/ICMP into a struct pkt4. Loads go
 * through ctx_load_bytes (bpf_skb_load_bytes or bpf_xdp_load_bytes), so non-linear packets parse the same as linear ones. */
#ifndef FERRY_LIB_PARSE_H
#define FERRY_LIB_PARSE_H

#include "ctx.h"
#include "shared/metrics.h"
#include "shared/lb.h"

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

struct pkt4 {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;      /* ICMP: 0 */
	__be16 dport;      /* ICMP: 0 */
	__u8 proto;
	__u8 tcp_flags;
	__u8 fragment;     /* a later fragment (offset > 0): no L4 header */
	__u8 ttl;
	__u8 icmp_type;
	__u8 icmp_code;
	__u8 ihl_words;
	__u8 tos;         /* the IPv4 header's TOS byte (DSCP and ECN) */
	__u32 l3_off;
	__u32 l4_off;
	__u32 len;         /* ctx length, for byte counters */
	__u16 ip_len;      /* IPv4 total length */
	__u8 dsr_opt;      /* the header carries ferry's DSR option (ihl 7) */
	__u8 pad2;
	__be16 dsr_port;   /* ... with this frontend */
	__be32 dsr_addr;
	__be16 frag_id;    /* the IP id, which ties fragments together */
	__u8 frag_more;    /* MF set: more fragments follow (with offset 0: the first) */
	__u8 df;           /* DF set: a router may not fragment it (fragmentation-needed instead) */
	__u32 tcp_seq;     /* TCP: host order */
	__u32 tcp_seq_len; /* TCP: how far the segment moves the sender's sequence (data, SYN, FIN) */
};

/* The first fragment of a fragmented datagram: it alone carries the L4 header. */
static __always_inline int pkt4_first_fragment(const struct pkt4 *p)
{
	return p->frag_more && !p->fragment;
}

enum parse_result {
	PARSE_OK = 0,
	PARSE_NOT_IPV4 = 1, /* not for us: pass it on */
	PARSE_MALFORMED = 2,
};

static __always_inline int parse_ipv4(struct __ctx_buff *ctx, struct pkt4 *p)
{
	/* Two bytes ahead of the Ethernet header put the IPv4 header on a 4-byte boundary
	 * right after it, so that both come in one load (one helper call in tc). */
	struct {
		__u8 align[2];
		struct ethhdr eth;
		struct iphdr ip;
	} hdr;
	const struct iphdr *ip = &hdr.ip;
	__u16 frag;

	_Static_assert(__builtin_offsetof(typeof(hdr), ip) == __builtin_offsetof(typeof(hdr), eth) + ETH_HLEN, "adjacent headers");
	/* A frame too short for both is told apart by its first 14 bytes, as before. */
	if (ctx_load_bytes(ctx, 0, &hdr.eth, ETH_HLEN + sizeof(hdr.ip)) < 0) {
		if (ctx_load_bytes(ctx, 0, &hdr.eth, sizeof(hdr.eth)) < 0 || hdr.eth.h_proto != bpf_htons(ETH_P_IP))
			return PARSE_NOT_IPV4;
		return PARSE_MALFORMED;
	}
	if (hdr.eth.h_proto != bpf_htons(ETH_P_IP))
		return PARSE_NOT_IPV4;
	if (ip->version != 4 || ip->ihl < 5)
		return PARSE_MALFORMED;
	p->saddr = ip->saddr;
	p->daddr = ip->daddr;
	p->proto = ip->protocol;
	p->ttl = ip->ttl;
	p->ihl_words = ip->ihl;
	p->tos = ip->tos;
	p->l3_off = ETH_HLEN;
	p->l4_off = ETH_HLEN + ip->ihl * 4;
	p->len = ctx_len(ctx);
	p->ip_len = bpf_ntohs(ip->tot_len);
	/* All set on every path: a field left unset is a register the compiler may spill
	 * unwritten, which the verifier refuses. */
	p->dsr_opt = 0;
	p->dsr_port = 0;
	p->dsr_addr = 0;
	if (ip->ihl == 7) {
		__u8 opt[8];

		if (ctx_load_bytes(ctx, ETH_HLEN + sizeof(*ip), opt, sizeof(opt)) == 0 && opt[0] == DSR_OPT_TYPE && opt[1] == DSR_OPT_LEN) {
			p->dsr_opt = 1;
			__builtin_memcpy(&p->dsr_port, &opt[2], 2);
			__builtin_memcpy(&p->dsr_addr, &opt[4], 4);
		}
	}
	p->sport = 0;
	p->dport = 0;
	p->tcp_flags = 0;
	p->icmp_type = 0;
	p->icmp_code = 0;
	p->tcp_seq = 0;
	p->tcp_seq_len = 0;
	p->frag_id = ip->id;
	frag = bpf_ntohs(ip->frag_off);
	p->fragment = (frag & 0x1fff) != 0;
	p->frag_more = (frag & 0x2000) != 0;
	p->df = (frag & 0x4000) != 0;
	if (p->fragment)
		return PARSE_OK;

	if (p->proto == IPPROTO_TCP) {
		__u8 hdr[14];

		if (ctx_load_bytes(ctx, p->l4_off, hdr, sizeof(hdr)) < 0)
			return PARSE_MALFORMED;
		__u32 seq;
		__u32 hdr_len = (hdr[12] >> 4) * 4;
		__u32 l3_len = p->ip_len;

		__builtin_memcpy(&p->sport, &hdr[0], 2);
		__builtin_memcpy(&p->dport, &hdr[2], 2);
		__builtin_memcpy(&seq, &hdr[4], 4);
		p->tcp_flags = hdr[13];
		p->tcp_seq = bpf_ntohl(seq);
		if (l3_len > ip->ihl * 4 + hdr_len)
			p->tcp_seq_len = l3_len - ip->ihl * 4 - hdr_len;
		if (p->tcp_flags & TCP_SYN)
			p->tcp_seq_len++;
		if (p->tcp_flags & TCP_FIN)
			p->tcp_seq_len++;
	} else if (p->proto == IPPROTO_UDP || p->proto == IPPROTO_SCTP) {
		__be16 ports[2];

		if (ctx_load_bytes(ctx, p->l4_off, ports, sizeof(ports)) < 0)
			return PARSE_MALFORMED;
		p->sport = ports[0];
		p->dport = ports[1];
	} else if (p->proto == IPPROTO_ICMP) {
		__u8 hdr[2];

		if (ctx_load_bytes(ctx, p->l4_off, hdr, sizeof(hdr)) < 0)
			return PARSE_MALFORMED;
		p->icmp_type = hdr[0];
		p->icmp_code = hdr[1];
	}
	return PARSE_OK;
}

#endif
