/* ICMP: answering "port unreachable" for a Service with no backend (what kube-proxy's
 * REJECT rule does; a TCP client sees ECONNREFUSED), and translating ICMP errors that
 * belong to a translated flow, so path-MTU discovery works through the NAT. */
#ifndef FERRY_LIB_ICMP_H
#define FERRY_LIB_ICMP_H

#include "config.h"
#include "maps.h"
#include "nat.h"

#define ICMP_REJECT_QUOTE 28 /* the offending IPv4 header (20) and 8 bytes of L4 */

struct icmp4_reject_pkt {
	struct iphdr ip;
	struct icmphdr icmp;
	__u8 quote[ICMP_REJECT_QUOTE];
};

/* May this node send one more ICMP error now? A token bucket per CPU: icmp_rate_per_sec
 * messages a second, icmp_burst at once. A flood of packets that each earn an error must
 * not turn the node into a flood of errors. */
static __always_inline int icmp4_allowed(void)
{
	__u32 zero = 0;
	struct icmp_bucket *b = bpf_map_lookup_elem(&icmp_ratelimit, &zero);
	/* The clock itself, not ferry_now's per-CPU copy: an error is no forwarded packet's
	 * path, and the copy's bookkeeping would cost this frame, deep in calls, stack. */
	__u64 now = bpf_ktime_get_coarse_ns();
	__u64 cap = (__u64)icmp_burst * 1000;
	__u64 elapsed, added;

	if (!b)
		return 0;
	if (!b->last_ns) {
		b->last_ns = now;
		b->tokens = cap;
	}
	elapsed = now - b->last_ns;
	if (elapsed > NSEC_PER_SEC) {
		elapsed = NSEC_PER_SEC;
		b->last_ns = now - NSEC_PER_SEC;
	}
	/* A message is 1000 tokens, so `rate` messages a second are rate / 10^6 tokens a
	 * nanosecond. Time not yet worth a whole token is kept for the next call. */
	added = elapsed * icmp_rate_per_sec / 1000000;
	if (added) {
		b->last_ns += added * 1000000 / icmp_rate_per_sec;
		b->tokens += added;
		if (b->tokens > cap)
			b->tokens = cap;
	}
	if (b->tokens < 1000)
		return 0;
	b->tokens -= 1000;
	return 1;
}

/* Turn the packet into an ICMP error from `src` back to its sender, quoting its header and
 * 8 bytes of L4, and send it out the interface it came in on. */
