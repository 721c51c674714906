/* ICMPv6 errors about IPv6 flows tc translated (lib/nodeport6.h), translated the same way,
 * so that the end they are for can match them to its socket. IPv6 routers never fragment:
 * a Packet Too Big that did not reach its sender's socket would leave the flow stuck on
 * every segment larger than the path (a PMTU black hole).
 *
 * ingress: an error about a reply that left as the frontend (quoting frontend → client),
 *          sent to the frontend: to the pod, quoting pod → client; a remote pod's (an
 *          SNATed flow, lib/snat6.h): to that pod, quoting pod → node:port, which the
 *          kernel forwards to the pod's node.
 *          An error about a client's packet SNATed towards a remote pod (quoting
 *          node:port → pod), sent to the node: to the client quoting client → frontend,
 *          and from the frontend where the pod sent it (the kernel routes it on).
 * egress:  an error about a client's packet after its DNAT (quoting client → pod), from the
 *          pod or from this node: to the client quoting client → frontend, and from the
 *          frontend where the pod sent it.
 *
 * The quoted L4 checksum is left as it was (the receivers match addresses and ports), as
 * for IPv4. */
#ifndef FERRY_LIB_ICMP6_RELATED_H
#define FERRY_LIB_ICMP6_RELATED_H

#include "maps.h"
#include "csum.h"
#include "parse6.h"
#include "lb6.h"
#include "ct6.h"
#include "nat6.h"

#define ICMPV6_ERROR_MAX 4 /* destination unreachable 1, packet too big 2, time exceeded 3, parameter problem 4 */
#define ICMPV6_NDP_FIRST 133 /* router solicitation .. redirect (137): neighbour discovery */
#define ICMPV6_NDP_LAST 137

/* What follows the ICMPv6 header of an error: the start of the offending packet. */
struct icmp6_quote {
	struct ipv6hdr ip;
	__be16 sport;
	__be16 dport;
};

#define ICMP6_CSUM_OFF(p) ((p)->l4_off + 2)
#define QUOTE_OFF(p) ((p)->l4_off + 8)
#define QUOTE_SADDR_OFF(p) (QUOTE_OFF(p) + offsetof(struct ipv6hdr, saddr))
#define QUOTE_DADDR_OFF(p) (QUOTE_OFF(p) + offsetof(struct ipv6hdr, daddr))
#define QUOTE_SPORT_OFF(p) (QUOTE_OFF(p) + sizeof(struct ipv6hdr))
#define QUOTE_DPORT_OFF(p) (QUOTE_OFF(p) + sizeof(struct ipv6hdr) + 2)

/* Rewrite a quoted address and port, and (when `outer_off`) the outer address at that
 * offset, keeping the ICMPv6 checksum right: the quote is message body, the outer address
 * is the pseudo-header. */
static __always_inline int icmp6_rewrite(struct __ctx_buff *ctx, const struct pkt6 *p, __u32 quote_addr_off, __u32 quote_port_off,
					 const __u8 *from, const __u8 *to, __be16 from_port, __be16 to_port, __u32 outer_off)
{
	__u32 diff = csum_diff16(from, to);
	__u8 addr[16];

	__builtin_memcpy(addr, to, 16);
	if (ctx_l4_csum_replace(ctx, ICMP6_CSUM_OFF(p), 0, diff, 0) < 0 || ctx_store_bytes(ctx, quote_addr_off, addr, 16, 0) < 0)
		return -1;
	if (from_port != to_port &&
	    (ctx_l4_csum_replace(ctx, ICMP6_CSUM_OFF(p), from_port, to_port, sizeof(to_port)) < 0 ||
	     ctx_store_bytes(ctx, quote_port_off, &to_port, sizeof(to_port), 0) < 0))
		return -1;
	if (!outer_off)
		return 0;
	if (ctx_l4_csum_replace(ctx, ICMP6_CSUM_OFF(p), 0, diff, BPF_F_PSEUDO_HDR | FERRY_F_IPV6) < 0 &&
	    ctx_l4_csum_replace(ctx, ICMP6_CSUM_OFF(p), 0, diff, BPF_F_PSEUDO_HDR) < 0)
		return -1;
	return ctx_store_bytes(ctx, outer_off, addr, 16, 0);
}

/* The ICMPv6 error's type and the quote, if this is an error quoting TCP or UDP. */
static __always_inline int icmp6_error_quote(struct __ctx_buff *ctx, const struct pkt6 *p, struct icmp6_quote *q)
{
	if (p->icmp_type < 1 || p->icmp_type > ICMPV6_ERROR_MAX)
		return -1;
	if (ctx_load_bytes(ctx, QUOTE_OFF(p), q, sizeof(*q)) < 0)
		return -1;
	return q->ip.nexthdr == IPPROTO_TCP || q->ip.nexthdr == IPPROTO_UDP ? 0 : -1;
}

