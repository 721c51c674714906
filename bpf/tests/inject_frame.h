/* The node pps benchmark's frame (bench/pps-node.ts, settings from bench/inject-frame.ts):
 * a 60-byte UDP datagram or TCP SYN from the client to the forwarding node's NodePort,
 * written whole from constants with the next of 1024 source ports. Its writers are the
 * live-frames source (xdp_inject.bpf.c) and the circulating source (xdp_sink.bpf.c's
 * xdp_recycle), which write every frame over whatever the last hop left in it. */
#ifndef FERRY_TESTS_INJECT_FRAME_H
#define FERRY_TESTS_INJECT_FRAME_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

const volatile __u8 dst_mac[ETH_ALEN] = {};
const volatile __u8 src_mac[ETH_ALEN] = {};
const volatile __be32 saddr = 0;
const volatile __be32 daddr = 0;
const volatile __be16 dport = 0;
const volatile __u8 proto = IPPROTO_UDP;
const volatile __u16 ip_check = 0; /* the IPv4 header's checksum (constant: only ports vary) */
/* The L4 checksum with source port 0, not yet complemented (pseudo-header and L4 header,
 * one's complement sum folded to 16 bits, network order): each frame adds its port. */
const volatile __u16 l4_sum_base = 0;

#define FIRST_PORT 1024
#define PORTS 1024
#define FRAME_LEN 60

/* Frames written: ports cycle in order, as trafgen's dinc() does. */
__u32 sent = 0;

static __always_inline __u16 csum_add16(__u16 sum, __u16 x)
{
	__u32 s = (__u32)sum + x;

	return (__u16)((s & 0xffff) + (s >> 16));
}

/* The next frame, over the FRAME_LEN bytes at `data`; -1 if the buffer is shorter. */
static __always_inline int write_frame(void *data, void *end)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	void *l4 = ip + 1;
	__be16 sport = bpf_htons(FIRST_PORT + (sent++ % PORTS));
	int i;

	if (data + FRAME_LEN > end)
		return -1;
	for (i = 0; i < ETH_ALEN; i++) {
		eth->h_dest[i] = dst_mac[i];
		eth->h_source[i] = src_mac[i];
	}
	eth->h_proto = bpf_htons(ETH_P_IP);
	ip->version = 4;
	ip->ihl = 5;
	ip->tos = 0;
	ip->tot_len = bpf_htons(FRAME_LEN - sizeof(*eth));
	ip->id = 0;
	ip->frag_off = 0;
	ip->ttl = 64;
	ip->protocol = proto;
	ip->check = ip_check;
	ip->saddr = saddr;
	ip->daddr = daddr;
	__builtin_memset(l4, 0, FRAME_LEN - sizeof(*eth) - sizeof(*ip));
	if (proto == IPPROTO_TCP) {
		struct tcphdr *t = l4;

		t->source = sport;
		t->dest = dport;
		t->doff = 5;
		t->syn = 1;
		t->window = bpf_htons(64240);
		t->check = ~csum_add16(l4_sum_base, sport);
	} else {
		struct udphdr *u = l4;

		u->source = sport;
		u->dest = dport;
		u->len = bpf_htons(FRAME_LEN - sizeof(*eth) - sizeof(*ip));
		u->check = ~csum_add16(l4_sum_base, sport);
	}
	return 0;
}

#endif
