/* The node pps benchmark's sink (bench/pps-node.ts): on the switch port that faces the
 * forwarding node, it counts and drops what that node forwarded to the sink's address and
 * port from its own address (translated both ways, as every dataplane compared must), right
 * at the first hop (veth runs it on the frame the node sent, or on its skb); anything else
 * (ARP, the nodes' own traffic) goes on through the switch. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

const volatile __be32 sink_addr = 0;
const volatile __be16 sink_port = 0;
const volatile __be32 from_addr = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sunk SEC(".maps");

SEC("xdp")
int xdp_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	__be16 *ports = (void *)(ip + 1);
	__u32 key = 0;
	__u64 *n;

	if ((void *)(ports + 2) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5)
		return XDP_PASS;
	if (ip->daddr != sink_addr || ports[1] != sink_port || ip->saddr != from_addr ||
	    (ip->protocol != IPPROTO_UDP && ip->protocol != IPPROTO_TCP))
		return XDP_PASS;
	n = bpf_map_lookup_elem(&sunk, &key);
	if (n)
		*n += 1;
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
