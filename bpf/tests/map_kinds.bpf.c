/* Maps of each kind ferry uses, with a shared key/value layout: the subject of the map
 * API, batch, pinning and layout-check tests. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "tests/map_kinds.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct test_flow_key);
	__type(value, struct test_flow_value);
} test_hash SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 64);
	__type(key, struct test_flow_key);
	__type(value, struct test_flow_value);
} test_lru SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, struct test_flow_value);
} test_array SEC(".maps");

/* A map that only ever holds a few entries, to test the "map full" error. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4);
	__type(key, struct test_flow_key);
	__type(value, struct test_flow_value);
} test_small SEC(".maps");

/* Reads one key so the maps are referenced by a program. */
SEC("tc")
int touch_maps(struct __sk_buff *skb)
{
	struct test_flow_key k = {};
	struct test_flow_value *v = bpf_map_lookup_elem(&test_hash, &k);
	__u32 i = 0;

	if (v)
		return v->hits;
	if (bpf_map_lookup_elem(&test_lru, &k) || bpf_map_lookup_elem(&test_small, &k))
		return 1;
	return bpf_map_lookup_elem(&test_array, &i) ? 0 : 2;
}

char LICENSE[] SEC("license") = "GPL";
