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

/* An IPv6 packet as lib/parse6.h parsed it: its addresses, the ports (and TCP flags) of
 * TCP or UDP, the type of ICMPv6. Handed from nodeport6_ingress to nodeport6_snat_flow in
 * one tc_ingress run (pkt6_handoff, one per CPU), so that the flow's state is written
 * without a second parse. */
struct pkt6 {
	__u8 saddr[16];
	__u8 daddr[16];
	__be16 sport;
	__be16 dport;
	__u8 proto;     /* TCP or UDP also after a Fragment header */
	__u8 tcp_flags;
	__u8 icmp_type; /* ICMPv6 */
	__u8 fragment;  /* enum pkt6_fragment */
	__u32 l4_off;
	__u32 len;
	__be32 frag_id; /* a fragment's identification */
};

/* What nodeport6_ingress hands nodeport6_snat_flow (pkt6_handoff): the packet as parsed,
 * and for a new flow the backend it chose (backend_port 0: none, a flow whose state is
 * due; nodeport6_snat_flow then looks the flow up itself), with the flow's hash, so that a
 * new flow's frontend and slot are looked up once. */
struct pkt6_handoff {
	struct pkt6 p;
	__u8 backend[16];
	__be16 backend_port;
	__u8 ranged; /* CT_F_RANGED: the frontend has loadBalancerSourceRanges */
	__u8 pad;
	__u32 hash;  /* flow_hash6: the slot it chose, and the SNAT port sequence */
};

/* Where a packet lies in its datagram. A first fragment carries the ports, and is balanced
 * and translated as a whole packet is; the later ones follow it (frag6). */
enum pkt6_fragment {
	PKT6_WHOLE = 0,
	PKT6_FIRST_FRAGMENT = 1,
	PKT6_LATER_FRAGMENT = 2,
};

/* frag6: how a fragmented datagram's first fragment was translated (its new addresses, and
 * whether it was routed on), by the fragments' own addresses, identification and
 * protocol, as frag4 (shared/ct.h) for IPv4: the later fragments, which carry no ports,
 * are translated the same way. An LRU, sized as frag4; entries live frag_lifetime. */
struct frag6_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__be32 id;
	__u8 proto;
	__u8 pad[3];
};

struct frag6_entry {
	__u64 expires_ns;
	__u8 saddr[16]; /* the later fragments leave with these addresses */
	__u8 daddr[16];
	__u8 action;    /* enum frag_action (shared/ct.h) */
	__u8 pad[7];
};

/* One frag6 write in the making (frag6_scratch, per CPU): built in map memory, as the
 * frames of the functions that write it have no room for it. */
struct frag6_record {
	struct frag6_key key;
	struct frag6_entry entry;
};

/* Where a forwarded IPv6 packet goes (nat6_handoff, one per CPU): written by the global
 * function of tc_ingress that decided it, read by nodeport6_forward in the same run, so
 * that the packet is parsed and its flow looked up once. Its new source and destination,
 * and the ports it had then (the reader checks them against the packet). */
struct nat6_ends {
	__u8 saddr[16];
	__u8 daddr[16];
	__be16 sport;
	__be16 dport;
	__be16 from_sport;
	__be16 from_dport;
	__u32 stat; /* the STAT_* it is counted as when sent */
};

#endif
