/* Load-time settings: .rodata constants the agent sets between open and load, so the
 * verifier prunes what a node does not use. Shared by every entry object; the defaults
 * follow the enums of bpf/shared. src/datapath/loader.ts sets them. */
#ifndef FERRY_LIB_CONFIG_H
#define FERRY_LIB_CONFIG_H

#include "common.h"
#include "shared/lb.h"
#include "shared/ct.h"

const volatile __u16 snat_port_min = 61000; /* SNAT source ports, host order; keep them */
const volatile __u16 snat_port_max = 65535; /* out of ip_local_port_range */
const volatile __u32 snat_retries = 8;      /* probe-sequence tries when the client's port is taken */
const volatile __u32 hash_seed = 0;         /* backend-selection hash seed, cluster-wide */
const volatile __u8 forwarding_mode = FWD_MODE_SNAT; /* enum fwd_mode: remote backends */
const volatile __u32 maglev_table_size = 0;          /* 0: Maglev off; else a prime, e.g. 16381 */
/* The network namespace of the node's host (its cookie): only there do NodePorts answer on
 * loopback, as kube-proxy's do. 0: the initial namespace. */
const volatile __u64 host_netns_cookie = 0;
/* ICMP errors this node sends, per CPU: a rate and a burst (net.ipv4.icmp_msgs_per_sec and
 * icmp_msgs_burst are 1000 and 50 per host). */
const volatile __u32 icmp_rate_per_sec = 1000;
const volatile __u32 icmp_burst = 50;
/* How long a datagram's later fragments may trail its first, in seconds. */
const volatile __u32 frag_lifetime = 10;

/* Conntrack lifetimes, in seconds. */
const volatile __u32 ct_lifetime_tcp_syn = CT_LIFETIME_TCP_SYN;
const volatile __u32 ct_lifetime_tcp_established = CT_LIFETIME_TCP_ESTABLISHED;
const volatile __u32 ct_lifetime_tcp_closing = CT_LIFETIME_TCP_CLOSING;
const volatile __u32 ct_lifetime_nontcp = CT_LIFETIME_NONTCP;

#endif
