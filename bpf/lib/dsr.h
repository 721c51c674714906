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

/* The Ethernet header and an IPv4 header carrying the option, as they lie from the
 * frame's start (struct eth_ipv4_head, two bytes ahead, then the option). */
struct eth_ipv4_dsr_head {
	struct eth_ipv4_head h;
	__u8 opt[DSR_OPT_LEN];
};

_Static_assert(__builtin_offsetof(struct eth_ipv4_dsr_head, opt) - __builtin_offsetof(struct eth_ipv4_dsr_head, h.macs) ==
		       ETH_HLEN + sizeof(struct iphdr),
	       "the option right after the 20-byte IPv4 header");

/* A client's packet DNATed to a remote backend with the option added after its plain
 * 20-byte header, as nat4_rewrite_forwarded writes a forwarded packet: the L4 checksum and
 * ports first (where they lie before the option moves them), then room for the option,
 * then the Ethernet and IPv4 headers with the option, their checksum computed here from
 * the words that change, in one store (`route`: a successful lookup's MACs; NULL keeps
 * them). Three helper calls where a rewrite and then the option's own stores, reload and
 * checksum took eight. The source is kept: the backend answers the client itself. */
static __always_inline int dsr4_rewrite_with_option(struct __ctx_buff *ctx, const struct pkt4 *p, __be32 daddr,
						    __be16 dport, const struct bpf_fib_lookup *route)
{
	struct eth_ipv4_dsr_head d = { .opt = { DSR_OPT_TYPE, DSR_OPT_LEN } };
	union l4_ports ports = { .sport = p->sport, .dport = dport }, old_ports = { .sport = p->sport, .dport = p->dport };
	__be16 tot_len = bpf_htons(p->ip_len + DSR_OPT_LEN);
	__u32 csum = l4_csum_off(p), addrs, sum, first_old, first_new, opt_words[2];
	__u16 old_word, new_word;

	if (p->ihl_words != 5)
		return -1;
	__builtin_memcpy(&d.opt[2], &p->dport, 2);
	__builtin_memcpy(&d.opt[4], &p->daddr, 4);
	if (ctx_load_bytes(ctx, 0, d.h.macs, ETH_HLEN + sizeof(struct iphdr)) < 0)
		return -1;
	addrs = csum32_replace(0, d.h.ip.daddr, daddr);
	if (csum) {
		if (nat4_l4_csum_translate(ctx, p, csum, addrs, !p->fragment, old_ports, ports, CTX_STORE_DIRECT) < 0)
			return -1;
		if (ports.word != old_ports.word &&
		    ctx_store_bytes(ctx, p->l4_off, &ports, sizeof(ports), CTX_STORE_DIRECT) < 0)
			return -1;
	}
	/* Version and ihl 7, the length 8 more, the TTL one less, the destination, the option. */
	__builtin_memcpy(&first_old, d.h.ip_unrouted, sizeof(first_old));
	d.h.ip_unrouted[0] = 0x40 | 7;
	__builtin_memcpy(&d.h.ip_unrouted[2], &tot_len, sizeof(tot_len));
	__builtin_memcpy(&first_new, d.h.ip_unrouted, sizeof(first_new));
	__builtin_memcpy(&old_word, &d.h.ip, sizeof(old_word));
	d.h.ip.ttl--;
	__builtin_memcpy(&new_word, &d.h.ip, sizeof(new_word));
	__builtin_memcpy(opt_words, d.opt, sizeof(opt_words));
	sum = csum32_replace(addrs, first_old, first_new);
	sum = csum32_add(sum, csum32_add((__u16)~old_word, new_word));
	sum = csum32_add(sum, csum32_add(opt_words[0], opt_words[1]));
	d.h.ip.check = csum_fold32(csum32_add((__u16)~d.h.ip.check, sum));
	d.h.ip.daddr = daddr;
	if (route) {
		__builtin_memcpy(d.h.macs, route->dmac, ETH_ALEN);
		__builtin_memcpy(d.h.macs + ETH_ALEN, route->smac, ETH_ALEN);
	}
	if (ctx_resize_ipv4_options(ctx, DSR_OPT_LEN) < 0)
		return -1;
	return ctx_store_bytes(ctx, 0, d.h.macs, ETH_HLEN + sizeof(struct iphdr) + DSR_OPT_LEN, CTX_STORE_DIRECT);
}

/* Remove the option (the packet came with ihl 7 and our option right after the 20-byte
 * header): the Ethernet and IPv4 headers read with it, ihl 5, the length 8 less and the
 * checksum less the option's words computed here, the option's room closed, and the
 * headers written back whole in one store. Three helper calls where the option's removal
 * and then the header's stores, reload and checksum took six. */
