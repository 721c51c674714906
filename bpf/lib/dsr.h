/* Direct server return: the LB node DNATs a flow to a remote backend and carries the
 * frontend (VIP:port) to the backend's node in an 8-byte IPv4 option: on the SYN for TCP,
 * on every datagram for UDP. The backend's node records the frontend, removes the option,
 * and rewrites the replies' source on egress, so replies go straight to the client. */
#ifndef FERRY_LIB_DSR_H
#define FERRY_LIB_DSR_H

#include "maps.h"
#include "nat.h"
#include "icmp.h"

/* Recompute the IPv4 header checksum of a header of `words` 32-bit words (5 or 7). */
static __always_inline int ipv4_csum_refresh(struct __sk_buff *skb, const struct pkt4 *p, int words)
{
	__u32 hdr[7] = {};
	__s64 sum;
	__u16 csum;

	if (words != 5 && words != 7)
		return -1;
	if (bpf_skb_load_bytes(skb, p->l3_off, hdr, words * 4) < 0)
		return -1;
	((__u16 *)hdr)[5] = 0;
	sum = bpf_csum_diff(NULL, 0, (__be32 *)hdr, words * 4, 0);
	if (sum < 0)
		return -1;
	csum = csum_fold32((__u32)sum);
	return bpf_skb_store_bytes(skb, IP_CSUM_OFF(p), &csum, sizeof(csum), 0);
}

/* Set ihl and total length after adding (+8) or removing (-8) the option. */
static __always_inline int ipv4_set_hdr_len(struct __sk_buff *skb, const struct pkt4 *p, int words, __u16 tot_len)
{
	__u8 vihl = 0x40 | words;
	__be16 len = bpf_htons(tot_len);

	if (bpf_skb_store_bytes(skb, p->l3_off, &vihl, 1, 0) < 0 ||
	    bpf_skb_store_bytes(skb, p->l3_off + offsetof(struct iphdr, tot_len), &len, 2, 0) < 0)
		return -1;
	return ipv4_csum_refresh(skb, p, words);
}

/* Add the option after a plain 20-byte header. */
static __always_inline int dsr4_push(struct __sk_buff *skb, const struct pkt4 *p, __be32 addr, __be16 port)
{
	__u8 opt[DSR_OPT_LEN] = { DSR_OPT_TYPE, DSR_OPT_LEN };

	if (p->ihl_words != 5)
		return -1;
	__builtin_memcpy(&opt[2], &port, 2);
	__builtin_memcpy(&opt[4], &addr, 4);
	if (bpf_skb_adjust_room(skb, DSR_OPT_LEN, BPF_ADJ_ROOM_NET, 0) < 0)
		return -1;
	if (bpf_skb_store_bytes(skb, p->l3_off + sizeof(struct iphdr), opt, sizeof(opt), 0) < 0)
		return -1;
	return ipv4_set_hdr_len(skb, p, 7, p->ip_len + DSR_OPT_LEN);
}

/* Remove the option (the packet came with ihl 7 and our option). */
static __always_inline int dsr4_pop(struct __sk_buff *skb, const struct pkt4 *p)
{
	if (bpf_skb_adjust_room(skb, -DSR_OPT_LEN, BPF_ADJ_ROOM_NET, 0) < 0)
		return -1;
	return ipv4_set_hdr_len(skb, p, 5, p->ip_len - DSR_OPT_LEN);
}

#endif
