/* IPv6 north-south to a backend on another node (tc): the client's packets are DNATed to
 * the backend and SNATed to the node's IPv6 address (snat_ipv6) and a port of the SNAT
 * range, which a nat6 binding reserves (keyed by the reply tuple, as nat4's); the
 * backend's replies come back to that address and port and are restored to the frontend
 * and the client. Both directions leave by the route the kernel's FIB gives them.
 *
 * Three global functions, each called by tc_ingress in turn (lib/nodeport6.h tells which
 * packets are theirs), so that no two of their stack frames are on one call chain:
 * nodeport6_snat_flow (the flow's state: a new flow's backend and port, or an established
 * one's lifetime), nodeport6_forward (the client's packet out to the backend) and
 * nodeport6_reply_remote (the backend's reply out to the client).
 *
 * ICMPv6 errors about such flows are translated by lib/icmp6_related.h; this node's own
 * (packet too big for the route's device, hop limit spent) are sent by the caller. Next
 * hops are kept per destination (lib/fib6.h). Not built for IPv6: the host's sockets asked
 * about a port (the SNAT range lies outside the ephemeral one by default), DSR, XDP, and
 * the upgrade switch's hand-over of flows. */
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
#include "fib6.h"
#include "snat.h"

#ifndef AF_INET6
#define AF_INET6 10
#endif

#define IP6_HOP_LIMIT_OFF (ETH_HLEN + offsetof(struct ipv6hdr, hop_limit))

/* What nodeport6_forward and nodeport6_reply_remote return (no TC_ACT_* value) for a
 * packet this node, as a router, answers with an ICMPv6 error (icmp6_send_error, lib/
 * icmp6.h: the caller's frame, not theirs): its hop limit spent, or too big for the device
 * its route leaves by (NODEPORT6_TOO_BIG + that MTU). */
#define NODEPORT6_HOP_LIMIT 0x1004
#define NODEPORT6_TOO_BIG 0x10000

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

/* Reserve the reply tuple (backend → node:port) for a flow, as snat4_reserve does: the
 * client's own port if free, then the flow's probe sequence (snat4_probe_port), with none
 * free a never-established flow's port (netfilter's early drop). A TCP segment other than
 * a SYN (its conntrack entry was lost) walks the whole sequence for its own binding
 * before it takes a free port. `scratch`: a key it may write. Returns the port (network
 * order) or 0. */
static __always_inline __be16 snat6_reserve(const struct pkt6 *p, struct ct6_key *reply, struct nat6_entry *nat,
					    __u32 hash, __u64 now, struct ct6_key *scratch)
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
 * flow's) and port. Returns CTX_ACT_OK for nodeport6_forward to send the packet on. */
