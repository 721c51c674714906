/* Service lookup and backend selection, shared by the tc and socket programs. */
#ifndef FERRY_LIB_LB_H
#define FERRY_LIB_LB_H

#include "maps.h"

enum lb_lookup {
	LB_NOT_SERVICE = 0, /* not a Service address: leave it alone */
	LB_FOUND = 1,       /* a frontend with at least one backend slot */
	LB_NO_BACKEND = 2,  /* a frontend with no backend: reject */
	LB_UNKNOWN_PORT = 3, /* a known Service address, but no frontend on this port */
	LB_EMPTY_DROP = 4    /* a frontend with no backend that must drop (Local policy) */
};

static __always_inline struct lb4_service *lb4_lookup_master(__be32 addr, __be16 port, __u8 proto, __u8 scope)
{
	struct lb4_key key = {
		.address = addr,
		.port = port,
		.proto = proto,
		.scope = scope,
		.slot = 0,
	};

	return bpf_map_lookup_elem(&lb4_services, &key);
}

/* An address's bit in lb4_addr_filter: the top 16 bits of a multiplicative hash of its
 * value in host order (Knuth's 2654435761). The agent computes the same. */
static __always_inline __u32 lb4_addr_hash(__be32 addr)
{
	return (bpf_ntohl(addr) * 2654435761u) >> 16;
}

/* Bit `bit` of a filter slot: 1 or 0; -1 while the writer has not filled the slot. */
static __always_inline int lb4_filter_bit(__u32 slot, __u32 bit)
{
	struct lb4_addr_filter *f = bpf_map_lookup_elem(&lb4_addr_filter, &slot);

	if (!f || !f->ready)
		return -1;
	return (f->bits[(bit >> 3) & (sizeof(f->bits) - 1)] >> (bit & 7)) & 1;
}

/* May a packet to addr:port be a Service's? No when the writer's filter says so: then it
 * is passed on without its lookups (conntrack, then the frontend and its address's
 * wildcard, all missing, on every packet of the node's other traffic: pod-to-pod across
 * nodes, and the host's own, whose address carries NodePorts). Yes until it is filled. */
static __always_inline int lb4_maybe_service(__be32 addr, __be16 port)
{
	__u32 h = lb4_addr_hash(addr);

	if (!lb4_filter_bit(LB4_FILTER_ADDRESSES, h))
		return 0;
	return lb4_filter_bit(LB4_FILTER_PORTS, bpf_ntohs(port)) || lb4_filter_bit(LB4_FILTER_WILDCARDS, h);
}

/* Find the master entry of a frontend, telling apart "not a Service" from "known address,
 * unknown port" through the address's wildcard entry. */
static __always_inline int lb4_lookup(__be32 addr, __be16 port, __u8 proto, __u8 scope, struct lb4_service **out)
{
	struct lb4_service *svc = lb4_lookup_master(addr, port, proto, scope);

	*out = svc;
	if (svc) {
		if (svc->count > 0)
			return LB_FOUND;
		return (svc->flags & LB_F_DROP_WHEN_EMPTY) ? LB_EMPTY_DROP : LB_NO_BACKEND;
	}
	if (lb4_lookup_master(addr, 0, 0, scope))
		return LB_UNKNOWN_PORT;
	return LB_NOT_SERVICE;
}

static __always_inline int lb4_is_loopback(__be32 addr)
{
	return (bpf_ntohl(addr) >> 24) == 127;
}

/* For traffic from this node's pods and host (socket LB): the internal-scope entry when
 * there is one (it exists when the traffic policies make internal traffic see other
 * backends, e.g. ETP=Local's short-circuit to cluster endpoints), else the external one. */
static __always_inline int lb4_lookup_internal(__be32 addr, __be16 port, __u8 proto, __u8 *scope, struct lb4_service **out)
{
	struct lb4_service *svc = lb4_lookup_master(addr, port, proto, LB_SCOPE_INTERNAL);

	if (svc) {
		*scope = LB_SCOPE_INTERNAL;
		*out = svc;
		if (svc->count > 0)
			return LB_FOUND;
		return (svc->flags & LB_F_DROP_WHEN_EMPTY) ? LB_EMPTY_DROP : LB_NO_BACKEND;
	}
	*scope = LB_SCOPE_EXTERNAL;
	return lb4_lookup(addr, port, proto, LB_SCOPE_EXTERNAL, out);
}

/* A NodePort reached on loopback (127.0.0.1:port, the host's network namespace only): its
 * 0.0.0.0:port entry, as the socket hooks and the socket terminator find it. An unknown
 * port there is somebody's local port, not a Service's. */
static __always_inline int lb4_lookup_loopback_nodeport(__be16 port, __u8 proto, __u8 *scope, struct lb4_service **out)
{
	int found = lb4_lookup_internal(0, port, proto, scope, out);

	return found == LB_UNKNOWN_PORT ? LB_NOT_SERVICE : found;
}

/* The backend for a flow hash: slot (hash % count) + 1, from the master entry when it
 * carries that slot. */
