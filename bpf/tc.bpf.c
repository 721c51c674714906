/* North-south Service traffic on the node's external device(s): NodePort, LoadBalancer
 * IPs and externalIPs arriving from outside the node.
 *
 * ingress: reply to an SNATed flow → restore and send back to the client;
 *          frontend → pick a backend (conntrack keeps it) → local: DNAT;
 *                     remote: DNAT + SNAT to the node address, FIB, redirect;
 *          frontend without backend → ICMP port unreachable;
 *          known Service address, unknown port → drop;
 *          ICMP error quoting a translated flow → translate it too.
 * egress:  reply from a local backend → source back to the frontend.
 */
#include "lib/common.h"
#include "lib/maps.h"
#include "lib/parse.h"
#include "lib/hash.h"
#include "lib/lb.h"
#include "lib/nat.h"
#include "lib/ct.h"
#include "lib/fib.h"
#include "lib/icmp.h"
#include "lib/dsr.h"

/* Load-time settings (set by the agent between open and load). */
const volatile __be32 snat_ipv4 = 0;        /* the node address remote flows leave from */
const volatile __u16 snat_port_min = 61000; /* SNAT source ports, host order; keep them */
const volatile __u16 snat_port_max = 65535; /* out of ip_local_port_range */
const volatile __u32 snat_retries = 16;     /* random tries when the client's port is taken */
const volatile __u32 hash_seed = 0;         /* backend-selection hash seed, cluster-wide */
const volatile __u8 forwarding_mode = FWD_MODE_SNAT; /* enum fwd_mode: remote backends */
const volatile __u32 maglev_table_size = 0;          /* 0: Maglev off; else a prime, e.g. 16381 */

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

/* DSR or SNAT for a remote backend: the Service's override, else the node's mode. */
static __always_inline int use_dsr(const struct lb4_service *svc, __u8 proto)
{
	if (svc->flags & LB_F_FWD_SNAT)
		return 0;
	if (svc->flags & LB_F_FWD_DSR)
		return 1;
	if (forwarding_mode == FWD_MODE_DSR)
		return 1;
	return forwarding_mode == FWD_MODE_HYBRID && proto == IPPROTO_TCP;
}

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

