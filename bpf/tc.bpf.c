/* North-south Service traffic on the node's external device(s): NodePort, LoadBalancer
 * IPs and externalIPs arriving from outside the node.
 *
 * ingress: reply to an SNATed flow → restore and send back to the client;
 *          frontend → pick a backend (conntrack keeps it) → local: DNAT;
 *                     remote: DNAT + SNAT to the node address, FIB, redirect;
 *          frontend without backend → ICMP port unreachable;
 *          known Service address, unknown port (or a protocol not served) → drop;
 *          ICMP error quoting a translated flow → translate it too;
 *          ARP request for an address this node announces → the reply (lib/arp.h);
 *          IPv6 to a frontend → local backend: DNAT (lib/nodeport6.h); remote: DNAT + SNAT
 *          to the node's IPv6 address, FIB, redirect, and its replies back (lib/snat6.h);
 *          IPv6 to a frontend without backend → ICMPv6 port unreachable (lib/icmp6.h);
 *          one too big for the route to another node, or out of hops → the node's error.
 * egress:  reply from a local backend (IPv4 or IPv6) → source back to the frontend; what ingress
 *          forwarded out of this device passes untouched (FERRY_MARK_FORWARDED, lib/ctx.h).
 *
 * This file only orchestrates: the logic lives in lib/ (nodeport.h, snat.h, dsr.h,
 * icmp_related.h, ct.h, monitor.h), the load-time settings in lib/config.h.
 */
#include "lib/common.h"
#include "lib/config.h"
#include "lib/maps.h"
#include "lib/clock.h"
#include "lib/parse.h"
#include "lib/lb.h"
#include "lib/ct.h"
#include "lib/icmp.h"
#include "lib/icmp_related.h"
#include "lib/dsr.h"
#include "lib/frag.h"
#include "lib/nodeport.h"
#include "lib/nodeport6.h"
#include "lib/icmp6.h"
#include "lib/monitor.h"
#include "lib/arp.h"

/* A frame of a VLAN on this device's trunk: the tag is in the skb's metadata by now (the
 * NIC or the stack took it off), and the frame belongs to that VLAN's device, where the
 * kernel takes it next and where ferry sees it untagged if the device is one of ferry's.
 * Translated here, it would leave by this device still tagged for its VLAN (or by another
 * one with the tag), and ARP would be answered on a VLAN no policy chose. VLAN 0 only
 * carries a priority: such frames are this device's own, as the kernel treats them. */
static __always_inline int vlan_elsewhere(const struct __sk_buff *ctx)
{
	return ctx->vlan_present && (ctx->vlan_tci & 0x0fff);
}

/* A packet ferry does not translate (another protocol, an ICMP echo or an error about no
 * flow of ferry's) to an address that is Services' alone (its wildcard entry): dropped.
 * Left to the kernel, which does not hold the address, it would be routed back out towards
 * the router that sent it here: a loop that ends with its TTL. A node's address is the
 * kernel's. */
static __always_inline int not_served4(const struct pkt4 *p)
{
	struct lb4_service *wildcard = lb4_lookup_master(p->daddr, 0, 0, LB_SCOPE_EXTERNAL);

	if (wildcard && (wildcard->flags & LB_F_WILDCARD))
		return count_drop(DROP_NOT_SERVED, p->len);
	return CTX_ACT_UNSPEC;
}

/* Traffic that is not ferry's goes on to the next tc filter (CTX_ACT_UNSPEC), so other
 * users of the device keep working; what ferry translated ends the chain (CTX_ACT_OK). */
