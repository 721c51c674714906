/* The pps benchmark's ceiling: the least an XDP forwarder can do. Every IPv4 frame is
 * readdressed to the sink (its MACs, destination address and port set from constants; no
 * lookup, no state; the IP header checksum kept right, as a bridge with br_netfilter checks
 * it, the L4 one left stale: the sink counts by address and port only) and sent back out
 * with XDP_TX. What a node forwards with this program is what the testbed around it allows. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

const volatile __u8 src_mac[ETH_ALEN] = {};
const volatile __u8 dst_mac[ETH_ALEN] = {};
const volatile __be32 dst_addr = 0;
const volatile __be32 src_addr = 0; /* 0: the source left as it is */
const volatile __be16 dst_port = 0;

/* An address of the header rewritten, its checksum kept right (RFC 1624). */
static __always_inline void set_addr(struct iphdr *ip, __be32 *field, __be32 to)
{
	__u32 sum = (__u16)~ip->check;

	sum += (__u16)~(*field & 0xffff) + (__u16)~(*field >> 16);
	sum += (to & 0xffff) + (to >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	ip->check = (__u16)~sum;
	*field = to;
}

SEC("xdp")
int xdp_bounce(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	__be16 *ports = (void *)(ip + 1);
	int i;

	if ((void *)(ports + 2) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5)
		return XDP_PASS;
	for (i = 0; i < ETH_ALEN; i++) {
		eth->h_source[i] = src_mac[i];
		eth->h_dest[i] = dst_mac[i];
	}
	set_addr(ip, &ip->daddr, dst_addr);
	if (src_addr) /* bench/pps-node.ts: a forwarder that translates both ends */
		set_addr(ip, &ip->saddr, src_addr);
	ports[1] = dst_port;
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
