/* L2 announcements: the addresses this node answers ARP for, per interface. The agent
 * writes an entry for each address it owns and refreshes its expiry while it lives: an
 * agent that dies stops its node answering within that time, so two nodes never answer
 * for long. */
#ifndef FERRY_SHARED_L2_H
#define FERRY_SHARED_L2_H

#include "types.h"

struct l2_key {
	__u32 ifindex;   /* the interface the request arrives on (and the reply leaves by) */
	__be32 addr;     /* the announced IPv4 address */
};

struct l2_entry {
	__u8 mac[6];     /* answered with: the interface's own address */
	__u8 pad[2];
	__u64 expires_ns; /* bpf_ktime_get_ns() after which the entry is not answered */
};

#endif