static __always_inline int tc_ingress_packet(struct __sk_buff *ctx)
{
	struct pkt4 p;
	int rc;

	/* A frame for another host's MAC (a switch flooding an unknown destination, a port in
	 * promiscuous mode): the kernel would drop it, and so must ferry, or two nodes would
	 * answer the same packet. */
	if (ctx->pkt_type == PACKET_OTHERHOST)
		return CTX_ACT_UNSPEC;
	if (vlan_elsewhere(ctx))
		return CTX_ACT_UNSPEC;
	STAGE_END(1);
	rc = parse_ipv4(ctx, &p);
	STAGE_END(2);

	if (unlikely(rc == PARSE_NOT_IPV4)) {
		rc = nodeport6_ingress(ctx);
		if (rc == NODEPORT6_REJECT)
			return icmp6_send_error(ctx, ICMP6_ERR_PORT_UNREACH, 0);
		if (rc == NODEPORT6_NOT_IPV6)
			return arp_respond(ctx);
		if (rc == NODEPORT6_FRAGMENT)
			rc = frag6_follow(ctx);
		else if (rc == NODEPORT6_REMOTE)
			rc = nodeport6_snat_flow(ctx);
		if (rc == NODEPORT6_FORWARD)
			rc = nodeport6_forward(ctx);
		if (rc == NODEPORT6_HOP_LIMIT)
			return icmp6_send_error(ctx, ICMP6_ERR_HOP_LIMIT, 0);
		if (rc >= NODEPORT6_TOO_BIG)
			return icmp6_send_error(ctx, ICMP6_ERR_TOO_BIG, rc - NODEPORT6_TOO_BIG);
		return rc;
	}
	if (unlikely(rc == PARSE_MALFORMED))
		return count_drop(DROP_MALFORMED, ctx->len);

	if (unlikely(p.fragment))
		return frag4_follow(ctx, &p, lb4_lookup_master(p.daddr, 0, 0, LB_SCOPE_EXTERNAL) != NULL);
	if (unlikely(p.proto == IPPROTO_ICMP)) {
		if (icmp4_is_error(p.icmp_type)) {
			rc = icmp_related_ingress(ctx, &p);
			if (rc != CTX_ACT_UNSPEC)
				return rc;
		}
		return not_served4(&p);
	}
	if (unlikely(p.proto != IPPROTO_TCP && p.proto != IPPROTO_UDP))
		return not_served4(&p);
	if (unlikely(p.dsr_opt))
		return dsr_receive(ctx, &p);

	/* A reply to a flow this node SNATed toward a remote backend. */
	{
		__u64 now;
		__u64 unbound = 0; /* in a switch: its word, as the reply was judged by */
		struct nat4_entry *nat = snat4_reply_of(ctx, &p, &now, &unbound);

		if (nat)
			return nodeport_reply_remote(ctx, &p, nat, now);
		if (unlikely(unbound))
			return handover_unplaced(p.len, unbound);
	}
	STAGE_END(3);
	return nodeport_ingress(ctx, &p);
}

static __always_inline int tc_egress_packet(struct __sk_buff *ctx)
{
	struct pkt4 p;
	struct ct4_key k;
	struct nat4_entry *nat;
	__u64 now;
	int expired, rc;

	if (vlan_elsewhere(ctx))
		return CTX_ACT_UNSPEC;
	rc = parse_ipv4(ctx, &p);
	if (unlikely(rc == PARSE_NOT_IPV4)) {
		rc = nodeport6_egress(ctx);
		if (rc == NODEPORT6_FRAGMENT)
			return frag6_follow_egress(ctx);
		return rc == NODEPORT6_NOT_IPV6 ? CTX_ACT_UNSPEC : rc;
	}
	if (rc != PARSE_OK)
		return CTX_ACT_UNSPEC;
	if (p.fragment)
		return frag4_follow(ctx, &p, 0);
	if (p.proto != IPPROTO_TCP && p.proto != IPPROTO_UDP)
		return CTX_ACT_UNSPEC;
	ct4_key_of(&p, &k);
	nat = bpf_map_lookup_elem(&nat4, &k);
	if (!nat) {
		__u64 unbound = local_reply_unbound_in_handover(&p);

		if (unlikely(unbound))
			return handover_unplaced(p.len, unbound);
		return CTX_ACT_UNSPEC;
	}
	if (!(nat->flags & CT_F_LOCAL))
		return CTX_ACT_UNSPEC;
	now = ferry_now();
	expired = ct_expired(nat->expires_ns, now);
	if (!expired)
		binding_settle(&p, nat);
	if (expired || ct_tcp_reply_reopen(&p, nat->flags)) {
		/* Left over from a finished flow: this packet belongs to another connection
		 * (say, straight to the pod) that reuses the client's port. */
		bpf_map_delete_elem(&nat4, &k);
		return CTX_ACT_UNSPEC;
	}
	return nodeport_reply_local(ctx, &p, nat, now);
}

SEC("tc")
int tc_ingress(struct __sk_buff *ctx)
{
	struct monitor_ctx m;

	monitor_begin(ctx, &m);
	return monitor_end(ctx, &m, tc_ingress_packet(ctx), HOOK_TC_INGRESS);
}

SEC("tc")
int tc_egress(struct __sk_buff *ctx)
{
	struct monitor_ctx m;

	if (ctx_take_forwarded_mark(ctx))
		return CTX_ACT_UNSPEC;
	monitor_begin(ctx, &m);
	return monitor_end(ctx, &m, tc_egress_packet(ctx), HOOK_TC_EGRESS);
}

char LICENSE[] SEC("license") = "GPL";
