/* Every map of the datapath. Sizes here are defaults; the loader resizes them at load
 * time (the agent's mapSizes setting). Both entry objects (tc, sock) include this file and
 * share the maps through their pins. */
#ifndef FERRY_LIB_MAPS_H
#define FERRY_LIB_MAPS_H

#include "ctx.h"
#include "shared/lb.h"
#include "shared/lb6.h"
#include "shared/ct.h"
#include "shared/ct6.h"
#include "shared/metrics.h"
#include "shared/events.h"
#include "shared/l2.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lb4_key);
	__type(value, struct lb4_service);
} lb4_services SEC(".maps");

/* Indexed by backend id (slot 0 unused): an array, so that the programs reach a backend
 * without a hash lookup (the verifier inlines it). An all-zero slot is no backend. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65537);
	__type(key, __u32);
	__type(value, struct lb4_backend);
} lb4_backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 131072);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct lb4_reverse_nat);
} lb4_reverse_nat SEC(".maps");

/* A backend's endpoint → its id (struct lb4_backend_key), sized as lb4_backends. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lb4_backend_key);
	__type(value, __u32);
} lb4_backend_ids SEC(".maps");

/* Which packets may be a Service's (struct lb4_addr_filter, enum lb4_filter_slot). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LB4_FILTER_SLOTS);
	__type(key, __u32);
	__type(value, struct lb4_addr_filter);
} lb4_addr_filter SEC(".maps");

/* One slot per backend id, as lb4_backends (slot 0 unused). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65537);
	__type(key, __u32);
	__type(value, struct lb4_backend_hop);
} lb4_backend_hops SEC(".maps");

/* Maglev lookup tables: table id (slot 0's backend_id) → an array of backend ids, one
 * per table position. The inner maps are created by the agent, sized by maglev_table_size. */
struct maglev_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_INNER_MAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__array(values, struct maglev_inner);
} lb4_maglev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct lb4_affinity_key);
	__type(value, struct lb4_affinity_value);
} lb4_affinity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lb4_src_range_key);
	__type(value, __u8);
} lb4_src_ranges SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 131072);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct lb4_frontend_name);
} lb4_names SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct lb4_sock_key);
	__type(value, struct lb4_sock_value);
} lb4_sock_rev SEC(".maps");

#include "maps6.h"

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 131072);
	__type(key, struct ct4_key);
	__type(value, struct ct4_entry);
} ct4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 131072);
	__type(key, struct ct4_key);
	__type(value, struct nat4_entry);
} nat4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct lb4_netns_source);
} lb4_netns_sources SEC(".maps");

/* Fragments of translated datagrams: see struct frag4_key. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct frag4_key);
	__type(value, struct frag4_entry);
} frag4 SEC(".maps");

/* One slot: the upgrade switch's deadline (struct ferry_handover), written by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ferry_handover);
} ferry_handover SEC(".maps");

/* One slot: when routes last changed (struct ferry_hop_epoch), written by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ferry_hop_epoch);
} ferry_hop_epoch SEC(".maps");

/* The agent's slot as written: the time of the last route change, the flags
 * (FERRY_HOPS_PER_FLOW, FERRY_SNAT_BY_DEVICE) in its lowest bits. */
static __always_inline __u64 hop_epoch(void)
{
	__u32 zero = 0;
	struct ferry_hop_epoch *e = bpf_map_lookup_elem(&ferry_hop_epoch, &zero);

	return e ? e->since_ns : 0;
}

/* The time in a slot as read (its flags taken off): kept next hops looked up before it are
 * not to be used (0: any may be). */
static __always_inline __u64 hop_epoch_since(__u64 epoch)
{
	return epoch & ~(__u64)FERRY_HOP_EPOCH_FLAGS;
}

static __always_inline __u64 hops_valid_since(void)
{
	return hop_epoch_since(hop_epoch());
}

/* Does snat4_devices list a device (a new SNAT flow's address then follows its route)? */
static __always_inline int snat_by_device(void)
{
	return (hop_epoch() & FERRY_SNAT_BY_DEVICE) != 0;
}

