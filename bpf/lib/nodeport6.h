/* IPv6 north-south on tc: a packet from outside for an IPv6 NodePort, LoadBalancer IP or
 * externalIP is balanced once per flow; to a backend on this node it is DNATed, the
 * backend's replies leave as the frontend (tc egress), and ICMPv6 errors about such flows
 * are translated too (lib/icmp6_related.h); to a backend on another node it is DNATed and
 * SNATed to the node's IPv6 address (lib/snat6.h: this file tells tc_ingress which
 * packets are that path's, and hands those that need no state written straight to its
 * forward; without a node IPv6 address they are dropped, DROP_REMOTE_IPV6). Fragments
 * follow their first (lib/frag6.h). DSR and extension headers other than a Fragment
 * header are not built: a frontend with no backend has its packets answered with port
 * unreachable (lib/icmp6.h), and what tc does not translate to a Service-only address is
 * dropped (DROP_NOT_SERVED); to other addresses it goes to the kernel.
 *
 * Flows live in ct6 (shared/ct6.h); the backend is the flow hash's slot, so a flow whose
 * entries an overfull map evicted finds the same backend again while the backends stay. */
#ifndef FERRY_LIB_NODEPORT6_H
#define FERRY_LIB_NODEPORT6_H

#include "config.h"
#include "maps.h"
#include "clock.h"
#include "parse6.h"
#include "nat6.h"
#include "ct.h"
#include "lb6.h"
#include "ct6.h"
#include "icmp6_related.h"
#include "snat6.h"
#include "frag6.h"

/* What a tc program's IPv6 entry returns for a frame that is not IPv6 (the caller goes on
 * with it): no TC_ACT_* value. */
#define NODEPORT6_NOT_IPV6 0x1000
/* ... and for a packet to a frontend with no backend: the caller answers it with port
 * unreachable (icmp6_send_error, lib/icmp6.h), in a frame of its own. */
#define NODEPORT6_REJECT 0x1001
/* ... for a later fragment (either hook): the caller has frag6_follow or
 * frag6_follow_egress take it. (NODEPORT6_REMOTE and NODEPORT6_FORWARD, lib/forward6.h,
 * are for flows to backends on other nodes and their replies.) */
#define NODEPORT6_FRAGMENT 0x1006

/* Write both directions of a flow with their lifetime from now. The reply direction is
 * written only where no live flow of another frontend holds it: `fresh` says the flow
 * starts here (its reply entry may belong to an older flow); otherwise it is the flow's
 * own and is refreshed. Returns <0 when the tuple is taken or a write failed. */
static __always_inline int ct6_write(const struct pkt6 *p, const struct ct6_key *client, struct ct6_entry *flow, __u64 now,
				     int fresh)
{
	struct ct6_key rk = {};
	struct ct6_entry reply = { .port = p->dport, .flags = flow->flags };
	struct ct6_entry *held;

	flow->expires_ns = now + ct_lifetime_ns(p->proto, flow->flags);
	reply.expires_ns = flow->expires_ns;
	__builtin_memcpy(reply.addr, p->daddr, 16);
	ct6_reply_key(&rk, p, flow);
	held = bpf_map_lookup_elem(&ct6, &rk);
	if (fresh && held && !ct_expired(held->expires_ns, now) && !(held->flags & CT_F_CLOSING) &&
	    (held->port != reply.port || !lb6_addr_equal(held->addr, reply.addr)))
		return -2;
	if (held && !fresh)
		reply.flags |= held->flags & CT_REPLY_STATE;
	if (bpf_map_update_elem(&ct6, &rk, &reply, BPF_ANY) < 0)
		return -1;
	return bpf_map_update_elem(&ct6, client, flow, BPF_ANY) < 0 ? -1 : 0;
}

/* A new flow: the frontend's slot for the flow's hash, which must be on this node. */
static __always_inline int nodeport6_new_flow(struct __ctx_buff *ctx, const struct pkt6 *p, const struct ct6_key *client,
					      struct ct6_entry *flow, __u64 now)
{
	struct lb6_key key = { .port = p->dport, .proto = p->proto };
	struct lb6_service *svc, *b;
	int found, rc;
	__u32 hash;

