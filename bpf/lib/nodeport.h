/* North-south forwarding: a packet for a frontend with backends (NodePort, LoadBalancer
 * IP, externalIP) is balanced once per flow (conntrack keeps the choice) and sent to a
 * local backend (DNAT), a remote one (DNAT + SNAT, or DSR), and its replies restored. */
#ifndef FERRY_LIB_NODEPORT_H
#define FERRY_LIB_NODEPORT_H

#include "config.h"
#include "maps.h"
#include "clock.h"
#include "parse.h"
#include "hash.h"
#include "lb.h"
#include "nat.h"
#include "ct.h"
#include "fib.h"
#include "snat.h"
#include "dsr.h"
#include "frag.h"

/* Maglev: the backend at the flow hash's position in the frontend's table, so every node
 * with the same backends picks the same one, and a change of backends moves few flows. */
static __always_inline __u32 maglev_select(const struct lb4_service *svc, __u32 hash)
{
	__u32 table = svc->backend_id;
	__u32 pos;
	void *inner;
	__u32 *id;

	if (!maglev_table_size || !table)
		return 0;
	inner = bpf_map_lookup_elem(&lb4_maglev, &table);
	if (!inner)
		return 0;
	pos = hash % maglev_table_size;
	id = bpf_map_lookup_elem(inner, &pos);
	return id ? *id : 0;
}

/* Rewrite both ends of a packet that leaves this node again and send it on: TTL down,
 * counted, sent to the next hop towards its new destination (the flow's kept hop, looked
 * up again when `refresh`; a new flow's first packet: `shared`, its backend's hop). */
static __always_inline int nat4_forward(struct __ctx_buff *ctx, const struct pkt4 *p, __be32 daddr, __be16 dport,
					__be32 saddr, __be16 sport, __u32 stat, __u32 *kept_ifindex, __u8 *kept_macs,
					int refresh, struct lb4_backend_hop *shared, __u64 now)
{
	struct fib4_flow f = { .saddr = saddr, .daddr = daddr, .sport = sport, .dport = dport, .proto = p->proto, .tos = p->tos };
	struct bpf_fib_lookup fib;
	long route;
	__u32 mtu;

	if (unlikely(p->ttl <= 1))
		return icmp4_time_exceeded(ctx, p);
	if (shared)
		route = fib4_route_new_flow(ctx, &f, kept_ifindex, kept_macs, shared, now, &fib);
	else
		route = fib4_route_flow(ctx, &f, kept_ifindex, kept_macs, refresh, &fib);
	if (unlikely(!fib4_usable(ctx, route, &fib)))
		return fib4_unusable(p->len);
	if (unlikely(fib4_mtu_exceeded(ctx, fib.ifindex, &mtu)))
		return icmp4_too_big(ctx, p, mtu);
	STAGE_END(11);
	/* The MACs go in with the IPv4 header: one store less. */
	if (unlikely(nat4_rewrite_forwarded(ctx, p, saddr, sport, daddr, dport,
					    route == BPF_FIB_LKUP_RET_SUCCESS ? &fib : NULL) < 0))
		return count_drop(DROP_CSUM_FAILED, p->len);
	frag4_record(p, saddr, daddr, FRAG_ACT_REDIRECT);
	count_stat(stat, p->len);
	STAGE_END(12);
	return fib4_send_addressed(ctx, &fib, route);
}

/* A reply from a remote backend to an SNATed flow: restore client and frontend. A global
 * function (lib/common.h), so that the stack frame of its route lookup is not the
 * program's own. */
__ferry_global int nodeport_reply_remote(struct __ctx_buff *ctx, const struct pkt4 *p, struct nat4_entry *nat, __u64 now)
{
	int refresh;

	if (!p || !nat)
		return CTX_ACT_SHOT;
	if (xdp_hop_elsewhere(ctx, nat->hop_ifindex))
		return CTX_ACT_UNSPEC;
	refresh = ct4_track_reply(p, nat, now);

	return nat4_forward(ctx, p, nat->client_addr, nat->client_port, nat->frontend_addr, nat->frontend_port,
			    STAT_REPLY_REMOTE, &nat->hop_ifindex, nat->hop_macs, refresh, NULL, 0);
}

