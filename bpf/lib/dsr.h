/* Direct server return: the LB node DNATs a flow to a remote backend and carries the
 * frontend (VIP:port) to the backend's node in an 8-byte IPv4 option: on the SYN for TCP,
 * on every datagram for UDP. The backend's node records the frontend, removes the option,
 * and rewrites the replies' source on egress, so replies go straight to the client. */
#ifndef FERRY_LIB_DSR_H
#define FERRY_LIB_DSR_H

#include "config.h"
#include "maps.h"
#include "clock.h"
#include "nat.h"
#include "icmp.h"
#include "ct.h"
#include "contest.h"
#include "fib.h"
#include "lb.h"
#include "frag.h"

/* DSR or SNAT for a remote backend: the Service's override, else the node's mode. */
static __always_inline int use_dsr(const struct lb4_service *svc, __u8 proto)
{
	if (svc->flags & LB_F_FWD_SNAT)
		return 0;
	if (svc->flags & LB_F_FWD_DSR)
		return 1;
	if (forwarding_mode == FWD_MODE_DSR)
		return 1;
	return forwarding_mode == FWD_MODE_HYBRID && proto == IPPROTO_TCP;
}

/* Recompute the IPv4 header checksum of a header of `words` 32-bit words (5 or 7). */
static __always_inline int ipv4_csum_refresh(struct __ctx_buff *ctx, const struct pkt4 *p, int words)
{
	__u32 hdr[7] = {};
	__s64 sum;
	__u16 csum;

	if (words != 5 && words != 7)
		return -1;
	if (ctx_load_bytes(ctx, p->l3_off, hdr, words * 4) < 0)
		return -1;
	((__u16 *)hdr)[5] = 0;
	sum = bpf_csum_diff(NULL, 0, (__be32 *)hdr, words * 4, 0);
	if (sum < 0)
		return -1;
	csum = csum_fold32((__u32)sum);
	return ctx_store_bytes(ctx, IP_CSUM_OFF(p), &csum, sizeof(csum), 0);
}

/* Set ihl and total length after adding (+8) or removing (-8) the option. */
static __always_inline int ipv4_set_hdr_len(struct __ctx_buff *ctx, const struct pkt4 *p, int words, __u16 tot_len)
{
	__u8 vihl = 0x40 | words;
	__be16 len = bpf_htons(tot_len);

	if (ctx_store_bytes(ctx, p->l3_off, &vihl, 1, 0) < 0 ||
	    ctx_store_bytes(ctx, p->l3_off + offsetof(struct iphdr, tot_len), &len, 2, 0) < 0)
		return -1;
	return ipv4_csum_refresh(ctx, p, words);
}

/* Add the option after a plain 20-byte header. */
static __always_inline int dsr4_push(struct __ctx_buff *ctx, const struct pkt4 *p, __be32 addr, __be16 port)
{
	__u8 opt[DSR_OPT_LEN] = { DSR_OPT_TYPE, DSR_OPT_LEN };

	if (p->ihl_words != 5)
		return -1;
	__builtin_memcpy(&opt[2], &port, 2);
	__builtin_memcpy(&opt[4], &addr, 4);
	if (ctx_adjust_room_net4(ctx, DSR_OPT_LEN) < 0)
		return -1;
	if (ctx_store_bytes(ctx, p->l3_off + sizeof(struct iphdr), opt, sizeof(opt), 0) < 0)
		return -1;
	return ipv4_set_hdr_len(ctx, p, 7, p->ip_len + DSR_OPT_LEN);
}

/* Remove the option (the packet came with ihl 7 and our option). */
static __always_inline int dsr4_pop(struct __ctx_buff *ctx, const struct pkt4 *p)
{
	if (ctx_adjust_room_net4(ctx, -DSR_OPT_LEN) < 0)
		return -1;
	return ipv4_set_hdr_len(ctx, p, 5, p->ip_len - DSR_OPT_LEN);
}

/* DSR to a remote backend: DNAT, the frontend in an IPv4 option (TCP: on the SYN, which
 * is all the backend's node needs; UDP: on every datagram), routed on. No reply comes
 * back through this node. If the option would not fit the path MTU, the client is told
 * (fragmentation needed, an MTU 8 bytes smaller) instead of the packet being lost. */
