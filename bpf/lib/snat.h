/* SNAT bindings for flows to remote backends: a nat4 entry keyed by the reply tuple
 * (backend → node:port) reserves the port; it is taken over once its flow is over. */
#ifndef FERRY_LIB_SNAT_H
#define FERRY_LIB_SNAT_H

#include "config.h"
#include "maps.h"
#include "ct.h"
#include "lb.h"

/* A binding is being taken over: the old flow's conntrack entry must not keep sending
 * through the port (unless the client reopened that tuple and it now uses another). */
static __always_inline void snat4_forget_flow(const struct nat4_entry *old, const struct ct4_key *reply)
{
	struct ct4_key fwd;
	struct ct4_entry *ct;

	ct4_key_of_binding(old, reply->proto, &fwd);
	ct = bpf_map_lookup_elem(&ct4, &fwd);
	if (ct && (ct->flags & CT_F_SNAT) && ct->nat_port == reply->dport)
		bpf_map_delete_elem(&ct4, &fwd);
}

/* Reserve the reply tuple (backend → node:port) for a new SNAT binding: the client's own
 * port if free, else random ports in range. Returns the port (network order) or 0. */
static __always_inline __be16 snat4_reserve(const struct pkt4 *p, const struct lb4_backend *b,
					    const struct lb4_key *fe, __u32 rev_nat_id, __u64 now)
{
	struct nat4_entry nat = {
		.expires_ns = now + ct_lifetime_ns(p->proto, CT_F_SNAT),
		.client_addr = p->saddr,
		.client_port = p->sport,
		.frontend_addr = fe->address,
		.frontend_port = fe->port,
		.rev_nat_id = rev_nat_id,
		.flags = CT_F_SNAT,
	};
	struct ct4_key reply = {
		.saddr = b->address,
		.daddr = snat_ipv4,
		.sport = b->port,
		.proto = p->proto,
	};
	__u16 port = bpf_ntohs(p->sport);
	__u32 span = (__u32)snat_port_max - snat_port_min + 1;
	__u32 i;

	for (i = 0; i <= 32; i++) {
		struct nat4_entry *old;

		if (i > snat_retries)
			break;
		if (i > 0 || port < snat_port_min || port > snat_port_max)
			port = snat_port_min + (bpf_get_prandom_u32() % span);
		reply.dport = bpf_htons(port);
		if (bpf_map_update_elem(&nat4, &reply, &nat, BPF_NOEXIST) == 0)
			return reply.dport;
		/* Taken: by a live flow, or by one that expired and awaits collection, or by
		 * one that was reset. A reset flow is over at both ends, yet its binding would
		 * hold the port for the closing lifetime: clients that close with a reset at a
		 * high rate would exhaust the range. */
		old = bpf_map_lookup_elem(&nat4, &reply);
		if (old && (ct_expired(old->expires_ns, now) || (old->flags & CT_F_RESET))) {
			snat4_forget_flow(old, &reply);
			if (bpf_map_update_elem(&nat4, &reply, &nat, BPF_EXIST) == 0)
				return reply.dport;
		}
	}
	return 0;
}

/* Free the SNAT binding of a flow that is being replaced (its backend still known). */
static __always_inline void snat4_release(const struct ct4_entry *ct, __u8 proto)
{
	struct lb4_backend *b;
	struct ct4_key reply = {};

	if (!(ct->flags & CT_F_SNAT))
		return;
	b = lb4_backend(ct->backend_id);
	if (!b)
		return;
	reply.saddr = b->address;
	reply.daddr = ct->nat_addr;
	reply.sport = b->port;
	reply.dport = ct->nat_port;
	reply.proto = proto;
	bpf_map_delete_elem(&nat4, &reply);
}

#endif
