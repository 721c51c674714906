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
	else if (flags & CT_F_ESTABLISHED)
		s = ct_lifetime_tcp_established;
	else
		s = ct_lifetime_tcp_syn;
	return (__u64)s * NSEC_PER_SEC;
}

static __always_inline int ct_expired(__u64 expires_ns, __u64 now)
{
	return expires_ns < now;
}

/* Must a flow's lifetime (and its other direction's entry) be written for this packet?
 * When its state changed, or its lifetime moves by a second or more: in between, the
 * per-packet write and the lookup of the other direction's entry are skipped, at the cost
 * of a flow living up to a second less than it could. Also when routes changed since the
 * last write (ferry_hop_epoch), as the write routes the flow again: with the same flags
 * the lifetime is the same, so that write was `new_expires - old_expires` ago. */
#define CT_REFRESH_NS NSEC_PER_SEC
static __always_inline int ct_refresh_due(__u8 old_flags, __u8 new_flags, __u64 old_expires, __u64 new_expires,
					  __u64 now)
{
	__u64 since_write;

	if (old_flags != new_flags || new_expires < old_expires)
		return 1;
	since_write = new_expires - old_expires;
	return since_write >= CT_REFRESH_NS || now < hops_valid_since() + since_write;
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
#define CT_REPLY_STATE (CT_F_SEEN_REPLY | CT_F_CLOSING | CT_F_RESET | CT_F_ESTABLISHED)

/* a is after b in sequence space (RFC 1982 serial arithmetic). */
static __always_inline int seq_after(__u32 a, __u32 b)
{
	return (__s32)(a - b) > 0;
}

/* What a packet from the client tells its flow. A RST ends the flow (its SNAT port free
 * at once) only when it carries the sequence number the client was due to send: a blind
 * RST from elsewhere must not free a port the backend's connection still holds. The
 * handshake is complete when the client sends a non-SYN segment after a reply. */
static __always_inline __u8 ct_flags_client(const struct pkt4 *p, __u8 flags, __u32 seq_next)
{
	if (p->proto != IPPROTO_TCP)
		return flags;
	if (p->tcp_flags & (TCP_FIN | TCP_RST))
		flags |= CT_F_CLOSING;
	if ((p->tcp_flags & TCP_RST) && p->tcp_seq == seq_next)
		flags |= CT_F_RESET;
	if ((flags & CT_F_SEEN_REPLY) && (p->tcp_flags & (TCP_SYN | TCP_RST | TCP_ACK)) == TCP_ACK)
		flags |= CT_F_ESTABLISHED;
	return flags;
}

/* What a reply (from the backend) tells its flow: a reply was seen; a RST ends the flow
 * (the backend's end is gone); a non-SYN segment means the backend's connection is
 * established, which it only is once the client acknowledged. */
static __always_inline __u8 ct_flags_reply(const struct pkt4 *p, __u8 flags)
{
	flags |= CT_F_SEEN_REPLY;
	if (p->proto != IPPROTO_TCP)
		return flags;
	if (p->tcp_flags & (TCP_FIN | TCP_RST))
		flags |= CT_F_CLOSING;
	if (p->tcp_flags & TCP_RST)
		flags |= CT_F_RESET;
	else if (!(p->tcp_flags & TCP_SYN))
		flags |= CT_F_ESTABLISHED;
	return flags;
}

/* Where the client's sequence stands after this segment (0 until one was seen). */
static __always_inline __u32 ct_client_seq_next(const struct pkt4 *p, __u32 seq_next)
{
	__u32 next = p->tcp_seq + p->tcp_seq_len;

	if (p->proto != IPPROTO_TCP || (p->tcp_flags & TCP_RST))
		return seq_next;
	if (!seq_next || (p->tcp_flags & TCP_SYN) || seq_after(next, seq_next))
		return next;
	return seq_next;
}

/* A client packet on its flow's entry: state, counters, and the lifetime when due (always
 * for a new entry, whose lifetime is 0). Returns whether the lifetime was written. */
static __always_inline int ct4_account_client(struct ct4_entry *ct, const struct pkt4 *p, __u64 now)
{
	__u8 flags = ct_flags_client(p, ct->flags, ct->client_seq_next);
	__u64 expires = now + ct_lifetime_ns(p->proto, flags);
	int due = ct_refresh_due(ct->flags, flags, ct->expires_ns, expires, now);

	ct->client_seq_next = ct_client_seq_next(p, ct->client_seq_next);
	ct->flags = flags;
	ct->tcp_flags |= p->tcp_flags;
	if (due)
		ct->expires_ns = expires;
	ct->packets++;
	ct->bytes += p->len;
	return due;
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
 * what it says (seen a reply, closing, reset) and live on. Returns whether the lifetime
 * was written. */
static __always_inline int ct4_track_reply(const struct pkt4 *p, struct nat4_entry *nat, __u64 now)
{
	__u8 flags = ct_flags_reply(p, nat->flags);
	__u64 expires = now + ct_lifetime_ns(p->proto, flags);
	int due = ct_refresh_due(nat->flags, flags, nat->expires_ns, expires, now);
	struct ct4_key fwd;
	struct ct4_entry *ct;

	nat->flags = flags;
	nat->packets++;
	nat->bytes += p->len;
	if (!due)
		return 0;
	nat->expires_ns = expires;
	ct4_key_of_binding(nat, p->proto, &fwd);
	ct = bpf_map_lookup_elem(&ct4, &fwd);
	if (ct) {
		ct->flags |= flags & CT_REPLY_STATE;
		ct->expires_ns = nat->expires_ns;
		ct->hop_ifindex = 0; /* routed again by its next packet (as nat4_keep does) */
	}
	return 1;
}

#endif
