/* Connection tracking for IPv6 north-south flows handled by tc (lib/nodeport6.h): packets
 * from outside to an IPv6 NodePort, LoadBalancer IP or externalIP whose backends are all
 * on this node (DNAT only; forwarding IPv6 to other nodes is not built yet).
 *
 * ct6 holds two entries per flow in one LRU map: the client's direction (client →
 * frontend: which backend) and the reply's (backend → client: which frontend the reply
 * leaves as). Entries age out by `expires_ns` (CLOCK_MONOTONIC) and are refreshed by
 * traffic; the LRU bounds what an outsider can fill. The contract with src/datapath:
 * codecs in src/datapath/layouts6.ts, checked against this header's BTF. */
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
	__u8 flags;    /* enum ct_flags (shared/ct.h): CT_F_LOCAL, SEEN_REPLY, CLOSING, ESTABLISHED */
	__u8 pad[5];
};

#endif
