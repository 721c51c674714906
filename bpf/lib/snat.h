/* SNAT bindings for flows to remote backends: a nat4 entry keyed by the reply tuple
 * (backend → node:port) reserves the port; it is taken over once its flow is over. */
#ifndef FERRY_LIB_SNAT_H
#define FERRY_LIB_SNAT_H

#include "config.h"
#include "maps.h"
#include "clock.h"
#include "ct.h"
#include "lb.h"
#include "fib.h"

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

/* Does a socket of the host's own hold this reply tuple (a connection from node:port to
 * the backend, or a listener on node:port)? Then the port is not ours to take. Asked only
 * for ports the host may have bound (host_ports): the lookup was a sixth of a new flow. */
static __always_inline int snat4_port_in_use(struct __ctx_buff *ctx, const struct ct4_key *reply)
{
	struct bpf_sock_tuple t = {};
	struct bpf_sock *sk;

	t.ipv4.saddr = reply->saddr;
	t.ipv4.daddr = reply->daddr;
	t.ipv4.sport = reply->sport;
	t.ipv4.dport = reply->dport;
	if (reply->proto == IPPROTO_TCP)
		sk = (struct bpf_sock *)bpf_skc_lookup_tcp(ctx, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
	else
		sk = bpf_sk_lookup_udp(ctx, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	bpf_sk_release(sk);
	return 1;
}

/* May a new flow take this binding's port? When its flow is over: expired (awaiting
 * collection) or reset (over at both ends: a flow closed by a reset must not hold its port
 * for the closing lifetime, or clients that close so at a high rate exhaust the range). */
static __always_inline int snat4_binding_over(const struct nat4_entry *old, __u64 now)
{
	return ct_expired(old->expires_ns, now) || (old->flags & CT_F_RESET);
}

/* Netfilter's early drop: with no free port, a binding whose flow never became established
 * (a SYN never answered, or never acknowledged) gives way, so that unanswered SYNs cannot
 * lock real clients out. */
static __always_inline int snat4_binding_reclaimable(const struct nat4_entry *old)
{
	return (old->flags & CT_F_SNAT) && !(old->flags & CT_F_ESTABLISHED);
}

/* Is this binding the one of this client (address, port) towards this frontend? */
static __always_inline int snat4_binding_is(const struct nat4_entry *b, __be32 client_addr, __be16 client_port,
					    __be32 frontend_addr, __be16 frontend_port)
{
	return b->client_addr == client_addr && b->client_port == client_port && b->frontend_addr == frontend_addr &&
	       b->frontend_port == frontend_port;
}

/* The flow's own binding, left behind when its conntrack entry was lost (ct4 is an LRU
 * map: a full one forgets its least recently used flows): the same client and frontend.
 * Taking it back keeps the tuple the backend knows, so the connection goes on. */
static __always_inline int snat4_binding_ours(const struct nat4_entry *old, const struct nat4_entry *want)
{
	return snat4_binding_is(old, want->client_addr, want->client_port, want->frontend_addr, want->frontend_port);
}

/* The stride of a flow's probe sequence after its client's own port (double hashing: the
 * k-th try is hash + k * stride, modulo the range). The sequence is the same every time,
 * so that a flow whose conntrack entry was lost walks it again and finds its binding
 * wherever the first free port was (random tries could not be retraced: a flow whose
 * first port was taken broke when its entry was evicted). The hash is keyed by the
 * cluster's secret seed, so outsiders cannot aim at a flow's ports. Odd, and from
 * murmur3's finaliser of the hash, so that flows sharing a first port part after it. */
static __always_inline __u32 snat4_probe_stride(__u32 hash)
{
	hash ^= hash >> 16;
	hash *= 0x85ebca6b;
	hash ^= hash >> 13;
	hash *= 0xc2b2ae35;
	hash ^= hash >> 16;
	return hash | 1;
}

/* The i-th port a flow tries (host order): its client's own port first when that lies in
 * the range (first_probe 1), then hash + k * stride over the range. */
static __always_inline __u16 snat4_probe_port(__u32 i, __u16 client_port, __u32 first_probe, __u32 hash, __u32 stride)
{
	__u32 span = (__u32)snat_port_max - snat_port_min + 1;

	if (i < first_probe)
		return client_port;
	return snat_port_min + (hash + (i - first_probe) * stride) % span;
}

/* A flow whose conntrack entry was lost (a TCP segment other than a SYN without one) finds
 * its binding along its whole probe sequence before any port is taken: a port before its
 * own may have been freed since it was reserved, and taking that one would give the
 * backend a tuple it does not know (it answers with a reset). A new flow, a SYN, takes the
 * first free port without this walk. Returns the port (network order) or 0. */
static __always_inline __be16 snat4_retrace(struct ct4_key *reply, const struct nat4_entry *nat, __u16 client_port,
					    __u32 first_probe, __u32 hash, __u32 stride)
{
	__u32 i;

	for (i = 0; i <= 32; i++) {
		struct nat4_entry *old;

		if (i > snat_retries)
			break;
		reply->dport = bpf_htons(snat4_probe_port(i, client_port, first_probe, hash, stride));
		old = bpf_map_lookup_elem(&nat4, reply);
		if (old && snat4_binding_ours(old, nat)) {
			*old = *nat;
			return reply->dport;
		}
	}
	return 0;
}

/* The device a new flow to backend `id` leaves by: its backend's shared hop while that is
 * fresh (the flow's own route then takes it), else the route looked up from the node's
 * address. 0: none usable (the flow's own lookup fails the same way). A global function:
 * the lookup's frame is not its caller's. */
__ferry_global __u32 snat4_route_device(struct __ctx_buff *ctx, const struct pkt4 *p, __u32 id, __u64 now)
{
	struct lb4_backend_hop *hop = backend_hop_of(id);
	struct lb4_backend *b = lb4_backend(id);
	struct bpf_fib_lookup fib;
	struct fib4_flow f = {};
	long rc;

	ctx_keep(ctx);
	if (!p || !b)
		return 0;
	if (backend_hop_fresh(hop, b->address, ctx_fib_ifindex(ctx), now, hop_epoch()))
		return hop->hop_ifindex;
	f.saddr = snat4_node_address();
	f.daddr = b->address;
	f.sport = p->sport;
	f.dport = b->port;
	f.proto = p->proto;
	f.tos = p->tos;
	rc = fib4_lookup(ctx, &f, &fib);
	return rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH ? fib.ifindex : 0;
}

/* The address a new SNAT flow to backend `id` leaves from: the node's (snat4_address), or the
 * own address of the device its route leaves by when the agent listed that device
 * (snat4_devices), as MASQUERADE takes the outgoing device's: an overlay's replies then
 * come back through its tunnel. Nothing is looked up while no device is listed. */
static __always_inline __be32 snat4_source(struct __ctx_buff *ctx, const struct pkt4 *p, __u32 id, __u64 now)
{
	__u32 ifindex;
	__be32 *addr;

	if (likely(!snat_by_device()))
		return snat4_node_address();
	ifindex = snat4_route_device(ctx, p, id, now);
	addr = ifindex ? bpf_map_lookup_elem(&snat4_devices, &ifindex) : NULL;
	return addr ? *addr : snat4_node_address();
}

/* Is `daddr` the SNAT address of the device the packet came in on (snat4_devices)? A
 * reply to a flow that left by a listed device comes back through it. */
static __always_inline int snat4_device_address(struct __ctx_buff *ctx, __be32 daddr)
{
	__u32 ifindex = ctx_ifindex(ctx);
	__be32 *addr;

	if (likely(!snat_by_device()))
		return 0;
	addr = bpf_map_lookup_elem(&snat4_devices, &ifindex);
	return addr && *addr == daddr;
}

/* Reserve the reply tuple (backend → node:port) for a new SNAT binding: the client's own
 * port if free, then the ports of the flow's probe sequence (from `hash`, the flow's
 * flow_hash4); with none free, a never-established flow's port. `nat_addr` is the address
 * the flow leaves from (snat4_source). Returns the port (network order) or 0. */
static __always_inline __be16 snat4_reserve(struct __ctx_buff *ctx, const struct pkt4 *p, const struct lb4_backend *b,
					    __be32 nat_addr, const struct lb4_key *fe, __u32 rev_nat_id, __u32 hash, __u64 now)
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
		.daddr = nat_addr,
		.sport = b->port,
		.proto = p->proto,
	};
	__u16 client_port = bpf_ntohs(p->sport);
	__u32 stride = snat4_probe_stride(hash);
	__u32 first_probe = (client_port < snat_port_min || client_port > snat_port_max) ? 0 : 1;
	__be16 victim = 0;
	__u16 port;
	__u32 i;

	if (p->proto == IPPROTO_TCP && !(p->tcp_flags & TCP_SYN)) {
		__be16 own = snat4_retrace(&reply, &nat, client_port, first_probe, hash, stride);

		if (own)
			return own;
	}
	for (i = 0; i <= 32; i++) {
		struct nat4_entry *old;

		if (i > snat_retries)
			break;
		port = snat4_probe_port(i, client_port, first_probe, hash, stride);
		reply.dport = bpf_htons(port);
		/* Looked up first: a port that is taken is written in place (an update would
		 * allocate an element and free the old one), and only a port that is free or
		 * being taken over from a finished flow needs the host's sockets asked. */
		old = bpf_map_lookup_elem(&nat4, &reply);
		if (old && snat4_binding_ours(old, &nat)) {
			*old = nat;
			return reply.dport;
		}
		if (old && !snat4_binding_over(old, now)) {
			if (!victim && snat4_binding_reclaimable(old))
				victim = reply.dport;
			continue;
		}
		if (host_port_maybe_bound(port) && snat4_port_in_use(ctx, &reply))
			continue;
		if (!old) {
			/* NOEXIST: of two new flows racing for a free port, one gets it. */
			if (bpf_map_update_elem(&nat4, &reply, &nat, BPF_NOEXIST) == 0)
				return reply.dport;
			continue;
		}
		snat4_forget_flow(old, &reply);
		*old = nat;
		return reply.dport;
	}
	if (!victim)
		return 0;
	reply.dport = victim;
	{
		struct nat4_entry *old = bpf_map_lookup_elem(&nat4, &reply);

		if (!old || !snat4_binding_reclaimable(old))
			return 0;
		snat4_forget_flow(old, &reply);
		*old = nat;
	}
	count_stat(STAT_NAT_EARLY_DROP, p->len);
	return victim;
}

