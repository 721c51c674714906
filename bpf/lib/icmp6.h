/* ICMPv6 errors ferry sends: port unreachable for an IPv6 frontend with no backend, what
 * kube-proxy's REJECT rule sends (icmp6-port-unreachable): a TCP client sees ECONNREFUSED
 * at once instead of retrying its SYN into silence; and, as the router it is for the
 * packets it forwards to other nodes (lib/snat6.h), packet too big (IPv6 routers never
 * fragment: without it a sender's path MTU discovery has nothing to learn from, and its
 * connection stalls) and hop limit exceeded. */
#ifndef FERRY_LIB_ICMP6_H
#define FERRY_LIB_ICMP6_H

#include <linux/ipv6.h>
#include "config.h"
#include "maps.h"
#include "csum.h"
#include "icmp.h"
#include "parse6.h"

#define ICMP6_DST_UNREACH 1
#define ICMP6_PORT_UNREACH 4
#define ICMP6_PKT_TOO_BIG 2
#define ICMP6_TIME_EXCEED 3
#define ICMP6_EXC_HOPLIMIT 0

/* Which error icmp6_send_error sends. */
enum icmp6_error {
	ICMP6_ERR_PORT_UNREACH, /* from the address the packet was sent to */
	ICMP6_ERR_TOO_BIG,      /* likewise, with the next hop's MTU */
	ICMP6_ERR_HOP_LIMIT,    /* from the node's address (snat6_address), as a router's */
};

/* The offending packet's IPv6 header and 8 bytes of its L4 header, as the IPv4 reject
 * quotes it: all a sender's stack matches its socket by. RFC 4443 asks for as much of the
 * packet as fits in 1280 bytes; a fixed quote keeps the error one store, its checksum a sum
 * over the stack, and the packets it answers (a SYN, a first datagram) are mostly that
 * short anyway. */
#define ICMP6_REJECT_QUOTE (40 + 8)

struct icmp6_reject_pkt {
	struct ipv6hdr ip;
	__u8 type;
	__u8 code;
	__be16 checksum;
	__be32 info; /* packet too big: the MTU; else unused */
	__u8 quote[ICMP6_REJECT_QUOTE];
};

/* The part of the checksum's pseudo-header after the addresses (RFC 8200 8.1). */
struct icmp6_pseudo_tail {
	__be32 len;
	__be32 next_header;
};

/* May an error answer this source (RFC 4443 2.4 e)? Not the unspecified address, the
 * loopback one or a multicast group: none names one sender that could take it. */
static __always_inline int icmp6_source_answerable(const __u8 *saddr)
{
	__u32 w[4];

	__builtin_memcpy(w, saddr, sizeof(w));
	if (saddr[0] == 0xff)
		return 0;
	return w[0] || w[1] || w[2] || (w[3] && w[3] != bpf_htonl(1));
}

/* Turn the packet (a TCP segment or UDP datagram with no extension header, as it arrived:
 * lib/nodeport6.h, lib/snat6.h) into the error `kind` (enum icmp6_error; `mtu` for packet
 * too big) and send it back out of the device it came in on. A frame the link sent to many
 * (broadcast, multicast) or a source no error may answer is dropped, as is any error over
 * the node's ICMP rate (the IPv4 errors' bucket, icmp4_allowed); either way counted with
 * the drop the error stands for. A global function (lib/common.h): its frame is not the
 * IPv6 path's, which is at the verifier's stack limit. */
