/* A pod's reply binding contested. A local backend's replies are matched by the tuple the
 * pod sees (pod:port ↔ client:port), which names no frontend: a client that reuses its
 * port towards another frontend of the same pod (or two clients behind one NAT address)
 * arrives on the tuple of a flow that may still be live. Overwriting that binding would
 * send the live connection's replies out as the other frontend, where the client's socket
 * for it answers with a reset that, carried back to the pod, ends the live connection (for
 * UDP: the live flow's answers leave as the other frontend, which its client drops).
 *
 * A new flow (its first packet: a TCP SYN or a UDP datagram) therefore takes another
 * client port at the pod, as netfilter's NAT gives a clashing tuple a unique one
 * (binding_remap): both flows go on at once. Where a flow's own binding was lost (LRU
 * eviction) and another flow took its tuple meanwhile, a SYN of it only leaves the binding
 * pending, and the pod decides: its SYN-ACK means it took a new connection on the tuple
 * (the old one is gone), so the binding moves; anything else (the challenge ACK a live
 * connection answers a SYN with) means the old flow lives on. DSR arrivals (dsr.h): a
 * datagram is remapped (each carries its frontend); a TCP SYN contests, as only the SYN
 * names the frontend and the flow's later segments could not be given the port. */
#ifndef FERRY_LIB_CONTEST_H
#define FERRY_LIB_CONTEST_H

#include "config.h"
#include "maps.h"
#include "clock.h"
#include "ct.h"
#include "hash.h"

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

/* The `i`th client port to try for a flow whose own tuple another flow holds: from the
 * same class as the client's own, as netfilter picks (1-511 for a port below 512, 600-1023
 * below 1024, else 1024-65535), in an order the flow's hash sets. */
static __always_inline __u16 local_remap_port(__u16 client_port, __u32 hash, __u32 i)
{
	__u32 min = 1024, span = 65536 - 1024;

	if (client_port < 512) {
		min = 1;
		span = 511;
	} else if (client_port < 1024) {
		min = 600;
		span = 1024 - 600;
	}
	return min + (hash + i * ((hash >> 16) | 1)) % span;
}

/* A new local flow (packet `p`) whose tuple at the pod (`reply`) another flow holds live
 * takes another client port the pod sees: written into `reply`, and for a flow of this
 * node's frontend into its entry `ct` (nat_addr: the client, nat_port: the port) so that
 * its packets carry it (a DSR arrival, `ct` NULL, names its frontend in its option and
 * carries it in every datagram). The port is the flow's own binding if one of the tries
 * holds it (a flow whose conntrack entry was lost finds the port its pod knows again):
 * REMAP_OWN; else, where `fresh` (the flow's first packet), the first try no live binding
 * holds: REMAP_FREE, for the caller to write the binding there. 0 when a flow that is not
 * fresh finds its own nowhere (its packets go on unremapped); -2 when a fresh one finds no
 * free port. A global function (lib/common.h) that holds no binding in its frame:
 * nat4_keep's chain of calls has no room for more. */
enum binding_remap_result {
	REMAP_FREE = 1,
	REMAP_OWN = 2,
};

__ferry_global int binding_remap(const struct pkt4 *p, struct ct4_key *reply, struct ct4_entry *ct, int fresh)
{
	__u32 hash, i;
	__be16 free_port = 0, own_port = 0;
	__be32 fe_addr;
	__be16 fe_port;
	__u64 now = ferry_now();

	if (!p || !reply)
		return -1;
	fe_addr = p->dsr_opt ? p->dsr_addr : p->daddr;
	fe_port = p->dsr_opt ? p->dsr_port : p->dport;
	hash = flow_hash4(p->saddr, fe_addr, p->sport, fe_port, p->proto, hash_seed);
	for (i = 0; i < LOCAL_REMAP_TRIES && !own_port; i++) {
		struct nat4_entry *held;

		reply->dport = bpf_htons(local_remap_port(bpf_ntohs(p->sport), hash, i));
		held = bpf_map_lookup_elem(&nat4, reply);
		if (!held || ct_expired(held->expires_ns, now)) {
			if (!free_port)
				free_port = reply->dport;
		} else if (held->client_addr == p->saddr && held->client_port == p->sport && held->frontend_addr == fe_addr &&
			   held->frontend_port == fe_port) {
			own_port = reply->dport;
		}
	}
	reply->dport = own_port ? own_port : fresh ? free_port : 0;
	if (!reply->dport)
		return fresh ? -2 : 0;
	if (ct) {
		ct->nat_addr = p->saddr;
		ct->nat_port = reply->dport;
	}
	if (own_port)
		return REMAP_OWN;
	count_stat(STAT_LOCAL_REMAPPED, p->len); /* a port newly taken: a new flow remapped */
	return REMAP_FREE;
}

#endif
