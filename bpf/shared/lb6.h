/* IPv6 Services at the socket hooks (the IPv6 half of a dual-stack Service's ClusterIP):
 * frontends, their backends, ClientIP affinity and the socket reverse map. The contract
 * with src/datapath: every struct here has a codec in src/datapath/layouts6.ts, checked
 * against this header's BTF. Addresses are 16 bytes in network order. */
#ifndef FERRY_SHARED_LB6_H
#define FERRY_SHARED_LB6_H

#include "types.h"

/* Key of lb6_services: one master entry (slot 0) per frontend, then one per backend slot
 * (1..count). The wildcard entry of a Service address is port 0, protocol 0, slot 0. */
struct lb6_key {
	__u8 address[16];
	__be16 port;
	__u8 proto;
	__u8 scope; /* enum lb_scope: as IPv4's, an internal entry where the policies differ */
	__u16 slot;
	__u8 pad[2];
};

/* slot 0: count, flags (enum lb_flags) and the affinity timeout; slot > 0: its backend.
 * The backends stand in their slots by value (no ids): the socket hooks need nothing
 * else of them. Slots count+1..count+draining hold the terminating backends that still
 * serve: never chosen, but the UDP sockets connected to them are kept (sock_term). */
struct lb6_service {
	__u8 address[16];       /* slot > 0: the backend's address */
	__be16 port;            /* slot > 0: the backend's port */
	__u16 count;            /* slot 0: number of backend slots */
	__u16 flags;            /* slot 0: enum lb_flags; slot > 0: enum lb_backend_flags (for the CLI) */
	__u16 draining;         /* slot 0: number of draining slots after them */
	__u32 affinity_timeout; /* slot 0: seconds of ClientIP affinity; 0 = none */
};

/* sessionAffinity: ClientIP at the socket hooks: a client is its network namespace (a pod,
 * or the host); the Service port is its frontend. */
struct lb6_affinity_key {
	__u64 netns_cookie;
	__u8 address[16];
	__be16 port;
	__u8 proto;
	__u8 pad[5];
};

struct lb6_affinity_value {
	__u64 last_used_ns; /* CLOCK_MONOTONIC of the last connect() it steered */
	__u8 address[16];   /* the backend */
	__be16 port;
	__u8 pad[6];
};

/* After connect()/sendmsg() was rewritten to a backend, recvmsg() and getpeername() map
 * the backend back to the frontend, per socket. */
struct lb6_sock_key {
	__u64 cookie;
	__u8 address[16];
	__be16 port;
	__u8 pad[6];
};

struct lb6_sock_value {
	__u8 address[16];
	__be16 port;
	__u8 pad[2];
};

/* Key of lb6_src_ranges (an LPM trie): one entry per (frontend, CIDR) of a LoadBalancer
 * IP's loadBalancerSourceRanges. The frontend (its address, port and protocol) is the
 * first 160 bits, always matched whole: prefixlen = 160 + the CIDR's length. */
struct lb6_src_range_key {
	__u32 prefixlen;
	__u8 frontend[16];
	__be16 port;
	__u8 proto;
	__u8 pad;
	__u8 source[16];
};

enum lb6_src_range_bits {
	LB6_SRC_RANGE_FRONTEND_BITS = 160, /* the key's frontend part, matched whole */
};

/* A network namespace's IPv6 source address (lb6_netns_sources, keyed by its cookie):
 * what the socket hooks check loadBalancerSourceRanges by, as connect() has none yet. */
struct lb6_netns_source {
	__u8 address[16];
};

/* The node's IPv6 address remote IPv6 flows leave from (snat6_address's one slot); all
 * zero: none, and IPv6 to remote backends is dropped (DROP_REMOTE_IPV6). */
struct node6_address {
	__u8 address[16];
};

#endif