/* The upgrade switch under way (struct ferry_handover): its until_ns, 0 if none. The agent
 * is then copying the previous programs' flows and bindings into this build's maps. */
static __always_inline __u64 handover_current(void)
{
	__u32 zero = 0;
	struct ferry_handover *h = bpf_map_lookup_elem(&ferry_handover, &zero);
	__u64 until = h ? h->until_ns : 0;

	return until && bpf_ktime_get_ns() < until ? until : 0;
}

/* A packet of the three kinds below, which this build cannot place in a switch: passed to
 * the previous programs chained behind (FERRY_HANDOVER_CHAINED), which place it from their
 * own maps; else dropped (a TCP segment comes again once the entry is copied, a UDP
 * datagram is lost). `handover` is the switch's word the packet was judged by, not read
 * again: the agent ends a chained switch by clearing the word, and a second read taken
 * after that would drop, unchained, a packet judged in the chained switch. */
static __always_inline int handover_unplaced(__u32 len, __u64 handover)
{
	if (handover & FERRY_HANDOVER_CHAINED)
		return CTX_ACT_UNSPEC;
	return count_drop(DROP_HANDOVER_UNBOUND, len);
}

/* In a switch, a reply with no binding may be one the previous programs made and the agent
 * has not copied yet: handed to the host, it would reset the backend's end of the
 * connection; it is left to handover_unplaced. A host socket on the tuple keeps it the
 * host's. */
