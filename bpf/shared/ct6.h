/* Connection tracking for IPv6 north-south flows handled by tc (lib/nodeport6.h): packets
 * from outside to an IPv6 NodePort, LoadBalancer IP or externalIP, DNATed to a backend on
 * this node, or DNATed and SNATed to the node's IPv6 address towards one on another node
 * (lib/snat6.h).
 *
 * ct6 holds the client's direction of every flow (client → frontend: which backend) and
 * the reply's of a local one (backend → client: which frontend the reply leaves as), in
 * one LRU map; nat6 holds a remote flow's reply binding (backend → node:port: which client
 * and frontend), which reserves the port. Entries age out by `expires_ns`
 * (CLOCK_MONOTONIC) and are refreshed by traffic; the LRU bounds what an outsider can
 * fill. The contract with src/datapath: codecs in src/datapath/layouts6.ts, checked
 * against this header's BTF. */
#ifndef FERRY_SHARED_CT6_H
#define FERRY_SHARED_CT6_H

#include "types.h"

enum ct6_dir {
	CT6_DIR_CLIENT = 0, /* saddr: the client, daddr: the frontend */
	CT6_DIR_REPLY = 1,  /* saddr: the backend, daddr: the client */
};

struct ct6_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 dir; /* enum ct6_dir */
	__u8 pad[2];
};

struct ct6_entry {
	__u64 expires_ns;
	__u8 addr[16]; /* CT6_DIR_CLIENT: the backend; CT6_DIR_REPLY: the frontend */
	__be16 port;   /* ... its port */
	__u8 flags;    /* enum ct_flags (shared/ct.h): CT_F_LOCAL or CT_F_SNAT, SEEN_REPLY, CLOSING,
			* ESTABLISHED */
	__u8 pad;
	__be16 nat_port; /* CT6_DIR_CLIENT with CT_F_SNAT: the node's port the flow leaves from */
	__u8 pad2[2];
};

/* nat6: a remote flow's reply binding, keyed by its reply tuple (struct ct6_key, dir
 * CT6_DIR_REPLY: the backend → the node's IPv6 address and the flow's port). */
struct nat6_entry {
	__u64 expires_ns;
	__u8 client_addr[16];
	__u8 frontend_addr[16];
	__be16 client_port;
	__be16 frontend_port;
	__u8 flags; /* enum ct_flags: CT_F_SNAT, SEEN_REPLY, CLOSING, ESTABLISHED, RESET */
	__u8 pad[3];
};

/* fib6_hops: the next hop IPv6 packets this node forwards take to an address, as the FIB
 * gave it for a packet from `saddr` arriving on `from_ifindex` (the route depends on no
 * more where no rule or multipath hash looks at ports: FERRY_HOPS_PER_FLOW unset). Kept
 * for a second and until the agent reports a route change (ferry_hop_epoch): an IPv6
 * lookup costs more than the rest of a forwarded packet. */
struct fib6_hop_key {
	__u8 daddr[16];
	__u8 saddr[16];
	__u32 from_ifindex;
	__u8 pad[4];
};

struct fib6_hop {
	__u64 looked_up_ns; /* CLOCK_MONOTONIC (the datapath's coarse clock) */
	__u32 ifindex;      /* the device it leaves by */
	__u8 macs[12];      /* the next hop's MAC, then the device's */
};

#endif