static __always_inline __u32 lb4_select_slot(__be32 addr, __be16 port, __u8 proto, __u8 scope,
					     const struct lb4_service *svc, __u32 hash)
{
	struct lb4_key key = {
		.address = addr,
		.port = port,
		.proto = proto,
		.scope = scope,
	};
	struct lb4_service *slot;
	__u32 index;

	if (svc->count == 0)
		return 0;
	index = hash % svc->count;
	if (index < LB4_FIRST_SLOTS && svc->first_backends[index])
		return svc->first_backends[index];
	key.slot = index + 1;
	slot = bpf_map_lookup_elem(&lb4_services, &key);
	return slot ? slot->backend_id : 0;
}

/* May this source use the frontend? Always, unless it has loadBalancerSourceRanges. */
static __always_inline int lb4_source_allowed(const struct lb4_service *svc, __be32 saddr)
{
	struct lb4_src_range_key k = {
		.prefixlen = 64,
		.rev_nat_id = svc->rev_nat_id,
		.source = saddr,
	};

	if (!(svc->flags & LB_F_SOURCE_RANGES))
		return 1;
	return bpf_map_lookup_elem(&lb4_src_ranges, &k) != NULL;
}

static __always_inline struct lb4_backend *lb4_backend(__u32 id)
{
	struct lb4_backend *b = id ? bpf_map_lookup_elem(&lb4_backends, &id) : NULL;

	return b && b->address ? b : NULL; /* an empty slot: a removed backend */
}

struct slot_search {
	struct lb4_key key;
	__u32 backend_id;
	__u32 found;
};

static long slot_search_step(__u64 i, void *ctx)
{
	struct slot_search *s = ctx;
	struct lb4_service *slot;

	s->key.slot = i + 1;
	slot = bpf_map_lookup_elem(&lb4_services, &s->key);
	if (slot && slot->backend_id == s->backend_id) {
		s->found = 1;
		return 1;
	}
	return 0;
}

/* Is the backend one of this frontend's slots (i.e. allowed by its traffic policy)? */
static __always_inline int lb4_has_backend(__be32 addr, __be16 port, __u8 proto, __u8 scope, const struct lb4_service *svc, __u32 backend_id)
{
	struct slot_search s = {
		.key = { .address = addr, .port = port, .proto = proto, .scope = scope },
		.backend_id = backend_id,
	};

	bpf_loop(svc->count, slot_search_step, &s, 0);
	return s.found;
}

struct backend_search {
	struct lb4_key key;
	__be32 address;
	__be16 port;
	__u8 proto;
	__u8 found;
	__u8 flags; /* enum lb_backend_flags the backend must have */
};

static long backend_search_step(__u64 i, void *ctx)
{
	struct backend_search *s = ctx;
	struct lb4_service *slot;
	struct lb4_backend *b;

	s->key.slot = i + 1;
	slot = bpf_map_lookup_elem(&lb4_services, &s->key);
	if (!slot)
		return 0;
	b = lb4_backend(slot->backend_id);
	if (b && b->address == s->address && b->port == s->port && b->proto == s->proto && (b->flags & s->flags) == s->flags) {
		s->found = 1;
		return 1;
	}
	return 0;
}

/* Is baddr:bport one of this frontend's backends, with all of `flags`? */
static __always_inline int lb4_has_backend_at(__be32 addr, __be16 port, __u8 proto, __u8 scope, const struct lb4_service *svc,
					      __be32 baddr, __be16 bport, __u8 flags)
{
	struct backend_search s = {
		.key = { .address = addr, .port = port, .proto = proto, .scope = scope },
		.address = baddr,
		.port = bport,
		.proto = proto,
		.flags = flags,
	};

	bpf_loop(svc->count, backend_search_step, &s, 0);
	return s.found;
}

/* Is address:port one of this frontend's backends, and on this node? */
static __always_inline int lb4_has_local_backend(__be32 addr, __be16 port, __u8 proto, __u8 scope, const struct lb4_service *svc,
						 __be32 baddr, __be16 bport)
{
	return lb4_has_backend_at(addr, port, proto, scope, svc, baddr, bport, LB_BACKEND_F_LOCAL);
}

/* ClientIP session affinity: the backend this client used for the Service port within the
 * timeout, if the frontend may still use it (its traffic policy allows it); else 0. */
static __always_inline __u32 lb4_affinity_get(const struct lb4_affinity_key *k, __be32 addr, __be16 port, __u8 proto, __u8 scope,
					      const struct lb4_service *svc, __u64 now)
{
	struct lb4_affinity_value *v;

	if (!svc->affinity_timeout)
		return 0;
	v = bpf_map_lookup_elem(&lb4_affinity, k);
	if (!v || now - v->last_used_ns > (__u64)svc->affinity_timeout * 1000000000ULL)
		return 0;
	if (!lb4_backend(v->backend_id) || !lb4_has_backend(addr, port, proto, scope, svc, v->backend_id))
		return 0;
	v->last_used_ns = now;
	return v->backend_id;
}

/* Remember a new choice for this client (when the Service has affinity). */
static __always_inline void lb4_affinity_set(const struct lb4_affinity_key *k, const struct lb4_service *svc, __u32 backend_id, __u64 now)
{
	struct lb4_affinity_value v = { .last_used_ns = now, .backend_id = backend_id };

	if (svc->affinity_timeout && backend_id)
		bpf_map_update_elem(&lb4_affinity, k, &v, BPF_ANY);
}

#endif