static __always_inline int dsr4_pop(struct __ctx_buff *ctx, const struct pkt4 *p)
{
	struct eth_ipv4_dsr_head d;
	__be16 tot_len = bpf_htons(p->ip_len - DSR_OPT_LEN);
	__u32 first_old, first_new, opt_words[2], sum;

	if (ctx_load_bytes(ctx, 0, d.h.macs, ETH_HLEN + sizeof(struct iphdr) + DSR_OPT_LEN) < 0)
		return -1;
	__builtin_memcpy(&first_old, d.h.ip_unrouted, sizeof(first_old));
	d.h.ip_unrouted[0] = 0x40 | 5;
	__builtin_memcpy(&d.h.ip_unrouted[2], &tot_len, sizeof(tot_len));
	__builtin_memcpy(&first_new, d.h.ip_unrouted, sizeof(first_new));
	__builtin_memcpy(opt_words, d.opt, sizeof(opt_words));
	sum = csum32_replace(0, first_old, first_new);
	sum = csum32_add(sum, csum32_add(~opt_words[0], ~opt_words[1]));
	d.h.ip.check = csum_fold32(csum32_add((__u16)~d.h.ip.check, sum));
	if (ctx_resize_ipv4_options(ctx, -DSR_OPT_LEN) < 0)
		return -1;
	return ctx_store_bytes(ctx, 0, d.h.macs, ETH_HLEN + sizeof(struct iphdr), CTX_STORE_DIRECT);
}

/* Would a packet with the option be too big for the device its route leaves by (`*mtu`
 * then holds that MTU)? Even the device it came in on: the option makes it longer. A GSO
 * packet passes: the kernel shrinks its segments by the option (bpf_skb_adjust_room). */
static __always_inline int dsr4_too_big(struct __ctx_buff *ctx, __u32 ifindex, __u32 *mtu)
{
	*mtu = 0;
	return bpf_check_mtu(ctx, ifindex, mtu, DSR_OPT_LEN, 0) == BPF_MTU_CHK_RET_FRAG_NEEDED;
}

/* DSR to a remote backend: DNAT, the frontend in an IPv4 option (TCP: on the SYN, which
 * is all the backend's node needs; UDP: on every datagram), routed on. No reply comes
 * back through this node. Routed as a forwarded SNAT packet is (nat4_forward): a new flow
 * by its backend's shared hop (`shared`), then by its kept hop, looked up again when
 * `refresh`; a lookup per packet that takes the option was the largest part of a new DSR
 * flow. The size is checked against the MTU of the route's device, as for other forwarded
 * packets: a route's own smaller MTU is not. If the option would not fit, the client is
 * told (fragmentation needed, an MTU 8 bytes smaller) instead of the packet being lost. */
static __always_inline int nodeport_dsr(struct __ctx_buff *ctx, const struct pkt4 *p, const struct lb4_backend *b,
					struct ct4_entry *ct, int refresh, struct lb4_backend_hop *shared, __u64 now)
{
	int with_opt = p->proto == IPPROTO_UDP || (p->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
	struct fib4_flow f = { .saddr = p->saddr, .daddr = b->address, .sport = p->sport, .dport = b->port, .proto = p->proto, .tos = p->tos };
	struct bpf_fib_lookup fib;
	long route;
	__u32 mtu;

	if (p->ttl <= 1)
		return icmp4_time_exceeded(ctx, p);
	if (shared)
		route = fib4_route_new_flow(ctx, &f, &ct->hop_ifindex, ct->hop_macs, shared, now, &fib);
	else
		route = fib4_route_flow(ctx, &f, &ct->hop_ifindex, ct->hop_macs, refresh, &fib);
	if (!fib4_usable(ctx, route, &fib))
		return fib4_unusable(p->len);
	if (with_opt) {
		if (dsr4_too_big(ctx, fib.ifindex, &mtu))
			return icmp4_send_unreach(ctx, p, ICMP_FRAG_NEEDED, mtu - DSR_OPT_LEN);
		if (dsr4_rewrite_with_option(ctx, p, b->address, b->port, route == BPF_FIB_LKUP_RET_SUCCESS ? &fib : NULL) < 0)
			return count_drop(DROP_DSR_OPTION, p->len);
	} else {
		if (fib4_mtu_exceeded(ctx, fib.ifindex, &mtu))
			return icmp4_too_big(ctx, p, mtu);
		/* Written as a forwarded packet is (lib/nat.h), the source kept. */
		if (nat4_rewrite_forwarded(ctx, p, p->saddr, p->sport, b->address, b->port,
					   route == BPF_FIB_LKUP_RET_SUCCESS ? &fib : NULL) < 0)
			return count_drop(DROP_CSUM_FAILED, p->len);
	}
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
