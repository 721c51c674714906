/* IPv6 north-south to a backend on another node (tc): the client's packets are DNATed to
 * the backend and SNATed to the node's IPv6 address (snat6_address) and a port of the SNAT
 * range, which a nat6 binding reserves (keyed by the reply tuple, as nat4's); the
 * backend's replies come back to that address and port and are restored to the frontend
 * and the client. Both directions leave by the route the kernel's FIB gives them.
 *
 * Global functions, each called by tc_ingress in turn, so that no two of their stack
 * frames are on one call chain: nodeport6_ingress (lib/nodeport6.h) parses the packet and
 * looks its flow up; where that is all a packet needs (an established flow's client
 * packet between lifetime writes, a backend's reply: snat6_reply) it hands the packet's
 * new ends straight to nodeport6_forward (lib/forward6.h) through a per-CPU slot, else it
 * hands the packet to nodeport6_snat_flow, which writes the flow's state (a new flow's
 * backend and port, an established one's lifetime) and hands the ends on.
 *
 * ICMPv6 errors about such flows are translated by lib/icmp6_related.h; this node's own
 * (packet too big for the route's device, hop limit spent) are sent by the caller. Next
 * hops are kept per destination (lib/fib6.h). Not built for IPv6: DSR, XDP, and the
 * upgrade switch's hand-over of flows. */
#ifndef FERRY_LIB_SNAT6_H
#define FERRY_LIB_SNAT6_H

#include "config.h"
#include "maps.h"
#include "clock.h"
#include "parse6.h"
#include "nat6.h"
#include "ct.h"
#include "ct6.h"
#include "lb6.h"
#include "fib.h"
#include "snat.h"
#include "forward6.h"

static __always_inline int snat6_binding_ours(const struct nat6_entry *b, const struct nat6_entry *want)
{
	return b->client_port == want->client_port && b->frontend_port == want->frontend_port &&
	       lb6_addr_equal(b->client_addr, want->client_addr) && lb6_addr_equal(b->frontend_addr, want->frontend_addr);
}

/* A binding's key but for its port: the backend → the node's address. */
static __always_inline void snat6_reply_key(struct ct6_key *k, const __u8 *backend, __be16 backend_port, __u8 proto)
{
	__builtin_memcpy(k->saddr, backend, 16);
	snat6_node_address(k->daddr);
	k->sport = backend_port;
	k->dport = 0;
	k->proto = proto;
	k->dir = CT6_DIR_REPLY;
	k->pad[0] = 0;
	k->pad[1] = 0;
}

/* The key of a binding's flow (its client's direction in ct6). */
static __always_inline void snat6_flow_key(struct ct6_key *k, const struct nat6_entry *b, __u8 proto)
{
	ct6_key_set(k, b->client_addr, b->frontend_addr, b->client_port, b->frontend_port, proto, CT6_DIR_CLIENT);
}

/* A binding another flow's is being taken over (its flow is over, or never became
 * established): that flow's conntrack entry must not go on sending through the port
 * (unless the client opened that tuple again since, to another backend or port).
 * `scratch` is any key the caller can spare. */
static __always_inline void snat6_forget_flow(const struct nat6_entry *old, const struct ct6_key *reply, __u8 proto,
					      struct ct6_key *scratch)
{
	struct ct6_entry *ct;

	snat6_flow_key(scratch, old, proto);
	ct = bpf_map_lookup_elem(&ct6, scratch);
	if (ct && (ct->flags & CT_F_SNAT) && ct->nat_port == reply->dport && ct->port == reply->sport &&
	    lb6_addr_equal(ct->addr, reply->saddr))
		bpf_map_delete_elem(&ct6, scratch);
}

_Static_assert(__builtin_offsetof(struct ct6_key, saddr) == __builtin_offsetof(struct bpf_sock_tuple, ipv6.saddr) &&
		       __builtin_offsetof(struct ct6_key, daddr) == __builtin_offsetof(struct bpf_sock_tuple, ipv6.daddr) &&
		       __builtin_offsetof(struct ct6_key, sport) == __builtin_offsetof(struct bpf_sock_tuple, ipv6.sport) &&
		       __builtin_offsetof(struct ct6_key, dport) == __builtin_offsetof(struct bpf_sock_tuple, ipv6.dport),
	       "a ct6 key begins with a socket tuple's IPv6 part");