	__builtin_memcpy(key.address, p->daddr, 16);
	found = lb6_lookup_scope(&key, LB_SCOPE_EXTERNAL, &svc);
	/* loadBalancerSourceRanges: decided before any translation or reject. */
	if (svc && !lb6_source_allowed(&key, svc, p->saddr))
		return count_drop(DROP_SOURCE_RANGE, p->len);
	if (found == LB_NOT_SERVICE)
		return CTX_ACT_UNSPEC;
	if (found == LB_UNKNOWN_PORT)
		return count_drop(DROP_UNKNOWN_PORT, p->len);
	if (found == LB_EMPTY_DROP)
		return count_drop(DROP_NO_LOCAL_BACKEND, p->len);
	if (found == LB_NO_BACKEND)
		return NODEPORT6_REJECT;
	if (found != LB_FOUND || !svc)
		return count_drop(DROP_NO_BACKEND, p->len);
	hash = flow_hash6(p);
	b = lb6_select_slot(&key, svc, hash);
	if (!b)
		return count_drop(DROP_BACKEND_MISSING, p->len);
	if (!(b->flags & LB_BACKEND_F_LOCAL))
		return snat6_on() ? snat6_hand_packet(p, b, (svc->flags & LB_F_SOURCE_RANGES) ? CT_F_RANGED : 0, hash)
				  : count_drop(DROP_REMOTE_IPV6, p->len);
	if (p->proto == IPPROTO_TCP && !(p->tcp_flags & TCP_SYN))
		count_stat(STAT_CT_MIDSTREAM, 0);
	__builtin_memcpy(flow->addr, b->address, 16);
	flow->port = b->port;
	flow->flags = ct6_flags_client(p, CT_F_LOCAL | ((svc->flags & LB_F_SOURCE_RANGES) ? CT_F_RANGED : 0));
	rc = ct6_write(p, client, flow, now, 1);
	if (rc == -2)
		return count_drop(DROP_TUPLE_TAKEN, p->len);
	if (rc < 0)
		return count_drop(DROP_CT_MAP_FULL, p->len);
	return CTX_ACT_OK;
}

/* Is `addr` an address of Services alone (its wildcard entry), not the node's? */
static __always_inline int lb6_services_only(const __u8 *addr)
{
	struct lb6_key key = { .scope = LB_SCOPE_EXTERNAL }; /* port 0, protocol 0: the wildcard */
	struct lb6_service *wildcard;

	__builtin_memcpy(key.address, addr, 16);
	wildcard = bpf_map_lookup_elem(&lb6_services, &key);
	return wildcard && (wildcard->flags & LB_F_WILDCARD);
}

/* A packet tc does not translate (another protocol, an extension header, a fragment of
 * another protocol, an ICMPv6 echo or an error about no flow of ferry's) to an address
 * that is Services' alone (its wildcard entry): dropped. Left to the kernel, which does not hold the address, it
 * would be routed back out, towards the router that sent it here: a loop that ends with
 * its hop limit. Neighbour discovery and the node's own addresses stay the kernel's. */
static __always_inline int nodeport6_not_served(const struct pkt6 *p)
{
	return lb6_services_only(p->daddr) ? count_drop(DROP_NOT_SERVED, p->len) : CTX_ACT_UNSPEC;
}

/* A flow of a frontend with loadBalancerSourceRanges (CT_F_RANGED) looks its frontend up
 * on every packet, as IPv4's: a source its ranges no longer allow loses the flow. A
 * frontend gone is the agent's to flush, as for unranged flows. */
static __always_inline int ct6_source_denied(const struct pkt6 *p)
{
	struct lb6_key key = { .port = p->dport, .proto = p->proto, .scope = LB_SCOPE_EXTERNAL };
	struct lb6_service *svc;

	__builtin_memcpy(key.address, p->daddr, 16);
	svc = bpf_map_lookup_elem(&lb6_services, &key);
	return svc && !lb6_source_allowed(&key, svc, p->saddr);
}

/* tc ingress, IPv6: a client's packet for a frontend. A global function (lib/common.h):
 * the IPv4 path pays nothing for it. */
