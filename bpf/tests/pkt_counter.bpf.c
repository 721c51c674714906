/* A tiny tc ingress program that counts packets of one IP protocol: the foundation's
 * end-to-end check of compile → .rodata → load → attach → typed map read → detach. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "shared/counters.h"

/* Count only this IP protocol (0: every IPv4 packet). Set by user space before load. */
const volatile __u8 match_protocol = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ferry_counter);
} pkt_counter SEC(".maps");

static __always_inline void count(void *data, void *data_end, __u64 len)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct ferry_counter *c;
	__u32 key = 0;

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return;
	if (match_protocol && ip->protocol != match_protocol)
		return;
	c = bpf_map_lookup_elem(&pkt_counter, &key);
	if (c) {
		c->packets++;
		c->bytes += len;
	}
}

SEC("tc")
int count_packets(struct __sk_buff *skb)
{
	count((void *)(long)skb->data, (void *)(long)skb->data_end, skb->len);
	return TC_ACT_OK;
}

SEC("xdp")
int count_packets_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	count(data, data_end, data_end - data);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
