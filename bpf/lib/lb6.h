/* IPv6 Service lookup and backend selection (shared/lb6.h), for the socket hooks and tc's
 * IPv6 path (lib/nodeport6.h). The same answers as lib/lb.h's IPv4 ones (enum lb_lookup),
 * over lb6_services. */
#ifndef FERRY_LIB_LB6_H
#define FERRY_LIB_LB6_H

#include "maps.h"
#include "lb.h"

static __always_inline int lb6_addr_equal(const __u8 *a, const __u8 *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3];
}

/* Find a frontend's master entry in one scope (key: its address, port and protocol, slot
 * 0), telling apart "not a Service" from "known address, unknown port" by the wildcard
 * entry (external scope only). */
static __always_inline int lb6_lookup_scope(struct lb6_key *key, __u8 scope, struct lb6_service **out)
{
	struct lb6_service *svc;
	__be16 port = key->port;
	__u8 proto = key->proto;

	key->scope = scope;
	key->slot = 0;
	svc = bpf_map_lookup_elem(&lb6_services, key);
	*out = svc;
	if (svc) {
		if (svc->count > 0)
			return LB_FOUND;
		return (svc->flags & LB_F_DROP_WHEN_EMPTY) ? LB_EMPTY_DROP : LB_NO_BACKEND;
	}
	if (scope != LB_SCOPE_EXTERNAL)
		return LB_NOT_SERVICE;
	key->port = 0;
	key->proto = 0;
	svc = bpf_map_lookup_elem(&lb6_services, key);
	key->port = port;
	key->proto = proto;
	return svc ? LB_UNKNOWN_PORT : LB_NOT_SERVICE;
}

/* For this node's pods and host (the socket hooks): the internal-scope entry where the
 * traffic policies give one (an ETP=Local frontend is reached from inside through the
 * cluster endpoints), else the external one; key->scope says which was found. */
static __always_inline int lb6_lookup(struct lb6_key *key, struct lb6_service **out)
{
	int found = lb6_lookup_scope(key, LB_SCOPE_INTERNAL, out);

	if (found != LB_NOT_SERVICE)
		return found;
	return lb6_lookup_scope(key, LB_SCOPE_EXTERNAL, out);
}

/* May this source use the frontend `key` names (its master `svc`)? Always, unless it has
 * loadBalancerSourceRanges: then only a source in one of them (lb6_src_ranges). */
static __always_inline int lb6_source_allowed(const struct lb6_key *key, const struct lb6_service *svc, const __u8 *saddr)
{
	struct lb6_src_range_key k = {
		.prefixlen = LB6_SRC_RANGE_FRONTEND_BITS + 128,
		.port = key->port,
		.proto = key->proto,
	};

	if (!(svc->flags & LB_F_SOURCE_RANGES))
		return 1;
	__builtin_memcpy(k.frontend, key->address, 16);
	__builtin_memcpy(k.source, saddr, 16);
	return bpf_map_lookup_elem(&lb6_src_ranges, &k) != NULL;
}

/* The backend slot for a hash: slot (hash % count) + 1 of the frontend `key` names. */
static __always_inline struct lb6_service *lb6_select_slot(struct lb6_key *key, const struct lb6_service *svc, __u32 hash)
{
	struct lb6_service *b;

	if (svc->count == 0)
		return NULL;
	key->slot = hash % svc->count + 1;
	b = bpf_map_lookup_elem(&lb6_services, key);
	key->slot = 0;
	return b;
}

struct lb6_backend_search {
	struct lb6_key key;
	__u8 address[16];
	__be16 port;
	__u8 found;
	__u8 pad;
	__u32 slot;
};

static long lb6_backend_search_step(__u64 i, void *ctx)
{
	struct lb6_backend_search *s = ctx;
	struct lb6_service *b;

	s->key.slot = i + 1;
	b = bpf_map_lookup_elem(&lb6_services, &s->key);
	if (b && b->port == s->port && lb6_addr_equal(b->address, s->address)) {
		s->found = 1;
		s->slot = i + 1;
		return 1;
	}
	return 0;
}

/* The slot entry holding backend addr:port among the frontend's slots (its traffic policy
 * still allows it), or NULL; with `draining`, among its draining slots too. */
static __always_inline struct lb6_service *lb6_find_backend(const struct lb6_key *key, const struct lb6_service *svc,
							    const __u8 *addr, __be16 port, int draining)
{
	struct lb6_backend_search s = { .key = *key, .port = port };

	__builtin_memcpy(s.address, addr, 16);
	bpf_loop((__u32)svc->count + (draining ? svc->draining : 0), lb6_backend_search_step, &s, 0);
	if (!s.found)
		return NULL;
	s.key.slot = s.slot;
	return bpf_map_lookup_elem(&lb6_services, &s.key);
}

/* ClientIP affinity: the slot of the backend this client used within the timeout, if the
 * frontend still has it; else NULL. */
static __always_inline struct lb6_service *lb6_affinity_get(const struct lb6_affinity_key *ak, const struct lb6_key *key,
							    const struct lb6_service *svc, __u64 now)
{
	struct lb6_affinity_value *v;
	struct lb6_service *b;

	if (!svc->affinity_timeout)
		return NULL;
	v = bpf_map_lookup_elem(&lb6_affinity, ak);
	if (!v || now - v->last_used_ns > (__u64)svc->affinity_timeout * 1000000000ULL)
		return NULL;
	b = lb6_find_backend(key, svc, v->address, v->port, 0);
	if (b)
		v->last_used_ns = now;
	return b;
}

static __always_inline void lb6_affinity_set(const struct lb6_affinity_key *ak, const struct lb6_service *svc,
					     const struct lb6_service *b, __u64 now)
{
	struct lb6_affinity_value v = { .last_used_ns = now, .port = b->port };

	if (!svc->affinity_timeout)
		return;
	__builtin_memcpy(v.address, b->address, 16);
	bpf_map_update_elem(&lb6_affinity, ak, &v, BPF_ANY);
}

#endif