__ferry_global int icmp6_send_error(struct __sk_buff *ctx, __u32 kind, __u32 mtu)
{
	struct icmp6_reject_pkt r = {};
	struct icmp6_pseudo_tail tail = {
		.len = bpf_htonl(sizeof(r) - sizeof(r.ip)),
		.next_header = bpf_htonl(IPPROTO_ICMPV6),
	};
	__u8 macs[2 * ETH_ALEN];
	__u8 swapped[2 * ETH_ALEN];
	__u32 len = ETH_HLEN + sizeof(r);
	__u32 why = kind == ICMP6_ERR_TOO_BIG ? DROP_TOO_BIG : kind == ICMP6_ERR_HOP_LIMIT ? DROP_TTL_EXCEEDED : DROP_NO_BACKEND;
	__u32 in_len;
	__s64 sum;

	if (!ctx)
		return CTX_ACT_SHOT;
	in_len = ctx_len(ctx);
	if (ctx->pkt_type != PACKET_HOST)
		return count_drop(why, in_len);
	if (ctx_load_bytes(ctx, ETH_HLEN, r.quote, sizeof(r.quote)) < 0 || ctx_load_bytes(ctx, 0, macs, sizeof(macs)) < 0)
		return count_drop(DROP_MALFORMED, in_len);
	if (!icmp6_source_answerable(r.quote + offsetof(struct ipv6hdr, saddr)))
		return count_drop(why, in_len);
	if (!icmp4_allowed())
		return count_drop(DROP_ICMP_RATELIMIT, in_len);
	__builtin_memcpy(swapped, macs + ETH_ALEN, ETH_ALEN);
	__builtin_memcpy(swapped + ETH_ALEN, macs, ETH_ALEN);

	r.ip.version = 6;
	r.ip.payload_len = bpf_htons(sizeof(r) - sizeof(r.ip));
	r.ip.nexthdr = IPPROTO_ICMPV6;
	r.ip.hop_limit = 64;
	if (kind == ICMP6_ERR_HOP_LIMIT)
		snat6_node_address((__u8 *)&r.ip.saddr);
	else
		__builtin_memcpy(&r.ip.saddr, r.quote + offsetof(struct ipv6hdr, daddr), 16);
	__builtin_memcpy(&r.ip.daddr, r.quote + offsetof(struct ipv6hdr, saddr), 16);
	r.type = kind == ICMP6_ERR_TOO_BIG ? ICMP6_PKT_TOO_BIG : kind == ICMP6_ERR_HOP_LIMIT ? ICMP6_TIME_EXCEED : ICMP6_DST_UNREACH;
	r.code = kind == ICMP6_ERR_PORT_UNREACH ? ICMP6_PORT_UNREACH : kind == ICMP6_ERR_HOP_LIMIT ? ICMP6_EXC_HOPLIMIT : 0;
	if (kind == ICMP6_ERR_TOO_BIG)
		r.info = bpf_htonl(mtu);
	/* The pseudo-header (both addresses, adjacent in the header; the length and next
	 * header), then the message itself. */
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&r.ip.saddr, 32, 0);
	if (sum >= 0)
		sum = bpf_csum_diff(NULL, 0, (__be32 *)&tail, sizeof(tail), (__u32)sum);
	if (sum >= 0)
		sum = bpf_csum_diff(NULL, 0, (__be32 *)&r.type, sizeof(r) - sizeof(r.ip), (__u32)sum);
	if (sum < 0)
		return count_drop(DROP_CSUM_FAILED, in_len);
	r.checksum = csum_fold32((__u32)sum);

	if (ctx_resize(ctx, len) < 0 ||
	    ctx_store_bytes(ctx, 0, swapped, sizeof(swapped), 0) < 0 ||
	    ctx_store_bytes(ctx, ETH_HLEN, &r, sizeof(r), 0) < 0)
		return count_drop(DROP_CSUM_FAILED, in_len);
	if (kind == ICMP6_ERR_HOP_LIMIT)
		count_drop(DROP_TTL_EXCEEDED, in_len); /* the packet goes no further, as IPv4's */
	count_stat(kind == ICMP6_ERR_TOO_BIG ? STAT_ICMP_FRAG_NEEDED : kind == ICMP6_ERR_HOP_LIMIT ? STAT_ICMP_TIME_EXCEEDED : STAT_ICMP_REJECT, len);
	return ctx_bounce(ctx);
}

#endif
