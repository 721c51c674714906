/* A pod's reply binding contested. A local backend's replies are matched by the tuple the
 * pod sees (pod:port ↔ client:port), which names no frontend: a client that reuses its
 * port towards another frontend of the same pod (or two clients behind one NAT address)
 * arrives on the tuple of a flow that may still be live. Overwriting that binding would
 * send the live connection's replies out as the other frontend, where the client's socket
 * for it answers with a reset that, carried back to the pod, ends the live connection. So
 * a SYN naming another frontend only leaves the binding pending, and the pod decides: its
 * SYN-ACK means it took a new connection on the tuple (the old one is gone), so the
 * binding moves; anything else (the challenge ACK a live connection answers a SYN with)
 * means the old flow lives on, and the newcomer's SYN is answered once it has ended, as
 * netfilter's conntrack refuses a clashing tuple. */
#ifndef FERRY_LIB_CONTEST_H
#define FERRY_LIB_CONTEST_H

#include "config.h"
#include "maps.h"
#include "ct.h"

/* May this packet contest a live local binding of its tuple? A TCP SYN (no ACK) only: the
 * pod's answer to it tells whether the old connection is gone. UDP has no such answer. */
static __always_inline int binding_may_contest(const struct pkt4 *p, __u8 binding_flags)
{
	return p->proto == IPPROTO_TCP && (p->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN && (binding_flags & CT_F_LOCAL);
}

/* A binding another flow holds live (not expired, not closing): contested, not overwritten. */
static __always_inline int binding_held(const struct nat4_entry *nat, __u64 now)
{
	return !ct_expired(nat->expires_ns, now) && !(nat->flags & CT_F_CLOSING);
}

/* The pod's first reply after a contested SYN settles it. A local flow of this node's
 * frontend has its conntrack entry here (its flags and reverse NAT go to the binding); a
 * DSR flow's frontend is another node's. */
static __always_inline void binding_settle(const struct pkt4 *p, struct nat4_entry *nat)
{
	struct ct4_key fwd;
	struct ct4_entry *ct;

	if (!nat->pending_port)
		return;
	if (p->proto == IPPROTO_TCP && (p->tcp_flags & (TCP_SYN | TCP_ACK)) == (TCP_SYN | TCP_ACK)) {
		nat->frontend_addr = nat->pending_addr;
		nat->frontend_port = nat->pending_port;
		ct4_key_of_binding(nat, p->proto, &fwd);
		ct = bpf_map_lookup_elem(&ct4, &fwd);
		if (ct && (ct->flags & CT_F_LOCAL) && !ct_expired(ct->expires_ns, ferry_now())) {
			nat->rev_nat_id = ct->rev_nat_id;
			nat->flags = ct->flags & (CT_F_LOCAL | CT_F_RANGED);
		} else {
			nat->rev_nat_id = 0;
			nat->flags = CT_F_LOCAL | CT_F_DSR;
		}
		nat->packets = 0;
		nat->bytes = 0;
	}
	nat->pending_addr = 0;
	nat->pending_port = 0;
}

#endif
