/* What one call costs a tc program on this machine (bench/call-cost.ts): 32 calls of a
 * kind against none. A kernel whose returns go through a mitigation's thunk (AMD's SRSO
 * "Safe RET", retbleed's untrained returns) pays it at every return: of a BPF subprogram,
 * of a helper, and of each kernel function a helper calls in turn. */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#define CALLS 32
/* The TCP checksum of an untagged IPv4 frame without options. */
#define TCP_CSUM_OFF (14 + 20 + 16)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} call_cost_hash SEC(".maps");

SEC("tc")
int call_none(struct __sk_buff *skb)
{
	return TC_ACT_OK;
}

/* A BPF-to-BPF call: the JIT's call and return, nothing else. */
static __attribute__((noinline)) __u32 step(__u32 x)
{
	return x * 3 + 1;
}

SEC("tc")
int call_subprog(struct __sk_buff *skb)
{
	__u32 x = skb->len;

#pragma unroll
	for (int i = 0; i < CALLS; i++)
		x = step(x);
	return x == 7 ? TC_ACT_SHOT : TC_ACT_OK;
}

/* A helper that calls nothing further: the helper call and return alone. */
SEC("tc")
int call_helper(struct __sk_buff *skb)
{
	long x = 0;

#pragma unroll
	for (int i = 0; i < CALLS; i++)
		x += bpf_get_numa_node_id();
	return x == -1 ? TC_ACT_SHOT : TC_ACT_OK;
}

/* The datapath's checksum helper (as lib/nat.h calls it): the kernel functions behind it too. */
SEC("tc")
int call_csum(struct __sk_buff *skb)
{
	long rc = 0;

#pragma unroll
	for (int i = 0; i < CALLS; i++)
		rc |= bpf_l4_csum_replace(skb, TCP_CSUM_OFF, 0, i + 1, BPF_F_PSEUDO_HDR);
	return rc ? TC_ACT_SHOT : TC_ACT_OK;
}

/* A hash map lookup that finds its key (as conntrack's do). */
SEC("tc")
int call_lookup(struct __sk_buff *skb)
{
	__u32 key = 1;
	__u64 sum = 0;

#pragma unroll
	for (int i = 0; i < CALLS; i++) {
		__u64 *v = bpf_map_lookup_elem(&call_cost_hash, &key);

		if (v)
			sum += *v;
	}
	return sum == 7 ? TC_ACT_SHOT : TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