static __always_inline int icmp4_send_error(struct __ctx_buff *ctx, const struct pkt4 *p, __be32 src, __u8 type, __u8 code, __u16 mtu, __u32 stat)
{
	struct icmp4_reject_pkt r = {};
	__u8 macs[2 * ETH_ALEN];
	__u8 swapped[2 * ETH_ALEN];
	__s64 sum;
	__u32 len = ETH_HLEN + sizeof(r);

	if (p->ihl_words != 5)
		return count_drop(DROP_NO_BACKEND, p->len);
	if (!icmp4_allowed())
		return count_drop(DROP_ICMP_RATELIMIT, p->len);
	if (ctx_load_bytes(ctx, p->l3_off, r.quote, ICMP_REJECT_QUOTE) < 0)
		return count_drop(DROP_MALFORMED, p->len);
	if (ctx_load_bytes(ctx, 0, macs, sizeof(macs)) < 0)
		return count_drop(DROP_MALFORMED, p->len);
	__builtin_memcpy(swapped, macs + ETH_ALEN, ETH_ALEN);
	__builtin_memcpy(swapped + ETH_ALEN, macs, ETH_ALEN);

	r.ip.version = 4;
	r.ip.ihl = 5;
	r.ip.tos = 0xc0; /* network control, as the kernel sends ICMP errors */
	r.ip.tot_len = bpf_htons(sizeof(r));
	r.ip.ttl = 64;
	r.ip.protocol = IPPROTO_ICMP;
	r.ip.saddr = src;
	r.ip.daddr = p->saddr;
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&r.ip, sizeof(r.ip), 0);
	if (sum < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	r.ip.check = csum_fold32((__u32)sum);

	r.icmp.type = type;
	r.icmp.code = code;
	if (type == ICMP_DEST_UNREACH && code == ICMP_FRAG_NEEDED)
		r.icmp.un.frag.mtu = bpf_htons(mtu);
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&r.icmp, sizeof(r.icmp) + ICMP_REJECT_QUOTE, 0);
	if (sum < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	r.icmp.checksum = csum_fold32((__u32)sum);

	if (ctx_resize(ctx, len) < 0 ||
	    ctx_store_bytes(ctx, 0, swapped, sizeof(swapped), 0) < 0 ||
	    ctx_store_bytes(ctx, ETH_HLEN, &r, sizeof(r), 0) < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	count_stat(stat, len);
	return ctx_bounce(ctx);
}

/* Destination unreachable (port unreachable, or fragmentation needed with a next-hop MTU)
 * from the address the packet was sent to. */
__ferry_global int icmp4_send_unreach(struct __ctx_buff *ctx, const struct pkt4 *p, __u8 code, __u16 mtu)
{
	if (!p)
		return CTX_ACT_SHOT;
	return icmp4_send_error(ctx, p, p->daddr, ICMP_DEST_UNREACH, code, mtu,
				code == ICMP_FRAG_NEEDED ? STAT_ICMP_FRAG_NEEDED : STAT_ICMP_REJECT);
}

/* A packet too big for the next hop's `mtu`, as a router answers it: fragmentation needed
 * when DF is set (the sender lowers its path MTU), else dropped and counted, where the
 * kernel's forwarding would fragment it. */
static __always_inline int icmp4_too_big(struct __ctx_buff *ctx, const struct pkt4 *p, __u32 mtu)
{
	if (p->df)
		return icmp4_send_unreach(ctx, p, ICMP_FRAG_NEEDED, mtu);
	return count_drop(DROP_TOO_BIG, p->len);
}

/* kube-proxy's REJECT: port unreachable, so a TCP client sees ECONNREFUSED. */
static __always_inline int icmp4_reject(struct __ctx_buff *ctx, const struct pkt4 *p)
{
	return icmp4_send_unreach(ctx, p, ICMP_PORT_UNREACH, 0);
}

/* A packet this node would forward has no TTL left: time exceeded, from this node (what a
 * router answers), and the packet goes no further. */
__ferry_global int icmp4_time_exceeded(struct __ctx_buff *ctx, const struct pkt4 *p)
{
	int rc;

	if (!p)
		return CTX_ACT_SHOT;
	if (p->proto == IPPROTO_ICMP)
		return count_drop(DROP_TTL_EXCEEDED, p->len); /* never an error about an error */
	rc = icmp4_send_error(ctx, p, snat4_node_address(), ICMP_TIME_EXCEEDED, ICMP_EXC_TTL, 0, STAT_ICMP_TIME_EXCEEDED);
	if (rc == CTX_ACT_SHOT)
		return rc;
	count_drop(DROP_TTL_EXCEEDED, p->len);
	return rc;
}

/* The inner (quoted) packet of an ICMP error. */
struct icmp4_inner {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u32 ip_off;  /* offset of the inner IPv4 header */
	__u32 l4_off;  /* offset of the inner L4 header */
	__u32 icmp_csum_off;
};

static __always_inline int icmp4_is_error(__u8 type)
{
	return type == ICMP_DEST_UNREACH || type == ICMP_TIME_EXCEEDED || type == ICMP_PARAMETERPROB;
}

static __always_inline int icmp4_parse_inner(struct __ctx_buff *ctx, const struct pkt4 *p, struct icmp4_inner *in)
{
	struct iphdr ip;
	__be16 ports[2];

	in->icmp_csum_off = p->l4_off + offsetof(struct icmphdr, checksum);
	in->ip_off = p->l4_off + sizeof(struct icmphdr);
	if (ctx_load_bytes(ctx, in->ip_off, &ip, sizeof(ip)) < 0 || ip.ihl < 5)
		return -1;
	in->l4_off = in->ip_off + ip.ihl * 4;
	in->saddr = ip.saddr;
	in->daddr = ip.daddr;
	in->proto = ip.protocol;
	if (ip.protocol != IPPROTO_TCP && ip.protocol != IPPROTO_UDP)
		return -1;
	if (ctx_load_bytes(ctx, in->l4_off, ports, sizeof(ports)) < 0)
		return -1;
	in->sport = ports[0];
	in->dport = ports[1];
	return 0;
}

/* Rewrite a 4-byte address inside the quoted IPv4 header, keeping the inner header
 * checksum and the ICMP checksum (which covers the quote) right. The inner L4 checksum is
 * left alone: receivers match ICMP errors by addresses and ports, never by it. */
static __always_inline int icmp4_inner_rewrite_addr(struct __ctx_buff *ctx, const struct icmp4_inner *in, enum nat_side side, __be32 from, __be32 to)
{
	__u32 ip_csum_off = in->ip_off + offsetof(struct iphdr, check);
	__sum16 old_csum, new_csum;

	if (from == to)
		return 0;
	if (ctx_load_bytes(ctx, ip_csum_off, &old_csum, sizeof(old_csum)) < 0)
		return -1;
	if (ctx_l3_csum_replace(ctx, ip_csum_off, from, to, sizeof(to)) < 0)
		return -1;
	if (ctx_load_bytes(ctx, ip_csum_off, &new_csum, sizeof(new_csum)) < 0)
		return -1;
	if (ctx_l4_csum_replace(ctx, in->icmp_csum_off, from, to, sizeof(to)) < 0 ||
	    ctx_l4_csum_replace(ctx, in->icmp_csum_off, old_csum, new_csum, sizeof(new_csum)) < 0)
		return -1;
	return ctx_store_bytes(ctx, in->ip_off + (side == NAT_SRC ? offsetof(struct iphdr, saddr) : offsetof(struct iphdr, daddr)),
				   &to, sizeof(to), 0);
}

static __always_inline int icmp4_inner_rewrite_port(struct __ctx_buff *ctx, const struct icmp4_inner *in, enum nat_side side, __be16 from, __be16 to)
{
	if (from == to)
		return 0;
	if (ctx_l4_csum_replace(ctx, in->icmp_csum_off, from, to, sizeof(to)) < 0)
		return -1;
	return ctx_store_bytes(ctx, in->l4_off + (side == NAT_SRC ? 0 : 2), &to, sizeof(to), 0);
}

/* Rewrite the outer destination of an ICMP message (no L4 pseudo-header for ICMPv4). */
static __always_inline int icmp4_outer_rewrite_addr(struct __ctx_buff *ctx, const struct pkt4 *p, enum nat_side side, __be32 from, __be32 to)
{
	if (from == to)
		return 0;
	if (ctx_l3_csum_replace(ctx, IP_CSUM_OFF(p), from, to, sizeof(to)) < 0)
		return -1;
	return ctx_store_bytes(ctx, side == NAT_SRC ? IP_SADDR_OFF(p) : IP_DADDR_OFF(p), &to, sizeof(to), 0);
}

#endif