__ferry_global int nodeport6_snat_flow(struct __sk_buff *ctx)
{
	struct ct6_key client = {}, reply = {};
	union { /* the binding, then (once it is in nat6) the flow: one frame slot */
		struct nat6_entry nat;
		struct ct6_entry flow;
	} e = {};
	struct ct6_entry *held;
	struct lb6_service *b;
	struct pkt6 p;
	__u8 ranged = 0;
	__be16 port;
	__u32 hash;
	__u64 now;

	if (!ctx || parse_ipv6(ctx, &p) != PARSE_OK || (p.proto != IPPROTO_TCP && p.proto != IPPROTO_UDP))
		return count_drop(DROP_MALFORMED, ctx ? ctx->len : 0);
	ct6_key_set(&client, p.saddr, p.daddr, p.sport, p.dport, p.proto, CT6_DIR_CLIENT);
	now = ferry_now();
	held = bpf_map_lookup_elem(&ct6, &client);
	if (held && (held->flags & CT_F_SNAT) && !ct_expired(held->expires_ns, now) &&
	    !(p.proto == IPPROTO_TCP && (held->flags & CT_F_CLOSING) && (p.tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN)) {
		__u8 flags = ct6_flags_client(&p, held->flags);
		__u64 expires = now + ct_lifetime_ns(p.proto, flags);

		if (flags == held->flags && expires < held->expires_ns + CT_REFRESH_NS)
			return CTX_ACT_OK;
		held->flags = flags;
		held->expires_ns = expires;
		snat6_keep(&p, &reply, held, &e.nat);
		return CTX_ACT_OK;
	}
	hash = flow_hash6(&p);
	b = snat6_flow_backend(&p, hash, &ranged);
	if (!b || (b->flags & LB_BACKEND_F_LOCAL))
		return count_drop(DROP_BACKEND_MISSING, p.len); /* the backends changed since tc_ingress looked */
	if (p.proto == IPPROTO_TCP && !(p.tcp_flags & TCP_SYN))
		count_stat(STAT_CT_MIDSTREAM, 0);
	e.nat.expires_ns = now + ct_lifetime_ns(p.proto, CT_F_SNAT);
	__builtin_memcpy(e.nat.client_addr, p.saddr, 16);
	__builtin_memcpy(e.nat.frontend_addr, p.daddr, 16);
	e.nat.client_port = p.sport;
	e.nat.frontend_port = p.dport;
	e.nat.flags = CT_F_SNAT;
	snat6_reply_key(&reply, b->address, b->port, p.proto);
	port = snat6_reserve(&p, &reply, &e.nat, hash, now, &client);
	if (!port)
		return count_drop(DROP_NAT_EXHAUSTED, p.len);
	ct6_key_set(&client, p.saddr, p.daddr, p.sport, p.dport, p.proto, CT6_DIR_CLIENT); /* the reserve's scratch */
	e.flow = (struct ct6_entry){ .expires_ns = now + ct_lifetime_ns(p.proto, CT_F_SNAT), .port = b->port, .nat_port = port };
	__builtin_memcpy(e.flow.addr, b->address, 16);
	e.flow.flags = ct6_flags_client(&p, CT_F_SNAT | ranged);
	if (bpf_map_update_elem(&ct6, &client, &e.flow, BPF_ANY) < 0)
		return count_drop(DROP_CT_MAP_FULL, p.len);
	return CTX_ACT_OK;
}

/* Rewrite both ends of an IPv6 packet leaving the node again, hop limit down, and send it
 * by its route: from `saddr`:`sport` to `daddr`:`dport`. */
static __always_inline int nat6_forward(struct __sk_buff *ctx, const struct pkt6 *p, const __u8 *saddr, __be16 sport,
					const __u8 *daddr, __be16 dport, __u32 stat)
{
	struct bpf_fib_lookup fib = {};
	__u8 hops;
	__u32 mtu;
	long rc;

	if (ctx_load_bytes(ctx, IP6_HOP_LIMIT_OFF, &hops, 1) < 0)
		return count_drop(DROP_MALFORMED, p->len);
	if (hops <= 1)
		return NODEPORT6_HOP_LIMIT;
	fib.family = AF_INET6;
	fib.ifindex = ctx_fib_ifindex(ctx);
	fib.l4_protocol = p->proto;
	fib.sport = sport;
	fib.dport = dport;
	__builtin_memcpy(fib.ipv6_src, saddr, 16);
	__builtin_memcpy(fib.ipv6_dst, daddr, 16);
	rc = fib6_route(ctx, &fib, ferry_now());
	/* The lookup measures the packet against the route's device (a GSO packet passes it:
	 * its segments are measured below). */
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return NODEPORT6_TOO_BIG + (fib.mtu_result > 0xffff ? 0xffff : fib.mtu_result);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return count_drop(DROP_FIB_FAILED, p->len);
	if (fib4_mtu_exceeded(ctx, fib.ifindex, &mtu))
		return NODEPORT6_TOO_BIG + (mtu > 0xffff ? 0xffff : mtu);
	hops--;
	if (nat6_rewrite(ctx, p, IP6_DADDR_OFF, p->l4_off + 2, p->daddr, daddr, p->dport, dport) < 0 ||
	    nat6_rewrite(ctx, p, IP6_SADDR_OFF, p->l4_off, p->saddr, saddr, p->sport, sport) < 0 ||
	    ctx_store_bytes(ctx, IP6_HOP_LIMIT_OFF, &hops, 1, 0) < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	count_stat(stat, p->len);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		/* The route is known, not the neighbour's MAC: the kernel resolves it. */
		struct bpf_redir_neigh nh = { .nh_family = AF_INET6 };

		__builtin_memcpy(nh.ipv6_nh, fib.ipv6_dst, 16);
		ctx_mark_forwarded(ctx, fib.ifindex);
		return bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
	}
	return fib4_send(ctx, &fib, rc); /* the MACs, then out (either family) */
}

/* A client's packet of a flow nodeport6_snat_flow holds: to its backend, from the node. */
__ferry_global int nodeport6_forward(struct __sk_buff *ctx)
{
	struct ct6_key client = {};
	struct ct6_entry *flow;
	struct pkt6 p;
	__u8 node[16];

	if (!ctx || parse_ipv6(ctx, &p) != PARSE_OK)
		return count_drop(DROP_MALFORMED, ctx ? ctx->len : 0);
	ct6_key_set(&client, p.saddr, p.daddr, p.sport, p.dport, p.proto, CT6_DIR_CLIENT);
	flow = bpf_map_lookup_elem(&ct6, &client);
	if (!flow || !(flow->flags & CT_F_SNAT))
		return count_drop(DROP_CT_MAP_FULL, p.len); /* evicted since it was written */
	snat6_node_address(node);
	return nat6_forward(ctx, &p, node, flow->nat_port, flow->addr, flow->port, STAT_FWD_REMOTE6);
}

/* A remote backend's reply to a flow this node SNATed (nat6 holds its binding): to the
 * client, from the frontend. CTX_ACT_UNSPEC when it is no such reply (the host's own). */
__ferry_global int nodeport6_reply_remote(struct __sk_buff *ctx)
{
	struct ct6_key k = {};
	struct nat6_entry *nat;
	struct ct6_entry *flow;
	struct pkt6 p;
	__u64 now;
	__u8 flags;

	if (!ctx || parse_ipv6(ctx, &p) != PARSE_OK)
		return CTX_ACT_UNSPEC;
	ct6_key_set(&k, p.saddr, p.daddr, p.sport, p.dport, p.proto, CT6_DIR_REPLY);
	nat = bpf_map_lookup_elem(&nat6, &k);
	now = ferry_now();
	if (!nat || ct_expired(nat->expires_ns, now))
		return CTX_ACT_UNSPEC;
	flags = nat->flags | CT_F_SEEN_REPLY;
	if (p.proto == IPPROTO_TCP && (p.tcp_flags & (TCP_FIN | TCP_RST)))
		flags |= CT_F_CLOSING;
	if (p.proto == IPPROTO_TCP && (p.tcp_flags & TCP_RST))
		flags |= CT_F_RESET;
	if (flags != nat->flags || now + ct_lifetime_ns(p.proto, flags) >= nat->expires_ns + CT_REFRESH_NS) {
		/* The client's direction learns it too: its lifetime follows the flow's state. */
		snat6_flow_key(&k, nat, p.proto);
		flow = bpf_map_lookup_elem(&ct6, &k);
		if (flow) {
			flow->flags |= flags & CT_REPLY_STATE;
			flow->expires_ns = now + ct_lifetime_ns(p.proto, flow->flags);
			flags |= flow->flags & CT_F_ESTABLISHED;
		}
		nat->flags = flags;
		nat->expires_ns = now + ct_lifetime_ns(p.proto, flags);
	}
	return nat6_forward(ctx, &p, nat->frontend_addr, nat->frontend_port, nat->client_addr, nat->client_port,
			    STAT_REPLY_REMOTE6);
}

#endif