static __always_inline int nodeport_dsr(struct __ctx_buff *ctx, const struct pkt4 *p, const struct lb4_backend *b,
					struct ct4_entry *ct, int refresh)
{
	int with_opt = p->proto == IPPROTO_UDP || (p->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
	__be32 vip = p->daddr;
	__be16 vport = p->dport;
	struct fib4_flow f = { .saddr = p->saddr, .daddr = b->address, .sport = p->sport, .dport = b->port, .proto = p->proto, .tos = p->tos };
	struct bpf_fib_lookup fib;
	long route;
	__u32 mtu;

	if (p->ttl <= 1)
		return icmp4_time_exceeded(ctx, p);
	/* A packet that takes the option is routed with the MTU checked for its new size. */
	route = fib4_route_flow(ctx, &f, with_opt ? p->ip_len + DSR_OPT_LEN : 0, &ct->hop_ifindex,
				ct->hop_macs, refresh, &fib);
	if (route == BPF_FIB_LKUP_RET_FRAG_NEEDED && with_opt) {
		__u32 mtu = fib.mtu_result ? fib.mtu_result : 1500;

		return icmp4_send_unreach(ctx, p, ICMP_FRAG_NEEDED, mtu - DSR_OPT_LEN);
	}
	if (!fib4_usable(ctx, route, &fib))
		return fib4_unusable(p->len);
	if (!with_opt && fib4_mtu_exceeded(ctx, fib.ifindex, &mtu))
		return icmp4_too_big(ctx, p, mtu);
	/* Written as a forwarded packet is (lib/nat.h), the source kept: the IPv4 header with
	 * the TTL, the MACs and the ports in one store each, the L4 checksum in place where it
	 * is whole. The option goes in after: the headers move with their new contents. */
	if (nat4_rewrite_forwarded(ctx, p, p->saddr, p->sport, b->address, b->port,
				   route == BPF_FIB_LKUP_RET_SUCCESS ? &fib : NULL) < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	if (with_opt && dsr4_push(ctx, p, vip, vport) < 0)
		return count_drop(DROP_DSR_OPTION, p->len);
	frag4_record(p, p->saddr, b->address, FRAG_ACT_REDIRECT);
	count_stat(STAT_FWD_DSR, p->len);
	return fib4_send_addressed(ctx, &fib, route);
}

/* Which frontend a DSR option names, as this node knows it: a LoadBalancer IP or
 * externalIP by its own address (the same on every node), or a NodePort on a cluster node
 * by its port, through this node's 0.0.0.0 entry for that NodePort. `lookup_addr` gets the
 * address the frontend's slots are keyed by. */
static __always_inline struct lb4_service *dsr4_frontend(const struct pkt4 *p, __be32 *lookup_addr)
{
	struct lb4_service *svc = lb4_lookup_master(p->dsr_addr, p->dsr_port, p->proto, LB_SCOPE_EXTERNAL);
	__be32 addr = p->dsr_addr;

	if (!svc && bpf_map_lookup_elem(&node4_addrs, &addr)) {
		svc = lb4_lookup_master(0, p->dsr_port, p->proto, LB_SCOPE_EXTERNAL);
		if (svc && !(svc->flags & LB_F_NODE_PORT))
			svc = NULL;
		addr = 0;
	}
	*lookup_addr = addr;
	return svc;
}

/* Only an option this node's datapath could have been sent is accepted: the frontend is
 * one it knows, uses DSR, and balances to the packet's destination as a local backend.
 * Anything else would make the node answer from whatever address a stranger names. */
static __always_inline int dsr4_option_genuine(const struct pkt4 *p)
{
	__be32 addr;
	struct lb4_service *svc = dsr4_frontend(p, &addr);

	if (!svc || !use_dsr(svc, p->proto))
		return 0;
	return lb4_has_local_backend(addr, p->dsr_port, p->proto, LB_SCOPE_EXTERNAL, svc, p->daddr, p->dport);
}

/* A DSR datagram whose tuple at the pod (`reply`) another live flow holds: it reaches the
 * pod from another client port (contest.h), under which its binding `n` is kept, the
 * option removed. A global function (lib/common.h), so dsr_receive's frame stays small. */
__ferry_global int dsr_receive_remapped(struct __ctx_buff *ctx, const struct pkt4 *p, struct ct4_key *reply,
					const struct nat4_entry *n)
{
	struct nat4_entry *own;
	int rc;

	if (!p || !reply || !n)
		return CTX_ACT_SHOT;
	rc = binding_remap(p, reply, NULL, 1);
	if (rc < 0)
		return count_drop(rc == -2 ? DROP_NAT_EXHAUSTED : DROP_CT_MAP_FULL, p->len);
	own = rc == REMAP_OWN ? bpf_map_lookup_elem(&nat4, reply) : NULL;
	if (own)
		own->expires_ns = n->expires_ns > own->expires_ns ? n->expires_ns : own->expires_ns;
	else if (bpf_map_update_elem(&nat4, reply, n, BPF_ANY) < 0)
		return count_drop(DROP_CT_MAP_FULL, p->len);
	if (nat4_rewrite_port(ctx, p, NAT_SRC, p->sport, reply->dport, CTX_STORE_DIRECT) < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	if (dsr4_pop(ctx, p) < 0)
		return count_drop(DROP_DSR_OPTION, p->len);
	count_stat(STAT_DSR_RECEIVED, p->len);
	return CTX_ACT_OK;
}

/* A DSR packet for a backend on this node: remember its frontend for the replies (tc
 * egress rewrites their source), remove the option, and hand it to the stack. A binding
 * of another live flow on the same tuple is never overwritten: a datagram naming another
 * frontend reaches the pod from another client port, a TCP SYN only leaves the binding
 * pending, for the pod to decide (contest.h). This node does not see the client end a DSR
 * flow with a reset (only the pod's side), so a client reusing its port towards another
 * frontend meets a binding that still looks live. */
__ferry_global int dsr_receive(struct __ctx_buff *ctx, const struct pkt4 *p)
{
	struct ct4_key reply;
	__u64 now = ferry_now();
	__u8 flags;
	struct nat4_entry n;
	struct nat4_entry *have;

	if (!p)
		return CTX_ACT_UNSPEC;
	reply = (struct ct4_key){ .saddr = p->daddr, .daddr = p->saddr, .sport = p->dport, .dport = p->sport, .proto = p->proto };
	flags = ct_flags_client(p, CT_F_LOCAL | CT_F_DSR, 0);
	n = (struct nat4_entry){
		.expires_ns = now + ct_lifetime_ns(p->proto, flags),
		.client_addr = p->saddr,
		.client_port = p->sport,
		.frontend_addr = p->dsr_addr,
		.frontend_port = p->dsr_port,
		.flags = flags,
	};
	have = bpf_map_lookup_elem(&nat4, &reply);

	if (have && have->frontend_addr == n.frontend_addr && have->frontend_port == n.frontend_port &&
	    (have->flags & CT_F_DSR) && !ct_expired(have->expires_ns, now)) {
		/* This flow's binding already (UDP: every datagram carries the option). */
		have->expires_ns = n.expires_ns > have->expires_ns ? n.expires_ns : have->expires_ns;
	} else {
		if (!dsr4_option_genuine(p))
			return count_drop(DROP_DSR_INVALID, p->len);
		if (have && !ct_expired(have->expires_ns, now) && !ct_tcp_reopen(p, have->flags)) {
			if (p->proto == IPPROTO_UDP)
				return dsr_receive_remapped(ctx, p, &reply, &n);
			if (!binding_may_contest(p, have->flags))
				return count_drop(DROP_DSR_INVALID, p->len);
			have->pending_addr = n.frontend_addr;
			have->pending_port = n.frontend_port;
			count_stat(STAT_DSR_CONTESTED, p->len);
		} else if (bpf_map_update_elem(&nat4, &reply, &n, have ? BPF_EXIST : BPF_NOEXIST) < 0) {
			return count_drop(DROP_CT_MAP_FULL, p->len);
		}
	}
	if (dsr4_pop(ctx, p) < 0)
		return count_drop(DROP_DSR_OPTION, p->len);
	count_stat(STAT_DSR_RECEIVED, p->len);
	return CTX_ACT_OK;
}

#endif
