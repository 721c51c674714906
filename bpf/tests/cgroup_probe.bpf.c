/* Counts connect4 calls from a cgroup: proves cgroup attachment works and is detached. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} connect_calls SEC(".maps");

SEC("cgroup/connect4")
int count_connect4(struct bpf_sock_addr *ctx)
{
	__u32 key = 0;
	__u64 *n = bpf_map_lookup_elem(&connect_calls, &key);

	if (n)
		__sync_fetch_and_add(n, 1);
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
