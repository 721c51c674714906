/* Service load-balancing maps: frontends (services), backends, reverse NAT, and the
 * socket-LB reverse map. The contract with src/datapath: every struct here has a codec
 * in src/datapath/layouts.ts, checked against this header's BTF. */
#ifndef FERRY_SHARED_LB_H
#define FERRY_SHARED_LB_H

#include "types.h"

/* Which traffic a frontend entry serves. Two scopes exist only when a Service's external
 * and internal traffic policies select different backends (issue 6); until then every
 * frontend is written with LB_SCOPE_EXTERNAL and looked up with it. */
enum lb_scope {
	LB_SCOPE_EXTERNAL = 0,
	LB_SCOPE_INTERNAL = 1,
};

/* Frontend kinds and behaviour, in lb4_service.flags of the master slot. */
enum lb_flags {
	LB_F_CLUSTER_IP = 1 << 0,
	LB_F_NODE_PORT = 1 << 1,
	LB_F_LOAD_BALANCER = 1 << 2,
	LB_F_EXTERNAL_IP = 1 << 3,
	/* The "known VIP" entry (port 0, protocol 0): traffic to a port no Service defines on
	 * this address is dropped or refused, never forwarded or bounced back. */
	LB_F_WILDCARD = 1 << 4,
	/* NodePort on any local address (0.0.0.0:port), for socket LB on loopback. */
	LB_F_NODE_PORT_ANY = 1 << 5,
	/* With no backend, drop instead of answering port unreachable: a traffic policy of
	 * Local with no local endpoint (kube-proxy drops there; it rejects otherwise). */
	LB_F_DROP_WHEN_EMPTY = 1 << 6,
	/* loadBalancerSourceRanges apply: only sources in lb4_src_ranges may use it. */
	LB_F_SOURCE_RANGES = 1 << 7,
	/* Per-Service forwarding override (annotation ferry.dev/forwarding): remote backends
	 * through DSR, or through SNAT, whatever the node's mode. */
	LB_F_FWD_DSR = 1 << 8,
	LB_F_FWD_SNAT = 1 << 9,
	/* IPv6 external entries: every backend is on this node (shown by `ferry service list`;
	 * tc decides per flow by its backend's LB_BACKEND_F_LOCAL, lib/nodeport6.h). */
	LB_F_LOCAL_ONLY = 1 << 10,
};

/* The node's forwarding mode for remote backends (a load-time setting). */
enum fwd_mode {
	FWD_MODE_SNAT = 0,
	FWD_MODE_DSR = 1,
	FWD_MODE_HYBRID = 2, /* DSR for TCP, SNAT for UDP */
};

/* DSR carries the frontend to the backend's node in an IPv4 option (an experimental
 * number, RFC 4727, copied on fragmentation): type, length, port, address. */
enum dsr_option {
	DSR_OPT_TYPE = 0x9e,
	DSR_OPT_LEN = 8,
};

/* Key of the services map: one master entry (slot 0) per frontend, then one per backend
 * slot (1..count). */
struct lb4_key {
	__be32 address;
	__be16 port;     /* 0 only for the wildcard entry */
	__u8 proto;      /* IPPROTO_TCP/UDP/SCTP; 0 only for the wildcard entry */
	__u8 scope;      /* enum lb_scope */
	__u16 slot;
	__u8 pad[2];
};

/* How many of a frontend's first slots its master entry carries too: a flow hashed to one
 * of them takes its backend from the entry already looked up, without a second lookup
 * (a Service with up to this many endpoints never needs one). */
enum lb4_first_slots {
	LB4_FIRST_SLOTS = 4,
};

struct lb4_service {
	__u32 backend_id;       /* slot > 0: the backend in this slot; slot 0: the Maglev table id (0: none) */
	__u32 rev_nat_id;       /* slot 0: how replies are rewritten back to this frontend */
	__u32 affinity_timeout; /* slot 0: seconds of ClientIP affinity; 0 = none */
	__u16 count;            /* slot 0: number of backend slots */
	__u16 flags;            /* slot 0: enum lb_flags */
	__u16 affinity_id;      /* slot 0: the Service port's affinity id, shared by its frontends */
	__u8 pad[2];
	/* slot 0: the backends of slots 1..LB4_FIRST_SLOTS, as their own entries hold them
	 * (0: not carried, the slot's entry is looked up) */
	__u32 first_backends[LB4_FIRST_SLOTS];
};

/* sessionAffinity: ClientIP. A client is its address on the tc path, its network
 * namespace (a pod, or the host) on the socket path, where the source address is not
 * chosen yet at connect(). */
struct lb4_affinity_key {
	__u64 netns_cookie; /* socket path; 0 on the tc path */
	__be32 client;      /* tc path; 0 on the socket path */
	__u16 affinity_id;
	__u8 pad[2];
};