__ferry_global int nodeport6_ingress(struct __sk_buff *ctx)
{
	struct ct6_key client = {};
	struct ct6_entry *held, flow = {};
	struct pkt6 p;
	__u64 now;
	int rc;

	if (!ctx)
		return CTX_ACT_SHOT;
	rc = parse_ipv6(ctx, &p);
	if (rc == PARSE_NOT_IPV4)
		return NODEPORT6_NOT_IPV6;
	if (rc != PARSE_OK)
		return CTX_ACT_UNSPEC;
	if (p.fragment == PKT6_LATER_FRAGMENT)
		return NODEPORT6_FRAGMENT;
	if (p.proto == IPPROTO_ICMPV6) {
		rc = icmp6_related_ingress(ctx, &p);
		if (rc != CTX_ACT_UNSPEC || (p.icmp_type >= ICMPV6_NDP_FIRST && p.icmp_type <= ICMPV6_NDP_LAST))
			return rc;
		return nodeport6_not_served(&p);
	}
	if (p.proto != IPPROTO_TCP && p.proto != IPPROTO_UDP)
		return nodeport6_not_served(&p);
	if (snat6_is_node(p.daddr)) {
		struct nat6_entry *nat;

		ct6_key_set(&client, p.saddr, p.daddr, p.sport, p.dport, p.proto, CT6_DIR_REPLY);
		nat = bpf_map_lookup_elem(&nat6, &client);
		if (nat)
			return snat6_reply(&p, nat, &client);
	}
	ct6_key_set(&client, p.saddr, p.daddr, p.sport, p.dport, p.proto, CT6_DIR_CLIENT);
	now = ferry_now();
	held = bpf_map_lookup_elem(&ct6, &client);
	if (held && !ct_expired(held->expires_ns, now) &&
	    !(p.proto == IPPROTO_TCP && (held->flags & CT_F_CLOSING) && (p.tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN)) {
		__u8 flags;
		__u64 expires;

		if ((held->flags & CT_F_RANGED) && ct6_source_denied(&p))
			return count_drop(DROP_SOURCE_RANGE, p.len);
		flags = ct6_flags_client(&p, held->flags);
		expires = now + ct_lifetime_ns(p.proto, flags);
		if (held->flags & CT_F_SNAT) {
			/* To a remote backend: a state or lifetime to write is lib/snat6.h's. */
			if (flags != held->flags || expires >= held->expires_ns + CT_REFRESH_NS)
				return snat6_hand_packet(&p, NULL, 0, 0);
			return snat6_hand_flow(&p, held);
		}

		flow = *held;
		if (flags != held->flags || expires >= held->expires_ns + CT_REFRESH_NS) {
			flow.flags = flags;
			if (ct6_write(&p, &client, &flow, now, 0) < 0)
				return count_drop(DROP_CT_MAP_FULL, p.len);
		}
	} else {
		rc = nodeport6_new_flow(ctx, &p, &client, &flow, now);
		if (rc != CTX_ACT_OK)
			return rc;
	}
	if (nat6_rewrite(ctx, &p, IP6_DADDR_OFF, p.l4_off + 2, p.daddr, flow.addr, p.dport, flow.port, CTX_STORE_DIRECT) < 0)
		return count_drop(DROP_CSUM_FAILED, p.len);
	frag6_note(&p, p.saddr, flow.addr, FRAG_ACT_PASS);
	count_stat(STAT_FWD_LOCAL6, p.len);
	return CTX_ACT_OK;
}

/* tc egress, IPv6: a local backend's reply leaves as the frontend. */
__ferry_global int nodeport6_egress(struct __sk_buff *ctx)
{
	struct ct6_key k = {};
	struct ct6_entry *reply;
	struct pkt6 p;
	__u64 now;
	__u8 flags;

	if (!ctx)
		return CTX_ACT_SHOT;
	if (parse_ipv6(ctx, &p) != PARSE_OK)
		return CTX_ACT_UNSPEC;
	if (p.fragment == PKT6_LATER_FRAGMENT)
		return NODEPORT6_FRAGMENT;
	if (p.proto == IPPROTO_ICMPV6)
		return icmp6_related_egress(ctx, &p);
	if (p.proto != IPPROTO_TCP && p.proto != IPPROTO_UDP)
		return CTX_ACT_UNSPEC;
	ct6_key_set(&k, p.saddr, p.daddr, p.sport, p.dport, p.proto, CT6_DIR_REPLY);
	reply = bpf_map_lookup_elem(&ct6, &k);
	if (!reply)
		return CTX_ACT_UNSPEC;
	now = ferry_now();
	if (ct_expired(reply->expires_ns, now)) {
		/* Left over from a finished flow: this packet is another connection's. */
		bpf_map_delete_elem(&ct6, &k);
		return CTX_ACT_UNSPEC;
	}
	flags = reply->flags | CT_F_SEEN_REPLY;
	if (p.proto == IPPROTO_TCP && (p.tcp_flags & (TCP_FIN | TCP_RST)))
		flags |= CT_F_CLOSING;
	if (flags != reply->flags) {
		/* The client's direction learns it too: its lifetime follows the flow's state. */
		struct ct6_key ck = {};
		struct ct6_entry *flow;

		ct6_key_set(&ck, p.daddr, reply->addr, p.dport, reply->port, p.proto, CT6_DIR_CLIENT);
		flow = bpf_map_lookup_elem(&ct6, &ck);
		if (flow && (flow->flags | (flags & CT_REPLY_STATE)) != flow->flags) {
			flow->flags |= flags & CT_REPLY_STATE;
			flow->expires_ns = now + ct_lifetime_ns(p.proto, flow->flags);
			reply->expires_ns = flow->expires_ns;
		}
		reply->flags = flags;
	} else if (now + ct_lifetime_ns(p.proto, flags) >= reply->expires_ns + CT_REFRESH_NS) {
		/* Replies alone keep it (a stream the client does not answer). */
		reply->expires_ns = now + ct_lifetime_ns(p.proto, flags);
	}
	if (nat6_rewrite(ctx, &p, IP6_SADDR_OFF, p.l4_off, p.saddr, reply->addr, p.sport, reply->port, 0) < 0)
		return count_drop(DROP_CSUM_FAILED, p.len);
	frag6_note(&p, reply->addr, p.daddr, FRAG_ACT_PASS);
	count_stat(STAT_REPLY_LOCAL6, p.len);
	return CTX_ACT_OK;
}

/* A later fragment that follows a first delivered here (ingress) or sent as it was
 * (egress): its new addresses, in one write. `store`: ctx_store_bytes flags. */
static __always_inline int frag6_readdress(struct __sk_buff *ctx, const struct pkt6 *p, struct eth_ipv6_head *h,
					   const struct frag6_entry *e, __u64 store)
{
	__builtin_memcpy(&h->ip.saddr, e->saddr, 16);
	__builtin_memcpy(&h->ip.daddr, e->daddr, 16);
	if (ctx_store_bytes(ctx, IP6_SADDR_OFF, &h->ip.saddr, 32, store) < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	count_stat(STAT_FRAGMENT, p->len);
	return CTX_ACT_OK;
}

/* tc ingress, a later fragment (NODEPORT6_FRAGMENT): translated as its datagram's first
 * fragment was (lib/frag6.h); one whose first was routed on is handed to
 * nodeport6_forward with the same ends (NODEPORT6_FORWARD: addresses and hop limit, by
 * the route of the same ends). With nothing to follow it goes to the kernel, or is
 * dropped when addressed to a Service-only address. */
__ferry_global int frag6_follow(struct __sk_buff *ctx)
{
	struct eth_ipv6_head h;
	struct frag6_entry *e;
	struct pkt6 p;

	if (!ctx || parse_ipv6_head(ctx, &p, &h) != PARSE_OK || p.fragment != PKT6_LATER_FRAGMENT)
		return count_drop(DROP_MALFORMED, ctx ? ctx->len : 0);
	e = frag6_followed(&p);
	if (!e)
		return lb6_services_only(p.daddr) ? count_drop(DROP_FRAGMENT, p.len) : CTX_ACT_UNSPEC;
	if (e->action == FRAG_ACT_REDIRECT)
		return snat6_hand_ends(&p, e->saddr, 0, e->daddr, 0, STAT_FRAGMENT);
	return frag6_readdress(ctx, &p, &h, e, CTX_STORE_DIRECT);
}

/* tc egress, a later fragment: a local backend's reply whose first fragment left as the
 * frontend leaves so too. No direct write here (see CTX_STORE_DIRECT). */
__ferry_global int frag6_follow_egress(struct __sk_buff *ctx)
{
	struct eth_ipv6_head h;
	struct frag6_entry *e;
	struct pkt6 p;

	if (!ctx || parse_ipv6_head(ctx, &p, &h) != PARSE_OK || p.fragment != PKT6_LATER_FRAGMENT)
		return CTX_ACT_UNSPEC;
	e = frag6_followed(&p);
	if (!e || e->action != FRAG_ACT_PASS)
		return CTX_ACT_UNSPEC;
	return frag6_readdress(ctx, &p, &h, e, 0);
}

#endif
