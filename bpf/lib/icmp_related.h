/* ICMP errors that belong to a translated flow are translated too, so path-MTU discovery
 * and unreachable errors reach the right end in both directions. */
#ifndef FERRY_LIB_ICMP_RELATED_H
#define FERRY_LIB_ICMP_RELATED_H

#include "maps.h"
#include "ct.h"
#include "lb.h"
#include "fib.h"
#include "icmp.h"

/* An ICMP error arriving for a translated flow. Two cases:
 *  - it quotes our SNATed packet to a remote backend (node:nat_port → backend): send it
 *    to the client as if it quoted the client's packet to the frontend;
 *  - it quotes our reply to the client (frontend → client): send it to the backend as if
 *    it quoted the backend's packet. This is the path-MTU case for large replies. */
__ferry_global int icmp_related_ingress(struct __ctx_buff *ctx, const struct pkt4 *p)
{
	struct icmp4_inner in;
	struct ct4_key k;

	if (!p)
		return CTX_ACT_UNSPEC;
	if (icmp4_parse_inner(ctx, p, &in) < 0)
		return CTX_ACT_UNSPEC;

	/* Quoted: node:nat_port → backend. The nat4 key is that tuple reversed. */
	k.saddr = in.daddr;
	k.daddr = in.saddr;
	k.sport = in.dport;
	k.dport = in.sport;
	k.proto = in.proto;
	k.pad[0] = k.pad[1] = k.pad[2] = 0;
	{
		struct nat4_entry *nat = bpf_map_lookup_elem(&nat4, &k);

		if (nat && (nat->flags & CT_F_SNAT) && p->daddr == in.saddr) {
			if (p->ttl <= 1)
				return count_drop(DROP_TTL_EXCEEDED, p->len);
			if (icmp4_inner_rewrite_addr(ctx, &in, NAT_SRC, in.saddr, nat->client_addr) < 0 ||
			    icmp4_inner_rewrite_port(ctx, &in, NAT_SRC, in.sport, nat->client_port) < 0 ||
			    icmp4_inner_rewrite_addr(ctx, &in, NAT_DST, in.daddr, nat->frontend_addr) < 0 ||
			    icmp4_inner_rewrite_port(ctx, &in, NAT_DST, in.dport, nat->frontend_port) < 0 ||
			    icmp4_outer_rewrite_addr(ctx, p, NAT_DST, p->daddr, nat->client_addr) < 0 ||
			    ipv4_dec_ttl(ctx, p) < 0)
				return count_drop(DROP_CSUM_FAILED, p->len);
			count_stat(STAT_ICMP_RELATED, p->len);
			return fib_redirect4(ctx, p->saddr, nat->client_addr);
		}
	}

	/* Quoted: frontend → client. The ct4 key is that tuple reversed. */
	{
		struct ct4_entry *ct = bpf_map_lookup_elem(&ct4, &k);
		struct lb4_backend *b;

		if (!ct || p->daddr != in.saddr)
			return CTX_ACT_UNSPEC;
		b = lb4_backend(ct->backend_id);
		if (!b)
			return CTX_ACT_UNSPEC;
		if (!(ct->flags & CT_F_LOCAL) && p->ttl <= 1)
			return count_drop(DROP_TTL_EXCEEDED, p->len);
		if (icmp4_inner_rewrite_addr(ctx, &in, NAT_SRC, in.saddr, b->address) < 0 ||
		    icmp4_inner_rewrite_port(ctx, &in, NAT_SRC, in.sport, b->port) < 0 ||
		    icmp4_outer_rewrite_addr(ctx, p, NAT_DST, p->daddr, b->address) < 0)
			return count_drop(DROP_CSUM_FAILED, p->len);
		/* A local flow remapped (contest.h): its pod knows the client by the other port. */
		if ((ct->flags & CT_F_LOCAL) && ct->nat_port &&
		    icmp4_inner_rewrite_port(ctx, &in, NAT_DST, in.dport, ct->nat_port) < 0)
			return count_drop(DROP_CSUM_FAILED, p->len);
		count_stat(STAT_ICMP_RELATED, p->len);
		if (ct->flags & CT_F_LOCAL)
			return CTX_ACT_OK;
		/* Remote backend: it knows the flow as node:nat_port → backend. */
		if (icmp4_inner_rewrite_addr(ctx, &in, NAT_DST, in.daddr, ct->nat_addr) < 0 ||
		    icmp4_inner_rewrite_port(ctx, &in, NAT_DST, in.dport, ct->nat_port) < 0 ||
		    icmp4_outer_rewrite_addr(ctx, p, NAT_SRC, p->saddr, ct->nat_addr) < 0 ||
		    ipv4_dec_ttl(ctx, p) < 0)
			return count_drop(DROP_CSUM_FAILED, p->len);
		return fib_redirect4(ctx, ct->nat_addr, b->address);
	}
}

#endif