static __always_inline __u64 snat4_unbound_in_handover(struct __ctx_buff *ctx, const struct ct4_key *k)
{
	__u64 handover = handover_current();

	return handover && !snat4_port_in_use(ctx, k) ? handover : 0;
}

/* In a switch, a client's TCP segment other than a SYN with no conntrack entry may be of a
 * flow the previous programs opened and the agent has not copied yet: balanced afresh it
 * could take another SNAT port (or backend) than its own, which the backend would answer
 * with a reset: left to handover_unplaced. */
static __always_inline __u64 ct4_unknown_in_handover(const struct pkt4 *p)
{
	if (p->proto != IPPROTO_TCP || (p->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN)
		return 0;
	return handover_current();
}

/* In a switch, a segment leaving from a local backend's endpoint with no binding may be a
 * reply of a flow the previous programs opened and the agent has not copied yet: sent on
 * untranslated (from the pod's address), the client would answer it with a reset. It is
 * left to handover_unplaced: the previous programs chained behind translate it, or
 * without them it is dropped and comes again once the binding is there, as do the
 * backend's segments that need no binding (its replies to pods and hosts whose connect()
 * the socket hooks balanced), after their retransmission timeout. Unchained, UDP is not
 * judged: such a datagram would be lost, and an east-west answer needs no binding.
 * Packets from other endpoints (the pods' own connections, the host's) go on. */
static __always_inline __u64 local_reply_unbound_in_handover(const struct pkt4 *p)
{
	struct lb4_backend_key bk = { .address = p->saddr, .port = p->sport, .proto = p->proto };
	struct lb4_backend *b;
	__u64 handover;
	__u32 *id;

	handover = handover_current();
	if (!handover || (p->proto != IPPROTO_TCP && !(handover & FERRY_HANDOVER_CHAINED)))
		return 0;
	id = bpf_map_lookup_elem(&lb4_backend_ids, &bk);
	b = id ? lb4_backend(*id) : NULL;
	return b && (b->flags & LB_BACKEND_F_LOCAL) ? handover : 0;
}

/* The SNAT binding a packet is a reply to, if any, and in `now` the time it was judged
 * live by (the reply's accounting uses it too). Only a packet to the SNAT address (or to
 * the one of the device it came in on, snat4_devices) on a port of the SNAT range can be
 * one: anything else (every client packet to a NodePort, or to a LoadBalancer IP on a port
 * outside the range) is told so without a lookup or a clock read. `unbound` is set for one
 * that finds no binding in an upgrade's switch, to the switch's word (handover_current) it was
 * judged by: the caller leaves it to handover_unplaced with that word. */
static __always_inline struct nat4_entry *snat4_reply_of(struct __ctx_buff *ctx, const struct pkt4 *p, __u64 *now,
							 __u64 *unbound)
{
	__u32 port = bpf_ntohs(p->dport);
	/* Decided on a value the verifier cannot tie back to the packet's fields: else the paths
	 * after it would know the address and port, and be explored apart (past its limit). */
	__u32 outside = port - snat_port_min > (__u32)snat_port_max - snat_port_min;
	__u32 other = (p->daddr ^ snat4_node_address()) | outside;
	struct nat4_entry *nat;
	struct ct4_key k;

	asm volatile("" : "+r"(other), "+r"(outside));
	if (other && (outside || !snat4_device_address(ctx, p->daddr)))
		return NULL;
	ct4_key_of(p, &k);
	nat = bpf_map_lookup_elem(&nat4, &k);
	if (!nat) {
		*unbound = snat4_unbound_in_handover(ctx, &k);
		return NULL;
	}
	if (!(nat->flags & CT_F_SNAT))
		return NULL;
	*now = ferry_now();
	return ct_expired(nat->expires_ns, *now) ? NULL : nat;
}

/* Free the SNAT binding of a flow that is being replaced (its backend still known), if it
 * is still this client's: an expired flow's port may have been taken by another flow since
 * (its binding collected, or evicted, before its conntrack entry), whose binding stays. */
static __always_inline void snat4_release(const struct ct4_entry *ct, const struct pkt4 *p)
{
	struct lb4_backend *b;
	struct nat4_entry *nat;
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
	reply.proto = p->proto;
	nat = bpf_map_lookup_elem(&nat4, &reply);
	if (nat && snat4_binding_is(nat, p->saddr, p->sport, p->daddr, p->dport))
		bpf_map_delete_elem(&nat4, &reply);
}

#endif