/* A reply from a remote backend to an SNATed flow: restore client and frontend. */
static __always_inline int nodeport_reply_remote(struct __sk_buff *skb, const struct pkt4 *p, struct nat4_entry *nat)
{
	__u64 now = bpf_ktime_get_ns();
	struct ct4_key fwd;
	struct ct4_entry *ct;
	__u8 flags = ct_flags_after(p, nat->flags | CT_F_SEEN_REPLY);

	ct4_key_of_binding(nat, p->proto, &fwd);
	ct = bpf_map_lookup_elem(&ct4, &fwd);

	nat->flags = flags;
	nat->expires_ns = now + ct_lifetime_ns(p->proto, flags);
	nat->packets++;
	nat->bytes += p->len;
	if (ct) {
		ct->flags |= flags & CT_REPLY_STATE;
		ct->expires_ns = nat->expires_ns;
	}
	if (nat4_rewrite_endpoint(skb, p, 0, nat->client_addr, nat->client_port) < 0 ||
	    nat4_rewrite_endpoint(skb, p, 1, nat->frontend_addr, nat->frontend_port) < 0 ||
	    ipv4_dec_ttl(skb, p) < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	count_stat(STAT_REPLY_REMOTE, p->len);
	return fib_redirect4(skb, nat->frontend_addr, nat->client_addr);
}

/* DSR to a remote backend: DNAT, the frontend in an IPv4 option (TCP: on the SYN, which
 * is all the backend's node needs; UDP: on every datagram), routed on. No reply comes
 * back through this node. If the option would not fit the path MTU, the client is told
 * (fragmentation needed, an MTU 8 bytes smaller) instead of the packet being lost. */
static __always_inline int nodeport_dsr(struct __sk_buff *skb, const struct pkt4 *p, const struct lb4_backend *b)
{
	int with_opt = p->proto == IPPROTO_UDP || (p->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
	__be32 vip = p->daddr;
	__be16 vport = p->dport;

	if (with_opt) {
		__u32 mtu = fib_mtu_exceeded4(skb, p->saddr, b->address, p->ip_len + DSR_OPT_LEN);

		if (mtu)
			return icmp4_send_unreach(skb, p, ICMP_FRAG_NEEDED, mtu - DSR_OPT_LEN);
	}
	if (nat4_rewrite_endpoint(skb, p, 0, b->address, b->port) < 0 ||
	    ipv4_dec_ttl(skb, p) < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	if (with_opt && dsr4_push(skb, p, vip, vport) < 0)
		return count_drop(DROP_DSR_OPTION, p->len);
	count_stat(STAT_FWD_DSR, p->len);
	return fib_redirect4(skb, p->saddr, b->address);
}

/* A DSR packet for a backend on this node: remember its frontend for the replies (tc
 * egress rewrites their source), remove the option, and hand it to the stack. */
static __always_inline int dsr_receive(struct __sk_buff *skb, const struct pkt4 *p)
{
	struct ct4_key reply = { .saddr = p->daddr, .daddr = p->saddr, .sport = p->dport, .dport = p->sport, .proto = p->proto };
	__u8 flags = ct_flags_after(p, CT_F_LOCAL | CT_F_DSR);
	struct nat4_entry n = {
		.expires_ns = bpf_ktime_get_ns() + ct_lifetime_ns(p->proto, flags),
		.client_addr = p->saddr,
		.client_port = p->sport,
		.frontend_addr = p->dsr_addr,
		.frontend_port = p->dsr_port,
		.flags = flags,
	};

	if (bpf_map_update_elem(&nat4, &reply, &n, BPF_ANY) < 0)
		return count_drop(DROP_CT_MAP_FULL, p->len);
	if (dsr4_pop(skb, p) < 0)
		return count_drop(DROP_DSR_OPTION, p->len);
	count_stat(STAT_DSR_RECEIVED, p->len);
	return TC_ACT_OK;
}

/* Keep a flow's reply binding alive, or restore it after LRU eviction. */
static __always_inline int nat4_keep(const struct pkt4 *p, const struct ct4_key *reply, const struct ct4_entry *ct, __u8 flags)
{
	struct nat4_entry *nat = bpf_map_lookup_elem(&nat4, reply);
	struct nat4_entry n = {
		.expires_ns = ct->expires_ns,
		.client_addr = p->saddr,
		.client_port = p->sport,
		.frontend_addr = p->daddr,
		.frontend_port = p->dport,
		.rev_nat_id = ct->rev_nat_id,
		.flags = flags,
	};

	/* The same reply tuple may still hold an older flow's binding: a client reusing its
	 * port towards another frontend of the same backend. The newest flow owns it, or its
	 * replies would leave with the old frontend's address and be reset. */
	if (nat && nat->client_addr == n.client_addr && nat->client_port == n.client_port &&
	    nat->frontend_addr == n.frontend_addr && nat->frontend_port == n.frontend_port) {
		/* The flow's flags, not an accumulation: a client reopening its port towards
		 * the same frontend starts a flow that is not closing, and a binding left
		 * closing would take the new SYN-ACK for another connection's. */
		nat->expires_ns = ct->expires_ns;
		nat->flags = flags;
		return 0;
	}
	return bpf_map_update_elem(&nat4, reply, &n, BPF_ANY) < 0 ? -1 : 0;
}

/* A packet for a frontend with backends: conntrack, then translate. */
static __always_inline int nodeport_forward(struct __sk_buff *skb, const struct pkt4 *p, struct lb4_service *svc)
{
	struct lb4_key fe = { .address = p->daddr, .port = p->dport, .proto = p->proto, .scope = LB_SCOPE_EXTERNAL };
	__u64 now = bpf_ktime_get_ns();
	struct ct4_key key;
	struct ct4_entry *ct;
	struct ct4_entry fresh = {};
	struct lb4_backend *b = NULL;
	__u8 flags;

	ct4_key_of(p, &key);
	ct = bpf_map_lookup_elem(&ct4, &key);
	if (ct && (ct_expired(ct->expires_ns, now) || ct_tcp_reopen(p, ct->flags))) {
		/* A new flow on an old tuple: drop the old binding, balance it afresh. */
		snat4_release(ct, p->proto);
		ct = NULL;
	}
	if (ct)
		b = lb4_backend(ct->backend_id);
	if (!ct || !b) {
		/* New flow, or its backend was removed: (re)balance, honouring ClientIP affinity. */
		struct lb4_affinity_key ak = { .client = p->saddr, .affinity_id = svc->affinity_id };
		__u32 id = lb4_affinity_get(&ak, fe.address, fe.port, fe.proto, fe.scope, svc, now);

		if (!id) {
			__u32 hash = flow_hash4(p->saddr, p->daddr, p->sport, p->dport, p->proto, hash_seed);

			id = maglev_select(svc, hash);
			if (!id)
				id = lb4_select_slot(fe.address, fe.port, fe.proto, fe.scope, svc, hash);
			lb4_affinity_set(&ak, svc, id, now);
		}
		b = lb4_backend(id);
		if (!b)
			return count_drop(DROP_BACKEND_MISSING, p->len);
		if (ct)
			count_stat(STAT_CT_REBALANCED, p->len);
		fresh.created_ns = now;
		fresh.backend_id = id;
		fresh.rev_nat_id = svc->rev_nat_id;
		fresh.flags = (b->flags & LB_BACKEND_F_LOCAL) ? CT_F_LOCAL : use_dsr(svc, p->proto) ? CT_F_DSR : CT_F_SNAT;
		if (fresh.flags & CT_F_SNAT) {
			fresh.nat_addr = snat_ipv4;
			fresh.nat_port = snat4_reserve(p, b, &fe, svc->rev_nat_id, now);
			if (!fresh.nat_port)
				return count_drop(DROP_NAT_EXHAUSTED, p->len);
		}
		if (bpf_map_update_elem(&ct4, &key, &fresh, BPF_ANY) < 0)
			return count_drop(DROP_CT_MAP_FULL, p->len);
		ct = bpf_map_lookup_elem(&ct4, &key);
		if (!ct)
			return count_drop(DROP_CT_MAP_FULL, p->len);
	}
	flags = ct_flags_after(p, ct->flags);
	ct->flags = flags;
	ct->tcp_flags |= p->tcp_flags;
	ct->expires_ns = now + ct_lifetime_ns(p->proto, flags);
	ct->packets++;
	ct->bytes += p->len;

	if (flags & CT_F_DSR)
		return nodeport_dsr(skb, p, b);
	{
		/* Where replies arrive: backend → client (local: tc egress restores the
		 * frontend) or backend → node:nat_port (remote: tc ingress does). */
		struct ct4_key reply = {
			.saddr = b->address,
			.daddr = (flags & CT_F_LOCAL) ? p->saddr : ct->nat_addr,
			.sport = b->port,
			.dport = (flags & CT_F_LOCAL) ? p->sport : ct->nat_port,
			.proto = p->proto,
		};

		if (nat4_keep(p, &reply, ct, flags) < 0)
			return count_drop(DROP_CT_MAP_FULL, p->len);
	}
	if (flags & CT_F_LOCAL) {
		if (nat4_rewrite_endpoint(skb, p, 0, b->address, b->port) < 0)
			return count_drop(DROP_CSUM_FAILED, p->len);
		count_stat(STAT_FWD_LOCAL, p->len);
		return TC_ACT_OK; /* the stack routes it to the pod */
	}
	if (nat4_rewrite_endpoint(skb, p, 0, b->address, b->port) < 0 ||
	    nat4_rewrite_endpoint(skb, p, 1, ct->nat_addr, ct->nat_port) < 0 ||
	    ipv4_dec_ttl(skb, p) < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	count_stat(STAT_FWD_REMOTE, p->len);
	return fib_redirect4(skb, ct->nat_addr, b->address);
}

/* An ICMP error arriving for a translated flow. Two cases:
 *  - it quotes our SNATed packet to a remote backend (node:nat_port → backend): send it
 *    to the client as if it quoted the client's packet to the frontend;
 *  - it quotes our reply to the client (frontend → client): send it to the backend as if
 *    it quoted the backend's packet. This is the path-MTU case for large replies. */
static __always_inline int icmp_related_ingress(struct __sk_buff *skb, const struct pkt4 *p)
{
	struct icmp4_inner in;
	struct ct4_key k;

	if (icmp4_parse_inner(skb, p, &in) < 0)
		return TC_ACT_OK;

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
			if (icmp4_inner_rewrite_addr(skb, &in, 1, in.saddr, nat->client_addr) < 0 ||
			    icmp4_inner_rewrite_port(skb, &in, 1, in.sport, nat->client_port) < 0 ||
			    icmp4_inner_rewrite_addr(skb, &in, 0, in.daddr, nat->frontend_addr) < 0 ||
			    icmp4_inner_rewrite_port(skb, &in, 0, in.dport, nat->frontend_port) < 0 ||
			    icmp4_outer_rewrite_addr(skb, p, 0, p->daddr, nat->client_addr) < 0 ||
			    ipv4_dec_ttl(skb, p) < 0)
				return count_drop(DROP_CSUM_FAILED, p->len);
			count_stat(STAT_ICMP_RELATED, p->len);
			return fib_redirect4(skb, p->saddr, nat->client_addr);
		}
	}

	/* Quoted: frontend → client. The ct4 key is that tuple reversed. */
	{
		struct ct4_entry *ct = bpf_map_lookup_elem(&ct4, &k);
		struct lb4_backend *b;

		if (!ct || p->daddr != in.saddr)
			return TC_ACT_OK;
		b = lb4_backend(ct->backend_id);
		if (!b)
			return TC_ACT_OK;
		if (icmp4_inner_rewrite_addr(skb, &in, 1, in.saddr, b->address) < 0 ||
		    icmp4_inner_rewrite_port(skb, &in, 1, in.sport, b->port) < 0 ||
		    icmp4_outer_rewrite_addr(skb, p, 0, p->daddr, b->address) < 0)
			return count_drop(DROP_CSUM_FAILED, p->len);
		count_stat(STAT_ICMP_RELATED, p->len);
		if (ct->flags & CT_F_LOCAL)
			return TC_ACT_OK;
		/* Remote backend: it knows the flow as node:nat_port → backend. */
		if (icmp4_inner_rewrite_addr(skb, &in, 0, in.daddr, ct->nat_addr) < 0 ||
		    icmp4_inner_rewrite_port(skb, &in, 0, in.dport, ct->nat_port) < 0 ||
		    icmp4_outer_rewrite_addr(skb, p, 1, p->saddr, ct->nat_addr) < 0 ||
		    ipv4_dec_ttl(skb, p) < 0)
			return count_drop(DROP_CSUM_FAILED, p->len);
		return fib_redirect4(skb, ct->nat_addr, b->address);
	}
}

static __always_inline int tc_ingress_packet(struct __sk_buff *skb)
{
	struct pkt4 p;
	struct lb4_service *svc;
	int rc = parse_ipv4(skb, &p);

	if (rc == PARSE_NOT_IPV4)
		return TC_ACT_OK;
	if (rc == PARSE_MALFORMED)
		return count_drop(DROP_MALFORMED, skb->len);

	if (p.proto == IPPROTO_ICMP) {
		if (!p.fragment && icmp4_is_error(p.icmp_type))
			return icmp_related_ingress(skb, &p);
		return TC_ACT_OK;
	}
	if (p.proto != IPPROTO_TCP && p.proto != IPPROTO_UDP)
		return TC_ACT_OK;
	if (p.dsr_opt && !p.fragment)
		return dsr_receive(skb, &p);
	if (p.fragment)
		return lb4_lookup_master(p.daddr, 0, 0, LB_SCOPE_EXTERNAL) ? count_drop(DROP_FRAGMENT, p.len) : TC_ACT_OK;

	/* A reply to a flow this node SNATed toward a remote backend. */
	{
		struct ct4_key k;
		struct nat4_entry *nat;

		ct4_key_of(&p, &k);
		nat = bpf_map_lookup_elem(&nat4, &k);
		if (nat && (nat->flags & CT_F_SNAT) && !ct_expired(nat->expires_ns, bpf_ktime_get_ns()))
			return nodeport_reply_remote(skb, &p, nat);
	}

	rc = lb4_lookup(p.daddr, p.dport, p.proto, LB_SCOPE_EXTERNAL, &svc);
	/* loadBalancerSourceRanges: decided before any translation or reject. */
	if (svc && !lb4_source_allowed(svc, p.saddr))
		return count_drop(DROP_SOURCE_RANGE, p.len);
	switch (rc) {
	case LB_FOUND:
		return nodeport_forward(skb, &p, svc);
	case LB_NO_BACKEND:
		return icmp4_reject(skb, &p);
	case LB_UNKNOWN_PORT:
		return count_drop(DROP_UNKNOWN_PORT, p.len);
	case LB_EMPTY_DROP:
		return count_drop(DROP_NO_LOCAL_BACKEND, p.len);
	default:
		return TC_ACT_OK;
	}
}

static __always_inline int tc_egress_packet(struct __sk_buff *skb)
{
	struct pkt4 p;
	struct ct4_key k;
	struct nat4_entry *nat;
	__u8 flags;

	if (parse_ipv4(skb, &p) != PARSE_OK || p.fragment)
		return TC_ACT_OK;
	if (p.proto != IPPROTO_TCP && p.proto != IPPROTO_UDP)
		return TC_ACT_OK;
	ct4_key_of(&p, &k);
	nat = bpf_map_lookup_elem(&nat4, &k);
	if (!nat || !(nat->flags & CT_F_LOCAL))
		return TC_ACT_OK;
	if (ct_expired(nat->expires_ns, bpf_ktime_get_ns()) || ct_tcp_reply_reopen(&p, nat->flags)) {
		/* Left over from a finished flow: this packet belongs to another connection
		 * (say, straight to the pod) that reuses the client's port. */
		bpf_map_delete_elem(&nat4, &k);
		return TC_ACT_OK;
	}

	/* A reply from a local backend: it leaves as the frontend. */
	flags = ct_flags_after(&p, nat->flags | CT_F_SEEN_REPLY);
	nat->flags = flags;
	nat->expires_ns = bpf_ktime_get_ns() + ct_lifetime_ns(p.proto, flags);
	nat->packets++;
	nat->bytes += p.len;
	{
		struct ct4_key fwd;
		struct ct4_entry *ct;

		ct4_key_of_binding(nat, p.proto, &fwd);
		ct = bpf_map_lookup_elem(&ct4, &fwd);

		if (ct) {
			ct->flags |= flags & CT_REPLY_STATE;
			ct->expires_ns = nat->expires_ns;
		}
	}
	if (nat4_rewrite_endpoint(skb, &p, 1, nat->frontend_addr, nat->frontend_port) < 0)
		return count_drop(DROP_CSUM_FAILED, p.len);
	count_stat(STAT_REPLY_LOCAL, p.len);
	return TC_ACT_OK;
}

/* ferry monitor: while it asks, report drops with their reason and traces of
 * translations (the packet before and after). Costs one array lookup per packet else. */
static __always_inline __u32 monitor_flags(void)
{
	__u32 zero = 0;
	struct ferry_monitor *m = bpf_map_lookup_elem(&ferry_monitor, &zero);

	return m ? m->flags : 0;
}

static __always_inline void monitor_event(struct __sk_buff *skb, const struct pkt4 *in, __u32 flags, int verdict, __u8 hook)
{
	struct ferry_scratch *s = scratch();
	struct ferry_event *e;
	struct pkt4 out;
	__u32 type;

	if (!s)
		return;
	if (verdict == TC_ACT_SHOT && (flags & MONITOR_DROPS) && s->last_drop)
		type = EVENT_DROP;
	else if (verdict != TC_ACT_SHOT && (flags & MONITOR_TRACES) && s->last_stat)
		type = EVENT_TRACE;
	else
		return;
	e = bpf_ringbuf_reserve(&ferry_events, sizeof(*e), 0);
	if (!e)
		return;
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = bpf_ktime_get_ns();
	e->type = type;
	e->reason = type == EVENT_DROP ? s->last_drop : s->last_stat - 1;
	e->saddr = in->saddr;
	e->daddr = in->daddr;
	e->sport = in->sport;
	e->dport = in->dport;
	e->proto = in->proto;
	e->hook = hook;
	e->ifindex = skb->ifindex;
	e->verdict = verdict;
	if (type == EVENT_TRACE && parse_ipv4(skb, &out) == PARSE_OK) {
		e->out_saddr = out.saddr;
		e->out_daddr = out.daddr;
		e->out_sport = out.sport;
		e->out_dport = out.dport;
	}
	bpf_ringbuf_submit(e, 0);
}

static __always_inline int monitored(struct __sk_buff *skb, __u8 hook)
{
	__u32 flags = monitor_flags();
	struct ferry_scratch *s;
	struct pkt4 in;
	int have = 0;
	int verdict;

	if (flags) {
		s = scratch();
		if (s) {
			s->last_drop = 0;
			s->last_stat = 0;
		}
		have = parse_ipv4(skb, &in) == PARSE_OK;
	}
	verdict = hook == HOOK_TC_INGRESS ? tc_ingress_packet(skb) : tc_egress_packet(skb);
	if (have)
		monitor_event(skb, &in, flags, verdict, hook);
	return verdict;
}

SEC("tc")
int tc_ingress(struct __sk_buff *skb)
{
	return monitored(skb, HOOK_TC_INGRESS);
}

SEC("tc")
int tc_egress(struct __sk_buff *skb)
{
	return monitored(skb, HOOK_TC_EGRESS);
}

char LICENSE[] SEC("license") = "GPL";
