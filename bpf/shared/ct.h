/* Connection tracking and NAT for north-south flows handled by the tc programs.
 *
 * ct4:  one entry per flow as it arrives from the client (client → frontend): which
 *       backend it uses and how it was translated.
 * nat4: one entry per flow as its replies arrive (backend → client for a local backend,
 *       backend → node:nat_port for a remote one): where a reply goes back to. For a
 *       remote backend the key holds the SNAT port, so inserting it (no-exist) reserves
 *       the port.
 * Both are LRU maps; entries age out by `expires_ns` (CLOCK_MONOTONIC), collected by the
 * agent, and are refreshed by traffic. */
#ifndef FERRY_SHARED_CT_H
#define FERRY_SHARED_CT_H

#include "types.h"

struct ct4_key {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

enum ct_flags {
	CT_F_LOCAL = 1 << 0,      /* backend on this node: DNAT only */
	CT_F_SNAT = 1 << 1,       /* remote backend: DNAT + SNAT to the node address */
	CT_F_SEEN_REPLY = 1 << 2, /* a reply has been seen */
	CT_F_CLOSING = 1 << 3,    /* FIN or RST seen: short lifetime */
	CT_F_DSR = 1 << 4,        /* remote backend by DSR: DNAT, the frontend in an IP option */
	CT_F_RESET = 1 << 5,      /* a RST that ends the flow: from the backend, or from the client
				   * with the sequence number it was due to send next. The SNAT
				   * port may serve a new flow at once. */
	CT_F_ESTABLISHED = 1 << 6, /* the handshake completed: the client sent a non-SYN packet
				    * after a reply, or the backend a non-SYN one. Until then the
				    * flow lives the SYN lifetime, however many replies it saw. */
	CT_F_RANGED = 1 << 7,      /* the frontend has loadBalancerSourceRanges: every packet
				    * looks it up (an unranged flow's packets do not) */
};

/* Lifetimes, in seconds: the defaults of the load-time settings in lib/config.h. */
enum ct_lifetime {
	CT_LIFETIME_TCP_SYN = 60,
	CT_LIFETIME_TCP_ESTABLISHED = 21600,
	CT_LIFETIME_TCP_CLOSING = 10,
	CT_LIFETIME_NONTCP = 60,
};

struct ct4_entry {
	__u64 expires_ns;
	__u64 created_ns;
	__u32 backend_id;
	__u32 rev_nat_id;
	__be32 nat_addr;  /* CT_F_SNAT: the node address the flow leaves from; CT_F_LOCAL with
			   * nat_port: the client (its tuple remapped, lib/contest.h) */
	__be16 nat_port;  /* CT_F_SNAT: the source port it leaves from; CT_F_LOCAL: 0, or the
			   * client port the pod sees instead of the client's own */
	__u8 flags;       /* enum ct_flags */
	__u8 tcp_flags;   /* union of TCP flags seen from the client */
	__u64 packets;
	__u64 bytes;
	__u32 client_seq_next; /* TCP: host order, the sequence number the client sends next */
	__u32 ifindex;         /* the device the flow arrived on (layout 2; 0 in flows from layout 1) */
	/* Layout 4: the next hop the flow's packets to its backend were last sent to (lib/fib.h:
	 * looked up again at least once a second of traffic). hop_ifindex 0: none kept. */
	__u32 hop_ifindex;
	__u8 hop_macs[12];     /* destination, then source MAC, as in struct ethhdr */
};

struct nat4_entry {
	__u64 expires_ns;
	__be32 client_addr;   /* replies are sent back to this client */
	__be16 client_port;
	__be16 frontend_port; /* ... from this frontend */
	__be32 frontend_addr;
	__u32 rev_nat_id;
	__u8 flags;           /* enum ct_flags */
	__u8 pad;
	/* CT_F_LOCAL: a SYN on this tuple named another frontend while the binding was live (a
	 * client reusing its port, or a forgery). The pod decides (layout 3): its SYN-ACK moves
	 * the binding to this frontend, any other reply clears it. 0: none. */
	__be16 pending_port;
	__be32 pending_addr;
	__u64 packets;
	__u64 bytes;
	/* Layout 4: the next hop of this flow's replies to the client (SNAT only), as in ct4_entry. */
	__u32 hop_ifindex;
	__u8 hop_macs[12];
};

/* IPv4 fragments: the translation of a datagram's first fragment (the only one with
 * ports), kept by (source, destination, IP id, protocol) so that the later fragments get
 * the same addresses and go the same way. */
struct frag4_key {
	__be32 saddr;
	__be32 daddr;
	__be16 id;
	__u8 proto;
	__u8 pad;
};

enum frag_action {
	FRAG_ACT_PASS = 0,     /* addresses rewritten, on to the stack (or out, on egress) */
	FRAG_ACT_REDIRECT = 1, /* addresses rewritten, TTL down, FIB redirect */
};

struct frag4_entry {
	__u64 expires_ns;
	__be32 saddr;   /* the later fragments leave with these addresses */
	__be32 daddr;
	__u8 action;    /* enum frag_action */
	__u8 pad[7];
};

/* An upgrade across layouts in progress: until `until_ns` (CLOCK_MONOTONIC) the previous
 * programs' bindings are still being copied into this build's maps, and a reply that finds
 * none is not handed to the host (lib/snat.h). The agent sets it for the switch and clears
 * it after the last copy; 0: no switch. Its lowest bit is FERRY_HANDOVER_CHAINED. */
struct ferry_handover {
	__u64 until_ns;
};

/* Bits of until_ns. CHAINED: the previous build's tc programs are attached behind this
 * build's (the next tc priority, which sees what the first passes) on every device, so such
 * a packet is passed to them, which place it from their own maps, rather than dropped. */
enum ferry_handover_flags {
	FERRY_HANDOVER_CHAINED = 1,
};

/* Next hops kept by flows (ct4/nat4 hop_*) and shared by new flows (lb4_backend_hops) that
 * were looked up before `since_ns` (CLOCK_MONOTONIC) are not used: the agent writes it when
 * the kernel reports a route, rule, link or neighbour change, so a flow is routed again by
 * its next packet rather than within the second a hop is otherwise kept. 0: no change
 * seen. Its lowest bit is FERRY_HOPS_PER_FLOW. */
struct ferry_hop_epoch {
	__u64 since_ns;
};

/* Bits of since_ns. PER_FLOW: a route may depend on a flow's protocol and ports (policy
 * rules that select by them, or multipath hashing by ports), so new flows do not share
 * their backend's hop: each is looked up with its own. SNAT_BY_DEVICE: snat4_devices lists
 * a device, so a new SNAT flow's address depends on the device its route leaves by. */
enum ferry_hop_epoch_flags {
	FERRY_HOPS_PER_FLOW = 1,
	FERRY_SNAT_BY_DEVICE = 2,
	FERRY_HOP_EPOCH_FLAGS = 3,
};

/* host_ports: ports some socket in the host's network namespace was bound to, as two
 * bitmaps of 64 ports a slot (bit port % 64 of slot port / 64): the post_bind hooks' (slots
 * from 0) and the agent's (slots from HOST_PORTS_AGENT: the sockets open when it started,
 * and the ephemeral range where it overlaps the SNAT range), each written by one side only,
 * never cleared. A socket that holds node:port got its port one of those ways, so a new
 * SNAT binding asks the host's sockets about marked ports only. TRUSTED is nonzero once the
 * agent has filled its bitmap with the hooks attached; until then every port is asked about. */
enum host_ports_slot {
	HOST_PORTS_WORDS = 1024,
	HOST_PORTS_AGENT = 1024,
	HOST_PORTS_TRUSTED = 2048,
	HOST_PORTS_SLOTS = 2049,
};

/* How many other client ports a new local flow tries when another live flow holds its
 * tuple at the pod (lib/contest.h); the reference model predicts the same sequence. */
enum local_remap {
	LOCAL_REMAP_TRIES = 8,
};

#endif
