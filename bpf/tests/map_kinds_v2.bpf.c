/* A later "version" of map_kinds whose test_hash value grew a field: adopting the maps
 * pinned by map_kinds must fail with the layout difference spelled out. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "shared/types.h"

struct test_flow_key {
	__be32 addr;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

struct test_flow_value {
	__u64 created_ns;
	__u64 hits;
	__u32 state;
	__u32 backend_id;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct test_flow_key);
	__type(value, struct test_flow_value);
} test_hash SEC(".maps");

SEC("tc")
int touch_maps(struct __sk_buff *skb)
{
	struct test_flow_key k = {};

	return bpf_map_lookup_elem(&test_hash, &k) ? 1 : 0;
}

char LICENSE[] SEC("license") = "GPL";
