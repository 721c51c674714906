/* Conntrack lifetimes and refresh for north-south flows. */
#ifndef FERRY_LIB_CT_H
#define FERRY_LIB_CT_H

#include "config.h"
#include "maps.h"
#include "parse.h"

/* How long a flow lives from now, given its flags after this packet. */
static __always_inline __u64 ct_lifetime_ns(__u8 proto, __u8 flags)
{
	__u32 s;

	if (proto != IPPROTO_TCP)
		s = ct_lifetime_nontcp;
	else if (flags & CT_F_CLOSING)
		s = ct_lifetime_tcp_closing;
	else if (flags & CT_F_SEEN_REPLY)
		s = ct_lifetime_tcp_established;
	else
		s = ct_lifetime_tcp_syn;
	return (__u64)s * NSEC_PER_SEC;
}

static __always_inline int ct_expired(__u64 expires_ns, __u64 now)
{
	return expires_ns < now;
}

/* A SYN (without ACK) on a tuple whose flow is closing opens a new connection: the old
 * entry must not steer it (the client reused its port). */
static __always_inline int ct_tcp_reopen(const struct pkt4 *p, __u8 flags)
{
	return p->proto == IPPROTO_TCP && (flags & CT_F_CLOSING) &&
	       (p->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
}

/* The first reply of a new connection (SYN-ACK) meeting an entry of a closed one. */
static __always_inline int ct_tcp_reply_reopen(const struct pkt4 *p, __u8 flags)
{
	return p->proto == IPPROTO_TCP && (flags & CT_F_CLOSING) && (p->tcp_flags & TCP_SYN);
}

/* What a reply tells the client's conntrack entry. The entry and its reply binding must
 * agree: the binding takes the entry's flags on the next client packet. */
#define CT_REPLY_STATE (CT_F_SEEN_REPLY | CT_F_CLOSING | CT_F_RESET)

static __always_inline __u8 ct_flags_after(const struct pkt4 *p, __u8 flags)
{
	if (p->proto == IPPROTO_TCP && (p->tcp_flags & (TCP_FIN | TCP_RST)))
		flags |= CT_F_CLOSING;
	if (p->proto == IPPROTO_TCP && (p->tcp_flags & TCP_RST))
		flags |= CT_F_RESET;
	return flags;
}

static __always_inline void ct4_key_of(const struct pkt4 *p, struct ct4_key *k)
{
	k->saddr = p->saddr;
	k->daddr = p->daddr;
	k->sport = p->sport;
	k->dport = p->dport;
	k->proto = p->proto;
	k->pad[0] = 0;
	k->pad[1] = 0;
	k->pad[2] = 0;
}

/* The client's flow (client → frontend) a reply binding belongs to. */
static __always_inline void ct4_key_of_binding(const struct nat4_entry *nat, __u8 proto, struct ct4_key *k)
{
	k->saddr = nat->client_addr;
	k->daddr = nat->frontend_addr;
	k->sport = nat->client_port;
	k->dport = nat->frontend_port;
	k->proto = proto;
	k->pad[0] = 0;
	k->pad[1] = 0;
	k->pad[2] = 0;
}

/* A reply passed through its binding: the binding and the client's conntrack entry learn
 * what it says (seen a reply, closing, reset) and live on. */
static __always_inline void ct4_track_reply(const struct pkt4 *p, struct nat4_entry *nat)
{
	__u8 flags = ct_flags_after(p, nat->flags | CT_F_SEEN_REPLY);
	struct ct4_key fwd;
	struct ct4_entry *ct;

	nat->flags = flags;
	nat->expires_ns = bpf_ktime_get_ns() + ct_lifetime_ns(p->proto, flags);
	nat->packets++;
	nat->bytes += p->len;
	ct4_key_of_binding(nat, p->proto, &fwd);
	ct = bpf_map_lookup_elem(&ct4, &fwd);
	if (ct) {
		ct->flags |= flags & CT_REPLY_STATE;
		ct->expires_ns = nat->expires_ns;
	}
}

#endif