/* May a socket of the host's own hold this reply tuple (a connection from node:port to
 * the backend, or a listener on node:port)? Asked as snat4_port_in_use is, only for a
 * port the host may have bound (host_ports). The key is the tuple itself (its first 36
 * bytes are one). Out of line, a global function with a frame of a few bytes: inlined,
 * the values kept across its lookups took nodeport6_snat_flow's frame past what its call
 * chain has room for. */
__ferry_global int snat6_port_held(struct __ctx_buff *ctx, struct ct6_key *reply)
{
	struct bpf_sock_tuple *t = (struct bpf_sock_tuple *)reply;
	struct bpf_sock *sk;

	if (!ctx || !reply || !host_port_maybe_bound(bpf_ntohs(reply->dport)))
		return 0;
	if (reply->proto == IPPROTO_TCP)
		sk = (struct bpf_sock *)bpf_skc_lookup_tcp(ctx, t, sizeof(t->ipv6), BPF_F_CURRENT_NETNS, 0);
	else
		sk = bpf_sk_lookup_udp(ctx, t, sizeof(t->ipv6), BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	bpf_sk_release(sk);
	return 1;
}

/* Reserve the reply tuple (backend → node:port) for a flow, as snat4_reserve does: the
 * client's own port if free, then the flow's probe sequence (snat4_probe_port), with none
 * free a never-established flow's port (netfilter's early drop). A port the host's own
 * sockets may hold (host_ports) is asked about first, and left to them. A TCP segment
 * other than a SYN (its conntrack entry was lost) walks the whole sequence for its own
 * binding before it takes a free port. `scratch`: a key it may write. Returns the port
 * (network order) or 0. */
static __always_inline __be16 snat6_reserve(struct __ctx_buff *ctx, const struct pkt6 *p, struct ct6_key *reply,
					    struct nat6_entry *nat, __u32 hash, __u64 now, struct ct6_key *scratch)
{
	__u16 client_port = bpf_ntohs(p->sport);
	__u32 stride = snat4_probe_stride(hash);
	__u32 first_probe = (client_port < snat_port_min || client_port > snat_port_max) ? 0 : 1;
	int retrace = p->proto == IPPROTO_TCP && !(p->tcp_flags & TCP_SYN);
	__be16 free_port = 0, victim = 0;
	int free_over = 0; /* the free port's binding is a finished flow's, written over */
	struct nat6_entry *old;
	__u32 i;

	for (i = 0; i <= 32; i++) {
		if (i > snat_retries)
			break;
		reply->dport = bpf_htons(snat4_probe_port(i, client_port, first_probe, hash, stride));
		old = bpf_map_lookup_elem(&nat6, reply);
		if (old && snat6_binding_ours(old, nat)) {
			*old = *nat;
			return reply->dport;
		}
		if (old && !ct_expired(old->expires_ns, now) && !(old->flags & CT_F_RESET)) {
			if (!victim && !(old->flags & CT_F_ESTABLISHED))
				victim = reply->dport;
			continue;
		}
		if (!free_port) {
			if (snat6_port_held(ctx, reply))
				continue;
			free_port = reply->dport;
			free_over = old != NULL;
		}
		if (!retrace)
			break;
	}
	if (free_port) {
		reply->dport = free_port;
		if (!free_over) /* NOEXIST on a free port: of two new flows racing for it, one gets it. */
			return bpf_map_update_elem(&nat6, reply, nat, BPF_NOEXIST) == 0 ? free_port : 0;
		old = bpf_map_lookup_elem(&nat6, reply);
		if (!old)
			return 0;
		snat6_forget_flow(old, reply, p->proto, scratch);
		*old = *nat;
		return free_port;
	}
	if (!victim)
		return 0;
	reply->dport = victim;
	old = bpf_map_lookup_elem(&nat6, reply);
	if (!old || (old->flags & CT_F_ESTABLISHED))
		return 0;
	snat6_forget_flow(old, reply, p->proto, scratch);
	*old = *nat;
	count_stat(STAT_NAT_EARLY_DROP, p->len);
	return victim;
}

/* Keep a flow's binding as long as the flow (whenever the flow's lifetime is written),
 * with the state its client's packets gave it; or write it again (into `buf`, then the
 * map) when a full nat6 lost it, unless another flow took the port meanwhile. */
static __always_inline void snat6_keep(const struct pkt6 *p, struct ct6_key *reply, const struct ct6_entry *flow,
				       struct nat6_entry *buf)
{
	struct nat6_entry *b;
	__u8 flags = flow->flags & CT_REPLY_STATE;

	if (p->proto == IPPROTO_TCP && (p->tcp_flags & TCP_RST))
		flags |= CT_F_RESET;
	snat6_reply_key(reply, flow->addr, flow->port, p->proto);
	reply->dport = flow->nat_port;
	b = bpf_map_lookup_elem(&nat6, reply);
	if (b) {
		b->flags |= flags;
		b->expires_ns = flow->expires_ns;
		return;
	}
	*buf = (struct nat6_entry){ .expires_ns = flow->expires_ns, .client_port = p->sport, .frontend_port = p->dport,
				    .flags = CT_F_SNAT | flags };
	__builtin_memcpy(buf->client_addr, p->saddr, 16);
	__builtin_memcpy(buf->frontend_addr, p->daddr, 16);
	bpf_map_update_elem(&nat6, reply, buf, BPF_NOEXIST);
}

/* The external frontend's backend slot for a new flow's hash (as nodeport6_new_flow chose
 * it); NULL when the frontend has none any more. *ranged: its flows are CT_F_RANGED. */
static __always_inline struct lb6_service *snat6_flow_backend(const struct pkt6 *p, __u32 hash, __u8 *ranged)
{
	struct lb6_key key = { .port = p->dport, .proto = p->proto };
	struct lb6_service *svc;

	__builtin_memcpy(key.address, p->daddr, 16);
	if (lb6_lookup_scope(&key, LB_SCOPE_EXTERNAL, &svc) != LB_FOUND || !svc)
		return NULL;
	*ranged = (svc->flags & LB_F_SOURCE_RANGES) ? CT_F_RANGED : 0;
	return lb6_select_slot(&key, svc, hash);
}

/* The state of a flow to a remote backend, for a client's packet: an established flow's
 * lifetime, or a new flow's backend (the frontend's slot for the flow's hash, as a local
 * flow's: the one nodeport6_ingress chose, else looked up) and port. Returns
 * NODEPORT6_FORWARD once the packet is handed on. */
__ferry_global int nodeport6_snat_flow(struct __sk_buff *ctx)
{
	struct ct6_key client = {}, reply = {};
	union { /* the binding, then (once it is in nat6) the flow: one frame slot */
		struct nat6_entry nat;
		struct ct6_entry flow;
	} e = {};
	struct ct6_entry *held;
	struct lb6_service *b;
	struct pkt6_handoff *h = pkt6_handoff_slot();
	struct pkt6 *p = h ? &h->p : NULL;
	__u8 ranged = 0;
	__be16 port;
	__u32 hash;
	__u64 now;

	/* The packet as nodeport6_ingress parsed it in this run (snat6_hand_packet). */
	if (!ctx || !h || !p || p->len != ctx->len || (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP))
		return count_drop(DROP_MALFORMED, ctx ? ctx->len : 0);
	ct6_key_set(&client, p->saddr, p->daddr, p->sport, p->dport, p->proto, CT6_DIR_CLIENT);
	now = ferry_now();
	/* A new flow whose backend nodeport6_ingress chose: it found no live flow either. */
	held = h->backend_port ? NULL : bpf_map_lookup_elem(&ct6, &client);
	if (held && (held->flags & CT_F_SNAT) && !ct_expired(held->expires_ns, now) &&
	    !(p->proto == IPPROTO_TCP && (held->flags & CT_F_CLOSING) && (p->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN)) {
		__u8 flags = ct6_flags_client(p, held->flags);
		__u64 expires = now + ct_lifetime_ns(p->proto, flags);

		if (flags != held->flags || expires >= held->expires_ns + CT_REFRESH_NS) {
			held->flags = flags;
			held->expires_ns = expires;
			snat6_keep(p, &reply, held, &e.nat);
		}
		return snat6_hand_flow(p, held);
	}
	if (h->backend_port) {
		hash = h->hash;
		ranged = h->ranged;
		snat6_reply_key(&reply, h->backend, h->backend_port, p->proto);
	} else {
		hash = flow_hash6(p);
		b = snat6_flow_backend(p, hash, &ranged);
		if (!b || (b->flags & LB_BACKEND_F_LOCAL))
			return count_drop(DROP_BACKEND_MISSING, p->len); /* the backends changed since tc_ingress looked */
		snat6_reply_key(&reply, b->address, b->port, p->proto);
	}
	if (p->proto == IPPROTO_TCP && !(p->tcp_flags & TCP_SYN))
		count_stat(STAT_CT_MIDSTREAM, 0);
	e.nat.expires_ns = now + ct_lifetime_ns(p->proto, CT_F_SNAT);
	__builtin_memcpy(e.nat.client_addr, p->saddr, 16);
	__builtin_memcpy(e.nat.frontend_addr, p->daddr, 16);
	e.nat.client_port = p->sport;
	e.nat.frontend_port = p->dport;
	e.nat.flags = CT_F_SNAT;
	port = snat6_reserve(ctx, p, &reply, &e.nat, hash, now, &client);
	if (!port)
		return count_drop(DROP_NAT_EXHAUSTED, p->len);
	ct6_key_set(&client, p->saddr, p->daddr, p->sport, p->dport, p->proto, CT6_DIR_CLIENT); /* the reserve's scratch */
	/* The backend, as the reply key holds it (the reserve wrote only its port). */
	e.flow = (struct ct6_entry){ .expires_ns = now + ct_lifetime_ns(p->proto, CT_F_SNAT), .port = reply.sport, .nat_port = port };
	__builtin_memcpy(e.flow.addr, reply.saddr, 16);
	e.flow.flags = ct6_flags_client(p, CT_F_SNAT | ranged);
	if (bpf_map_update_elem(&ct6, &client, &e.flow, BPF_ANY) < 0)
		return count_drop(DROP_CT_MAP_FULL, p->len);
	return snat6_hand_flow(p, &e.flow);
}

/* A remote backend's reply to a flow this node SNATed (`nat`, its live binding; `scratch`
 * any key the caller can spare): the binding and its flow learn the reply's state, and
 * the packet is handed on to go to the client, from the frontend. CTX_ACT_UNSPEC when
 * the binding has expired (a packet of the host's own). */
static __always_inline int snat6_reply(const struct pkt6 *p, struct nat6_entry *nat, struct ct6_key *scratch)
{
	struct ct6_entry *flow;
	__u64 now = ferry_now();
	__u8 flags;

	if (ct_expired(nat->expires_ns, now))
		return CTX_ACT_UNSPEC;
	flags = nat->flags | CT_F_SEEN_REPLY;
	if (p->proto == IPPROTO_TCP && (p->tcp_flags & (TCP_FIN | TCP_RST)))
		flags |= CT_F_CLOSING;
	if (p->proto == IPPROTO_TCP && (p->tcp_flags & TCP_RST))
		flags |= CT_F_RESET;
	if (flags != nat->flags || now + ct_lifetime_ns(p->proto, flags) >= nat->expires_ns + CT_REFRESH_NS) {
		/* The client's direction learns it too: its lifetime follows the flow's state. */
		snat6_flow_key(scratch, nat, p->proto);
		flow = bpf_map_lookup_elem(&ct6, scratch);
		if (flow) {
			flow->flags |= flags & CT_REPLY_STATE;
			flow->expires_ns = now + ct_lifetime_ns(p->proto, flow->flags);
			flags |= flow->flags & CT_F_ESTABLISHED;
		}
		nat->flags = flags;
		nat->expires_ns = now + ct_lifetime_ns(p->proto, flags);
	}
	return snat6_hand_reply(p, nat);
}

#endif
