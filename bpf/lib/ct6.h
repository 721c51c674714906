/* IPv6 flow keys and what a packet tells a flow (shared/ct6.h), for lib/nodeport6.h and
 * lib/icmp6_related.h. */
#ifndef FERRY_LIB_CT6_H
#define FERRY_LIB_CT6_H

#include "maps.h"
#include "parse6.h"

/* One direction of a flow, by its addresses and ports as that direction's packets carry them. */
static __always_inline void ct6_key_set(struct ct6_key *k, const void *saddr, const void *daddr, __be16 sport, __be16 dport,
					__u8 proto, __u8 dir)
{
	__builtin_memcpy(k->saddr, saddr, 16);
	__builtin_memcpy(k->daddr, daddr, 16);
	k->sport = sport;
	k->dport = dport;
	k->proto = proto;
	k->dir = dir;
	k->pad[0] = 0;
	k->pad[1] = 0;
}

/* The key of a flow's reply direction: the backend answering the client. */
static __always_inline void ct6_reply_key(struct ct6_key *k, const struct pkt6 *p, const struct ct6_entry *flow)
{
	ct6_key_set(k, flow->addr, p->saddr, flow->port, p->sport, p->proto, CT6_DIR_REPLY);
}

/* What a client's packet tells its flow (as ct_flags_client for IPv4, without the RST's
 * sequence check: a closing IPv6 flow only lives shorter, and its next packet finds the
 * same backend by the hash). */
static __always_inline __u8 ct6_flags_client(const struct pkt6 *p, __u8 flags)
{
	if (p->proto != IPPROTO_TCP)
		return flags;
	if (p->tcp_flags & (TCP_FIN | TCP_RST))
		flags |= CT_F_CLOSING;
	else if ((flags & CT_F_SEEN_REPLY) && !(p->tcp_flags & TCP_SYN))
		flags |= CT_F_ESTABLISHED;
	return flags;
}

#endif