struct lb4_affinity_value {
	__u64 last_used_ns; /* CLOCK_MONOTONIC of the last new flow it steered */
	__u32 backend_id;
	__u8 pad[4];
};

enum lb_backend_flags {
	/* The backend runs on this node: north-south traffic is DNATed and delivered
	 * locally, with no SNAT. */
	LB_BACKEND_F_LOCAL = 1 << 0,
	LB_BACKEND_F_TERMINATING = 1 << 1,
};

struct lb4_backend {
	__be32 address;
	__be16 port;
	__u8 proto;
	__u8 flags; /* enum lb_backend_flags */
};

/* lb4_backend_ids: a backend's endpoint → its id, kept by the writer beside lb4_backends:
 * what tells a packet leaving from a backend's endpoint on the egress path. */
struct lb4_backend_key {
	__be32 address;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

/* The next hop of the newest flow to a backend (lb4_backend_hops, at its backend id),
 * written by the datapath: new SNAT flows to the backend within a second of its lookup,
 * from the same address and device, take it instead of looking the route up again. */
struct lb4_backend_hop {
	__u64 looked_up_ns; /* CLOCK_MONOTONIC */
	__be32 daddr;       /* the backend address it leads to (an id is reused) */
	__be32 saddr;       /* looked up from (the SNAT address) */
	__u32 from_ifindex; /* for packets that came in on this device */
	__u32 hop_ifindex;  /* 0: none */
	__u8 hop_macs[12];  /* destination, then source MAC, as in struct ethhdr */
	__u8 pad[4];
};

/* Which packets may be a Service's (lb4_addr_filter: three slots of 65536 bits), written
 * by the agent's service writer (src/datapath/address-filter.ts). An address's bit is
 * lb4_addr_hash (lib/lb.h; the agent computes the same), a port's its number. A packet
 * whose address is not held, or whose port no frontend uses at an address without a
 * wildcard, is not for a Service: its lookups are skipped. A slot is read only once
 * `ready` (the writer has filled it). */
enum lb4_filter_slot {
	LB4_FILTER_ADDRESSES = 0, /* an external frontend or wildcard holds the address */
	LB4_FILTER_WILDCARDS = 1, /* the address has a wildcard: unknown ports are dropped */
	LB4_FILTER_PORTS = 2,     /* an external frontend (at any address) uses the port */
	LB4_FILTER_SLOTS = 3,
};

struct lb4_addr_filter {
	__u32 ready;
	__u32 pad;
	__u8 bits[8192]; /* 65536 bits: bit h is bit h % 8 of byte h / 8 */
};

/* The cluster's node addresses (every node's InternalIP/ExternalIP), kept by the agent:
 * a DSR option naming a node address is a NodePort on that node. */
struct node4_value {
	__u8 flags; /* reserved */
	__u8 pad[3];
};

/* ICMP errors this node sends (port unreachable, fragmentation needed, time exceeded):
 * a token bucket per CPU. */
struct icmp_bucket {
	__u64 last_ns;
	__u64 tokens; /* in thousandths of a message */
};

/* rev_nat_id → the Service port a frontend belongs to ("namespace/name:port"), for the
 * CLI; the programs never read it. */
struct lb4_frontend_name {
	char name[96];
};

/* rev_nat_id → the frontend address replies must appear to come from. */
struct lb4_reverse_nat {
	__be32 address;
	__be16 port;
	__u8 pad[2];
};

/* loadBalancerSourceRanges as an LPM trie: the frontend's rev-NAT id, then the source
 * prefix. prefixlen counts the id (32 bits) plus the prefix length. */
struct lb4_src_range_key {
	__u32 prefixlen;
	__u32 rev_nat_id;
	__be32 source;
};

/* Socket LB: after connect()/sendmsg() was rewritten to a backend, recvmsg() and
 * getpeername() map the backend back to the frontend, per socket. */
struct lb4_sock_key {
	__u64 cookie;
	__be32 address;
	__be16 port;
	__u8 pad[2];
};

struct lb4_sock_value {
	__be32 address;
	__be16 port;
	__u8 pad[2];
	__u32 rev_nat_id;
};

/* The source address a network namespace's connections leave from (a pod's address; the
 * host's is snat4_address's), keyed by its netns cookie: loadBalancerSourceRanges at the socket
 * hooks, where connect() has no source address yet. Written by the agent from the
 * namespaces it can see. */
struct lb4_netns_source {
	__be32 address;
	__u8 pad[4];
};

/* The node's IPv4 address remote flows leave from (snat4_address's one slot; IPv6's is
 * struct node6_address). Written at load, before any program is attached. */
struct node4_address {
	__be32 address;
};

#endif
