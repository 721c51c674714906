/* The IPv6 maps (shared/lb6.h, shared/ct6.h), part of lib/maps.h. */
#ifndef FERRY_LIB_MAPS6_H
#define FERRY_LIB_MAPS6_H

/* IPv6 Services at the socket hooks (shared/lb6.h), sized as their IPv4 counterparts. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lb6_key);
	__type(value, struct lb6_service);
} lb6_services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct lb6_affinity_key);
	__type(value, struct lb6_affinity_value);
} lb6_affinity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct lb6_sock_key);
	__type(value, struct lb6_sock_value);
} lb6_sock_rev SEC(".maps");

/* An IPv6 frontend's master key → its Service port's name, for the CLI (never read here). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 131072);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lb6_key);
	__type(value, struct lb4_frontend_name);
} lb6_names SEC(".maps");

/* loadBalancerSourceRanges of IPv6 LoadBalancer IPs (shared/lb6.h), sized as IPv4's. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lb6_src_range_key);
	__type(value, __u8);
} lb6_src_ranges SEC(".maps");

/* Network namespace cookie → its IPv6 source address, as lb4_netns_sources. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct lb6_netns_source);
} lb6_netns_sources SEC(".maps");

/* IPv6 north-south flows (shared/ct6.h): the client's direction of every flow and the
 * reply's of a local one, sized as ct4. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 131072);
	__type(key, struct ct6_key);
	__type(value, struct ct6_entry);
} ct6 SEC(".maps");

/* IPv6 SNAT bindings of flows to remote backends (struct nat6_entry), sized as nat4. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 131072);
	__type(key, struct ct6_key);
	__type(value, struct nat6_entry);
} nat6 SEC(".maps");

/* Next hops of forwarded IPv6 packets by destination (shared/ct6.h): an LRU, so that the
 * clients' addresses an outsider can vary cost lookups, never room. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct fib6_hop_key);
	__type(value, struct fib6_hop);
} fib6_hops SEC(".maps");

/* How fragmented IPv6 datagrams' first fragments were translated (shared/ct6.h). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct frag6_key);
	__type(value, struct frag6_entry);
} frag6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct frag6_record);
} frag6_scratch SEC(".maps");

/* A forwarded IPv6 packet as parsed, and its new ends, from the function that decided
 * them to the ones after it (lib/snat6.h). Per CPU, living for one packet, as ct4_fresh. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pkt6_handoff);
} pkt6_handoff SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nat6_ends);
} nat6_handoff SEC(".maps");

/* The node's IPv6 address for remote flows (struct node6_address). Not a load-time
 * constant: the agent writes it at load and again when its Node's IPv6 address changes
 * (src/datapath/snat6-address.ts), as a node may gain one after the agent started. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct node6_address);
} snat6_address SEC(".maps");

/* The address as four words, or NULL when the node has none. Written while packets read
 * it, a change may reach one packet half made: its flow fails as with the old address gone. */
static __always_inline const __u32 *snat6_words(void)
{
	__u32 zero = 0;
	const struct node6_address *a = bpf_map_lookup_elem(&snat6_address, &zero);
	const __u32 *w;

	if (!a)
		return NULL;
	w = (const __u32 *)a->address;
	return (w[0] | w[1] | w[2] | w[3]) ? w : NULL;
}

static __always_inline int snat6_on(void)
{
	return snat6_words() != NULL;
}

static __always_inline int snat6_is_node(const __u8 *addr)
{
	const __u32 *n = snat6_words();
	const __u32 *w = (const __u32 *)addr;

	return n && w[0] == n[0] && w[1] == n[1] && w[2] == n[2] && w[3] == n[3];
}

/* The address into `out` (all zero when there is none: callers ask snat6_on first). */
static __always_inline void snat6_node_address(__u8 *out)
{
	const __u32 *n = snat6_words();
	__u32 *w = (__u32 *)out;

	if (!n) {
		w[0] = w[1] = w[2] = w[3] = 0;
		return;
	}
	w[0] = n[0];
	w[1] = n[1];
	w[2] = n[2];
	w[3] = n[3];
}

#endif