/* tc ingress: an error sent to the node about a client's packet it SNATed (quoting
 * node:port → backend): the flow's binding names the client and the frontend. `k` is the
 * caller's key, free to reuse. */
static __always_inline int icmp6_related_snat(struct __ctx_buff *ctx, const struct pkt6 *p, const struct icmp6_quote *q,
					      struct ct6_key *k)
{
	struct nat6_entry *nat;

	if (!snat6_is_node(p->daddr) || !lb6_addr_equal((const __u8 *)&q->ip.saddr, p->daddr))
		return CTX_ACT_UNSPEC;
	ct6_key_set(k, &q->ip.daddr, &q->ip.saddr, q->dport, q->sport, q->ip.nexthdr, CT6_DIR_REPLY);
	nat = bpf_map_lookup_elem(&nat6, k);
	if (!nat)
		return CTX_ACT_UNSPEC;
	/* From the backend itself (its port unreachable, say): from the frontend too. */
	if (icmp6_rewrite(ctx, p, QUOTE_SADDR_OFF(p), QUOTE_SPORT_OFF(p), k->daddr, nat->client_addr, q->sport, nat->client_port,
			  IP6_DADDR_OFF) < 0 ||
	    icmp6_rewrite(ctx, p, QUOTE_DADDR_OFF(p), QUOTE_DPORT_OFF(p), k->saddr, nat->frontend_addr, q->dport, nat->frontend_port,
			  lb6_addr_equal(p->saddr, k->saddr) ? IP6_SADDR_OFF : 0) < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	count_stat(STAT_ICMP_RELATED, p->len);
	return CTX_ACT_OK;
}

/* tc ingress: an error sent to the frontend about one of its replies. */
static __always_inline int icmp6_related_ingress(struct __ctx_buff *ctx, const struct pkt6 *p)
{
	struct ct6_key k = {};
	struct icmp6_quote q;
	struct ct6_entry *flow;

	if (icmp6_error_quote(ctx, p, &q) < 0)
		return CTX_ACT_UNSPEC;
	/* The reply went frontend → client: the client's direction of its flow names the pod. */
	ct6_key_set(&k, &q.ip.daddr, &q.ip.saddr, q.dport, q.sport, q.ip.nexthdr, CT6_DIR_CLIENT);
	flow = bpf_map_lookup_elem(&ct6, &k);
	if (!flow)
		return icmp6_related_snat(ctx, p, &q, &k);
	if (!lb6_addr_equal(p->daddr, k.daddr))
		return CTX_ACT_UNSPEC;
	if (icmp6_rewrite(ctx, p, QUOTE_SADDR_OFF(p), QUOTE_SPORT_OFF(p), k.daddr, flow->addr, q.sport, flow->port, IP6_DADDR_OFF) < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	/* The backend's reply left it for the node's address and port: so must the quote. */
	if (flow->flags & CT_F_SNAT) {
		snat6_node_address(k.daddr); /* the key's frontend is not needed any more */
		if (icmp6_rewrite(ctx, p, QUOTE_DADDR_OFF(p), QUOTE_DPORT_OFF(p), k.saddr, k.daddr, q.dport, flow->nat_port, 0) < 0)
			return count_drop(DROP_CSUM_FAILED, p->len);
	}
	count_stat(STAT_ICMP_RELATED, p->len);
	return CTX_ACT_OK;
}

/* tc egress: an error from the pod or this node about a client's packet after its DNAT. */
static __always_inline int icmp6_related_egress(struct __ctx_buff *ctx, const struct pkt6 *p)
{
	struct ct6_key k = {};
	struct icmp6_quote q;
	struct ct6_entry *reply;

	if (icmp6_error_quote(ctx, p, &q) < 0)
		return CTX_ACT_UNSPEC;
	/* The packet went client → pod: the reply's direction of its flow names the frontend. */
	ct6_key_set(&k, &q.ip.daddr, &q.ip.saddr, q.dport, q.sport, q.ip.nexthdr, CT6_DIR_REPLY);
	reply = bpf_map_lookup_elem(&ct6, &k);
	if (!reply)
		return CTX_ACT_UNSPEC;
	/* The key's source is the pod. From the pod itself (its port unreachable, say): the
	 * error leaves from the frontend too. */
	if (icmp6_rewrite(ctx, p, QUOTE_DADDR_OFF(p), QUOTE_DPORT_OFF(p), k.saddr, reply->addr, q.dport, reply->port,
			  lb6_addr_equal(p->saddr, k.saddr) ? IP6_SADDR_OFF : 0) < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	count_stat(STAT_ICMP_RELATED, p->len);
	return CTX_ACT_OK;
}

#endif
