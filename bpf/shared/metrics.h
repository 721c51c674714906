/* What the datapath counts: forwarded traffic by path, and drops by reason. Both maps are
 * per-CPU arrays indexed by these enums; user space sums the CPUs. Retired values stay
 * reserved: never renumber. */
#ifndef FERRY_SHARED_METRICS_H
#define FERRY_SHARED_METRICS_H

#include "counters.h"

enum ferry_stat {
	STAT_FWD_LOCAL = 0,      /* north-south to a backend on this node (DNAT) */
	STAT_FWD_REMOTE = 1,     /* north-south to another node (DNAT + SNAT, redirected) */
	STAT_REPLY_LOCAL = 2,    /* reply from a local backend, source restored on egress */
	STAT_REPLY_REMOTE = 3,   /* reply to an SNATed flow, restored and redirected */
	STAT_ICMP_REJECT = 4,    /* ICMP port unreachable sent for a Service with no backend */
	STAT_ICMP_RELATED = 5,   /* ICMP error of a translated flow, translated */
	STAT_SOCK_XLATE = 6,     /* connect()/sendmsg() rewritten to a backend */
	STAT_SOCK_REJECT = 7,    /* connect()/sendmsg() refused: no backend or unknown port */
	STAT_CT_REBALANCED = 8,  /* an established flow whose backend vanished got a new one */
	STAT_FWD_DSR = 9,        /* north-south to another node by DSR (no replies come back here) */
	STAT_DSR_RECEIVED = 10,  /* a DSR packet for a local backend: frontend recorded, option removed */
	STAT_ICMP_FRAG_NEEDED = 11, /* DSR's option would not fit the MTU: told the client */
	STAT_NAT_EARLY_DROP = 12, /* no free SNAT port: a never-established flow's port was taken */
	STAT_ICMP_TIME_EXCEEDED = 13, /* TTL ran out on a packet this node would forward: told the sender */
	STAT_FRAGMENT = 14,       /* a later fragment of a translated datagram, translated the same way */
	STAT_ARP_REPLY = 15,      /* an ARP request for an address this node announces, answered */
	STAT_DSR_CONTESTED = 16,  /* a DSR SYN naming another frontend than its tuple's live binding: left to the pod */
	STAT_CT_MIDSTREAM = 17,   /* a client's TCP segment other than a SYN that no flow held, balanced
				   * as a new flow: its state was lost (an overfull conntrack map
				   * evicting, a flush) or it is a stray segment */
	STAT_LOCAL_CONTESTED = 18, /* a SYN naming another frontend than the live flow holding its local
				    * pod's tuple: left to the pod (bpf/lib/contest.h) */
	STAT_LOCAL_REMAPPED = 19,  /* a new flow whose local pod's tuple another live flow holds: given
				    * another client port at the pod (bpf/lib/contest.h) */
	STAT_FWD_LOCAL6 = 20,      /* IPv6 north-south to a backend on this node (DNAT) */
	STAT_REPLY_LOCAL6 = 21,    /* IPv6 reply from a local backend, source restored on egress */
	STAT_FWD_REMOTE6 = 22,     /* IPv6 north-south to another node (DNAT + SNAT, redirected) */
	STAT_REPLY_REMOTE6 = 23,   /* IPv6 reply to an SNATed flow, restored and redirected */
	STAT_MAX = 24,
};

enum ferry_drop_reason {
	DROP_NONE = 0,
	DROP_UNKNOWN_PORT = 1,     /* a known Service address on a port no Service defines */
	DROP_NO_BACKEND = 2,       /* no backend and no reject possible (e.g. not TCP/UDP) */
	DROP_NAT_EXHAUSTED = 3,    /* no free SNAT port after the allowed retries */
	DROP_MALFORMED = 4,        /* headers cut short or inconsistent */
	DROP_FIB_FAILED = 5,       /* no route to the backend or back to the client */
	DROP_CT_MAP_FULL = 6,      /* conntrack or NAT insert failed */
	DROP_BACKEND_MISSING = 7,  /* a slot points at a backend that is not in the map */
	DROP_FRAGMENT = 8,         /* a later fragment of a datagram whose first fragment was not seen */
	DROP_CSUM_FAILED = 9,      /* a checksum or packet rewrite helper failed */
	DROP_NO_LOCAL_BACKEND = 10, /* traffic policy Local and no local endpoint */
	DROP_SOURCE_RANGE = 11,    /* source not in the LoadBalancer's loadBalancerSourceRanges */
	DROP_DSR_OPTION = 12,      /* a DSR option that could not be added or removed */
	DROP_DSR_INVALID = 13,     /* a DSR option this node did not ask for: DSR off, unknown frontend,
				    * destination not a local backend of it, or (not a TCP SYN) a live flow's binding */
	DROP_TTL_EXCEEDED = 14,    /* TTL 1 or 0 on a packet this node would forward */
	DROP_ICMP_RATELIMIT = 15,  /* an ICMP error was due but over the rate limit: dropped silently */
	DROP_HANDOVER_UNBOUND = 16, /* in an upgrade's switch, a reply whose binding, or a client's
				     * TCP segment (not a SYN) whose flow, is not copied yet: its
				     * sender retransmits (TCP) once it is there */
	DROP_SOURCE_UNKNOWN = 17,  /* a connect()/sendmsg() to a frontend with loadBalancerSourceRanges
				    * from a network namespace whose address the agent has not recorded */
	DROP_TOO_BIG = 18,         /* larger than the MTU of the other device its route leaves by, DF
				    * not set: the kernel would fragment it, ferry does not */
	DROP_TUPLE_TAKEN = 19,     /* IPv6: a new flow whose local pod's tuple a live flow of another
				    * frontend holds (no client-port remap for IPv6 yet) */
	DROP_REMOTE_IPV6 = 20,     /* IPv6 from outside to a frontend with a backend on another node,
				    * on a node with no IPv6 address for such flows to leave from */
	DROP_NOT_SERVED = 21,      /* to a Service-only address, a packet tc does not translate (another
				    * protocol, an ICMP echo, IPv6 extension headers or fragments): dropped,
				    * not routed back out */
	DROP_REASON_MAX = 32,
};

#endif