/* A reply from a local backend (tc egress): it leaves as the frontend. */
static __always_inline int nodeport_reply_local(struct __ctx_buff *ctx, const struct pkt4 *p, struct nat4_entry *nat,
						__u64 now)
{
	ct4_track_reply(p, nat, now);
	/* ... and to the client's own port, where its tuple was remapped (contest.h). */
	if (nat4_rewrite_end(ctx, p, NAT_SRC, nat->frontend_addr,
			     (union l4_ports){ .sport = nat->frontend_port, .dport = nat->client_port }, 0) < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	frag4_record(p, nat->frontend_addr, p->daddr, FRAG_ACT_PASS);
	count_stat(STAT_REPLY_LOCAL, p->len);
	return CTX_ACT_OK;
}

/* What nat4_keep returns besides 0 (kept) and -1 (the write failed). */
#define NAT4_KEEP_REMAP 1 /* a new local flow on a tuple another flow holds: binding_remap */

/* Keep a flow's reply binding alive (whenever the flow's lifetime is written: a flow's
 * first packet, `created`, then at most once a second), or restore it after LRU eviction. */
__ferry_global int nat4_keep(const struct pkt4 *p, const struct ct4_key *reply, const struct ct4_entry *ct, int created)
{
	struct nat4_entry *nat;
	struct nat4_entry n;

	if (!p || !reply || !ct)
		return -1;
	nat = bpf_map_lookup_elem(&nat4, reply);
	n = (struct nat4_entry){
		.expires_ns = ct->expires_ns,
		.client_addr = p->saddr,
		.client_port = p->sport,
		.frontend_addr = p->daddr,
		.frontend_port = p->dport,
		.rev_nat_id = ct->rev_nat_id,
		.flags = ct->flags,
	};

	/* The same reply tuple may hold another flow's binding: a client reusing its port
	 * towards another frontend of the same backend. An ended one is taken over. */
	if (nat && nat->client_addr == n.client_addr && nat->client_port == n.client_port &&
	    nat->frontend_addr == n.frontend_addr && nat->frontend_port == n.frontend_port) {
		/* The flow's flags, not an accumulation: a client reopening its port towards
		 * the same frontend starts a flow that is not closing, and a binding left
		 * closing would take the new SYN-ACK for another connection's. */
		nat->expires_ns = ct->expires_ns;
		nat->flags = n.flags;
		/* Its replies' kept hop goes with this write: a reply is routed again when the
		 * binding's lifetime moves a second, and this write moved it (else a flow whose
		 * client always writes first would keep its replies' hop for ever). */
		nat->hop_ifindex = 0;
		return 0;
	}
	/* Another flow holds the pod's tuple live (contest.h): a new flow takes another client
	 * port (XDP leaves local flows to tc); else a SYN contests it and anything else leaves
	 * it be (UDP, with no answer to decide by: the newest flow owns). */
	if (nat && (n.flags & CT_F_LOCAL) && binding_held(nat, ferry_now())) {
		if (!CTX_IS_XDP && created)
			return NAT4_KEEP_REMAP;
		if (p->proto == IPPROTO_TCP) {
			if (binding_may_contest(p, nat->flags)) {
				nat->pending_addr = n.frontend_addr;
				nat->pending_port = n.frontend_port;
				count_stat(STAT_LOCAL_CONTESTED, p->len);
			}
			return 0;
		}
	}
	return bpf_map_update_elem(&nat4, reply, &n, BPF_ANY) < 0 ? -1 : 0;
}

/* What nodeport_balance returns besides a drop reason (> 0). */
enum balance_verdict {
	BALANCED = 0,           /* the flow's conntrack entry is written */
	BALANCE_TO_TC = -1,     /* XDP: a local backend, left to tc */
	BALANCE_STAGE_STOP = -2, /* bench/packet-stages.ts: a marker in here was reached */
};

#ifdef FERRY_STAGE_STOP
#undef STAGE_STOP_VERDICT
#define STAGE_STOP_VERDICT BALANCE_STAGE_STOP
#endif

/* A flow's first packet, or one whose backend was removed: a backend chosen (ClientIP
 * affinity, Maglev or the frontend's slots), for SNAT a port reserved, and the flow's
 * conntrack entry, created `now`, built in `f` (the caller inserts it). */
__ferry_global int nodeport_balance(struct __ctx_buff *ctx, const struct pkt4 *p, const struct lb4_service *svc,
				  struct ct4_entry *f, __u64 now)
{
	struct lb4_key fe;
	struct lb4_affinity_key ak;
	struct lb4_backend *b;
	__u32 hash, id;

	ctx_keep(ctx);
	if (!p || !svc || !f)
		return DROP_MALFORMED;
	*f = (struct ct4_entry){};
	fe = (struct lb4_key){ .address = p->daddr, .port = p->dport, .proto = p->proto, .scope = LB_SCOPE_EXTERNAL };
	/* The flow's hash picks the backend and, for SNAT, the port sequence. */
	hash = flow_hash4(p->saddr, p->daddr, p->sport, p->dport, p->proto, hash_seed);
	ak = (struct lb4_affinity_key){ .client = p->saddr, .affinity_id = svc->affinity_id };
	id = lb4_affinity_get(&ak, fe.address, fe.port, fe.proto, fe.scope, svc, now);
	if (!id) {
		id = maglev_select(svc, hash);
		if (!id)
			id = lb4_select_slot(fe.address, fe.port, fe.proto, fe.scope, svc, hash);
		lb4_affinity_set(&ak, svc, id, now);
	}
	b = lb4_backend(id);
	if (!b)
		return DROP_BACKEND_MISSING;
	if (CTX_IS_XDP && (b->flags & LB_BACKEND_F_LOCAL))
		return BALANCE_TO_TC;
	STAGE_END(6);
	f->created_ns = now;
	f->ifindex = ctx_ifindex(ctx);
	f->backend_id = id;
	f->rev_nat_id = svc->rev_nat_id;
	f->flags = (b->flags & LB_BACKEND_F_LOCAL) ? CT_F_LOCAL : use_dsr(svc, p->proto) ? CT_F_DSR : CT_F_SNAT;
	if (svc->flags & LB_F_SOURCE_RANGES)
		f->flags |= CT_F_RANGED;
	if (f->flags & CT_F_SNAT) {
		f->nat_addr = snat4_source(ctx, p, id, now);
		f->nat_port = snat4_reserve(ctx, p, b, f->nat_addr, &fe, svc->rev_nat_id, hash, now);
		if (!f->nat_port)
			return DROP_NAT_EXHAUSTED;
	}
	STAGE_END(7);
	return BALANCED;
}

#ifdef FERRY_STAGE_STOP
#undef STAGE_STOP_VERDICT
#define STAGE_STOP_VERDICT CTX_ACT_OK
#endif

/* A client's packet on its flow's conntrack entry `ct` (`created` by this packet, `now`):
 * the flow's state, its reply binding, then the packet translated and sent on. */
__ferry_global int nodeport_send(struct __ctx_buff *ctx, const struct pkt4 *p, struct ct4_entry *ct, __u64 now,
				 int created)
{
	const struct lb4_backend *b;
	__u8 created_flags, flags;
	int due;

	ctx_keep(ctx);
	if (!p || !ct)
		return CTX_ACT_SHOT;
	b = lb4_backend(ct->backend_id);
	if (!b)
		return count_drop(DROP_BACKEND_MISSING, p->len);
	created_flags = created ? ct->flags & ~CT_F_RANGED : 0;
	due = ct4_account_client(ct, p, now);
	flags = ct->flags;
	STAGE_END(9);

	if (flags & CT_F_DSR)
		return nodeport_dsr(ctx, p, b, ct, due, created ? backend_hop_of(ct->backend_id) : NULL, now);
	/* A new SNAT flow whose first packet left its state as created needs no second write
	 * of its binding: the port reservation wrote it with the same flags and lifetime. */
	/* A local flow's SYN always asserts its binding: one sent again after a contest
	 * (contest.h) must find whether the flow holding the tuple has ended meanwhile. */
	if ((unlikely(due) && !(created_flags == CT_F_SNAT && (flags & ~CT_F_RANGED) == CT_F_SNAT)) ||
	    unlikely(binding_may_contest(p, flags))) {
		/* Where replies arrive: backend → client (local: tc egress restores the
		 * frontend) or backend → node:nat_port (remote: tc ingress does). */
		struct ct4_key reply = {
			.saddr = b->address,
			.daddr = (flags & CT_F_LOCAL) ? p->saddr : ct->nat_addr,
			.sport = b->port,
			.dport = ((flags & CT_F_LOCAL) && !ct->nat_port) ? p->sport : ct->nat_port,
			.proto = p->proto,
		};

		int kept = nat4_keep(p, &reply, ct, created);

		/* Its first packet (a UDP datagram, a TCP SYN) may take a free port; any packet
		 * takes its own binding back. */
		if (kept == NAT4_KEEP_REMAP) {
			kept = binding_remap(p, &reply, ct, p->proto == IPPROTO_UDP || binding_may_contest(p, flags));
			if (kept > 0)
				kept = nat4_keep(p, &reply, ct, 0);
		}
		if (kept < 0)
			return count_drop(kept == -2 ? DROP_NAT_EXHAUSTED : DROP_CT_MAP_FULL, p->len);
	}
	STAGE_END(10);
	if (flags & CT_F_LOCAL) {
		/* A remapped flow (contest.h) reaches the pod from its other client port. */
		if (nat4_rewrite_to_local(ctx, p, b->address, b->port, ct->nat_port) < 0)
			return count_drop(DROP_CSUM_FAILED, p->len);
		frag4_record(p, p->saddr, b->address, FRAG_ACT_PASS);
		count_stat(STAT_FWD_LOCAL, p->len);
		return CTX_ACT_OK; /* the stack routes it to the pod */
	}
	/* A flow created by this packet routes by its backend's shared hop. */
	return nat4_forward(ctx, p, b->address, b->port, ct->nat_addr, ct->nat_port, STAT_FWD_REMOTE, &ct->hop_ifindex,
			    ct->hop_macs, due, created ? backend_hop_of(ct->backend_id) : NULL, now);
}

/* A flow conntrack holds, live, on a backend that still exists. */
static __always_inline int ct4_flow_live(const struct pkt4 *p, const struct ct4_entry *ct, __u64 now)
{
	return ct && !ct_expired(ct->expires_ns, now) && !ct_tcp_reopen(p, ct->flags) && lb4_backend(ct->backend_id);
}

/* A client's packet on its live flow. XDP leaves a flow to a local backend to tc, whose
 * packets the stack then takes to the pod, and one whose kept hop leaves by a device XDP
 * cannot send by; it does so before touching the flow's state, so that tc finds the flow
 * as if XDP were not there. */
static __always_inline int nodeport_on_flow(struct __ctx_buff *ctx, const struct pkt4 *p, struct ct4_entry *ct, __u64 now)
{
	if (CTX_IS_XDP && ((ct->flags & CT_F_LOCAL) || xdp_hop_elsewhere(ctx, ct->hop_ifindex)))
		return CTX_ACT_UNSPEC;
	return nodeport_send(ctx, p, ct, now, 0);
}

/* A packet for a frontend with backends whose flow conntrack does not hold live (`ct`: an
 * expired or reopened entry, one whose backend is gone, or NULL): balanced afresh. */
static __always_inline int nodeport_forward(struct __ctx_buff *ctx, const struct pkt4 *p, struct lb4_service *svc,
					    const struct ct4_key *key, struct ct4_entry *ct, __u64 now)
{
	int rebalanced = ct != NULL;
	__u64 unbound;
	int rc;

	if (ct && (ct_expired(ct->expires_ns, now) || ct_tcp_reopen(p, ct->flags)))
		snat4_release(ct, p); /* a new flow on an old tuple: the old binding goes */
	else if (!ct && (unbound = ct4_unknown_in_handover(p)))
		return handover_unplaced(p->len, unbound);
	/* The new entry is built and sent on in a per-CPU slot, and inserted last: written
	 * into ct4 first, it would have to be looked up again for its map value. */
	ct = ct4_fresh_slot();
	if (!ct)
		return CTX_ACT_SHOT;
	rc = nodeport_balance(ctx, p, svc, ct, now);
	if (rc == BALANCE_TO_TC)
		return CTX_ACT_UNSPEC;
#ifdef FERRY_STAGE_STOP
	if (rc == BALANCE_STAGE_STOP)
		return CTX_ACT_OK;
#endif
	if (rc)
		return count_drop(rc, p->len);
	if (rebalanced)
		count_stat(STAT_CT_REBALANCED, p->len);
	else if (p->proto == IPPROTO_TCP && !(p->tcp_flags & TCP_SYN))
		count_stat(STAT_CT_MIDSTREAM, p->len); /* lost state made visible: see ct4's fill */
	rc = nodeport_send(ctx, p, ct, now, 1);
	/* ct4 is an LRU map, so this fails only when the kernel has no memory for it: the
	 * packet, already translated (and counted as forwarded), is dropped after all. A stage
	 * build stopped in nodeport_send writes the entry too, or the flow a bench sets up
	 * with it would meet no entry at its next packet (bench/packet-stages.ts). */
	if (bpf_map_update_elem(&ct4, key, ct, BPF_ANY) < 0)
		return count_drop(DROP_CT_MAP_FULL, p->len);
	STAGE_END(8);
	return rc;
}

/* A packet from outside for a frontend: balanced, rejected or dropped as kube-proxy would.
 * CTX_ACT_UNSPEC when it is not for a Service. */
static __always_inline int nodeport_ingress(struct __ctx_buff *ctx, const struct pkt4 *p)
{
	struct lb4_service *svc;
	struct ct4_key key;
	struct ct4_entry *ct;
	__u64 now;
	int live, rc;

	if (!lb4_maybe_service(p->daddr, p->dport))
		return CTX_ACT_UNSPEC;
	/* A flow conntrack holds goes on without its frontend looked up: one hash lookup
	 * instead of two. The agent flushes the flows of a removed frontend (as of a removed
	 * backend); a frontend with loadBalancerSourceRanges is still looked up on every
	 * packet (CT_F_RANGED), so that a source its ranges deny later loses its flow. */
	now = ferry_now();
	ct4_key_of(p, &key);
	ct = bpf_map_lookup_elem(&ct4, &key);
	live = ct4_flow_live(p, ct, now);
	if (likely(live && !(ct->flags & CT_F_RANGED)))
		return nodeport_on_flow(ctx, p, ct, now);
	STAGE_END(4);
	rc = lb4_lookup(p->daddr, p->dport, p->proto, LB_SCOPE_EXTERNAL, &svc);
	/* loadBalancerSourceRanges: decided before any translation or reject. */
	if (svc && !lb4_source_allowed(svc, p->saddr))
		return count_drop(DROP_SOURCE_RANGE, p->len);
	STAGE_END(5);
	switch (rc) {
	case LB_FOUND:
		if (live && ct) /* a ranged flow its source may still use */
			return nodeport_on_flow(ctx, p, ct, now);
		return nodeport_forward(ctx, p, svc, &key, ct, now);
	case LB_NO_BACKEND:
		return icmp4_reject(ctx, p);
	case LB_UNKNOWN_PORT:
		return count_drop(DROP_UNKNOWN_PORT, p->len);
	case LB_EMPTY_DROP:
		return count_drop(DROP_NO_LOCAL_BACKEND, p->len);
	default:
		return CTX_ACT_UNSPEC;
	}
}

#endif