/* Devices whose own address a new SNAT flow routed out of them leaves from, by ifindex (as
 * MASQUERADE takes the outgoing device's): the agent lists the devices the tc programs run
 * on, other than the one holding the node's address (snat4_address), with an IPv4
 * address (an overlay's tunnel device, a second NIC), and sets FERRY_SNAT_BY_DEVICE while
 * any is listed. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, __be32);
} snat4_devices SEC(".maps");

/* Devices XDP may send a frame out of besides the one it arrived on, by ifindex (value 1):
 * the agent lists those running ferry's XDP natively whose driver takes redirected frames
 * (NETDEV_XDP_ACT_NDO_XMIT). The kernel drops a frame redirected to any other device (a
 * VXLAN overlay, a VLAN, a NIC without XDP): XDP leaves those to tc (lib/fib.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, __u8);
} xdp_tx_devices SEC(".maps");

/* Ports the host has bound sockets to (enum host_ports_slot). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HOST_PORTS_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} host_ports SEC(".maps");

/* May a socket of the host's hold `port` (host order)? Yes unless the map is trusted and
 * the port's bit is clear in both bitmaps. */
static __always_inline int host_port_maybe_bound(__u16 port)
{
	__u32 k = HOST_PORTS_TRUSTED;
	__u64 *w = bpf_map_lookup_elem(&host_ports, &k), *a;

	if (!w || !*w)
		return 1;
	k = port >> 6;
	w = bpf_map_lookup_elem(&host_ports, &k);
	k += HOST_PORTS_AGENT;
	a = bpf_map_lookup_elem(&host_ports, &k);
	return !w || !a || ((*w | *a) & (1ULL << (port & 63)));
}

/* The node's IPv4 address remote flows leave from, the source of its ICMP errors as a
 * router, and the host's for the socket hooks' loadBalancerSourceRanges. Not a load-time
 * constant: the agent writes it at load and again when its Node's address changes
 * (src/datapath/snat-address.ts); flows SNATed to the old address end with it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct node4_address);
} snat4_address SEC(".maps");

/* The address (network order); the verifier inlines the lookup. One aligned word: a
 * change reaches a packet whole, the old address or the new. */
static __always_inline __be32 snat4_node_address(void)
{
	__u32 zero = 0;
	const struct node4_address *a = bpf_map_lookup_elem(&snat4_address, &zero);

	return a ? a->address : 0;
}

/* Every node's addresses, written by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __be32);
	__type(value, struct node4_value);
} node4_addrs SEC(".maps");

/* Addresses this node answers ARP for (L2 announcements), written by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct l2_key);
	__type(value, struct l2_entry);
} l2_owned SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct icmp_bucket);
} icmp_ratelimit SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, struct ferry_counter);
} ferry_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROP_REASON_MAX);
	__type(key, __u32);
	__type(value, struct ferry_counter);
} ferry_drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} ferry_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ferry_monitor);
} ferry_monitor SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ferry_monitor_lease);
} ferry_monitor_lease SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ferry_scratch);
} ferry_scratch SEC(".maps");

/* A new flow's conntrack entry while its first packet is balanced and sent on (nodeport.h).
 * Per CPU: a tc or XDP program runs to its end, bottom halves off, before the next starts on
 * that CPU (on a PREEMPT_RT kernel it could be preempted, as with every per-CPU scratch). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ct4_entry);
} ct4_fresh SEC(".maps");

static __always_inline struct ct4_entry *ct4_fresh_slot(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&ct4_fresh, &zero);
}

/* The key of a one-slot array, kept in .rodata: a key on the stack would take a slot in
 * the frame of every function inlining the lookup, and the clock (ferry_now) is read deep in
 * calls whose frames add up to the verifier's limit. */
static const __u32 only_slot = 0;

static __always_inline struct ferry_scratch *scratch(void)
{
	return bpf_map_lookup_elem(&ferry_scratch, &only_slot);
}

static __always_inline void count_stat(__u32 stat, __u64 bytes)
{
	struct ferry_counter *c = bpf_map_lookup_elem(&ferry_stats, &stat);
	struct ferry_scratch *s = scratch();

	if (s)
		s->last_stat = stat + 1; /* 0: none */

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

static __always_inline int count_drop(__u32 reason, __u64 bytes)
{
	struct ferry_counter *c = bpf_map_lookup_elem(&ferry_drops, &reason);
	struct ferry_scratch *s = scratch();

	if (s)
		s->last_drop = reason;

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
	return CTX_ACT_SHOT;
}

#endif
