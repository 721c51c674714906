/* What the socket hooks decide before any translation: the host's network namespace,
 * a refusal, and loadBalancerSourceRanges by the namespace's source address (the agent
 * records a pod's in lb4_netns_sources and lb6_netns_sources; the host's is the node's). */
#ifndef FERRY_LIB_SOCK_POLICY_H
#define FERRY_LIB_SOCK_POLICY_H

#include "config.h"
#include "maps.h"
#include "lb.h"
#include "lb6.h"

#define SYS_REJECT 0
#define SYS_PROCEED 1

#ifndef ECONNREFUSED
#define ECONNREFUSED 111
#endif
#ifndef EPERM
#define EPERM 1
#endif

/* Is this the host's network namespace (the agent's, as configured)? kube-proxy answers
 * NodePorts on loopback there only: a pod's own 127.0.0.1:port is its own (a sidecar's,
 * say); and only the host's binds can hold an SNAT port. */
static __always_inline int is_host_netns(__u64 cookie)
{
	return host_netns_cookie ? cookie == host_netns_cookie : cookie == bpf_get_netns_cookie(NULL);
}

/* Refuse the call with ECONNREFUSED, as a TCP client of kube-proxy's REJECT sees. */
static __always_inline int sock_refuse(void)
{
	count_stat(STAT_SOCK_REJECT, 0);
	bpf_set_retval(-ECONNREFUSED);
	return SYS_REJECT;
}

/* loadBalancerSourceRanges, decided before any translation or refusal as on the tc path
 * (kube-proxy checks them for pods and the host too). connect() has no source address yet:
 * the host's connections leave from the node's address, a pod's from the address the agent
 * recorded for its namespace; a namespace it has not recorded is refused too (a pod whose
 * ranges would not allow it must not slip through before the agent sees it). Refused with
 * EPERM: a policy's refusal, unlike "no backend" (ECONNREFUSED). An ETP=Local LB IP found
 * in the internal scope takes its ranges from its external entry. */
static __always_inline int sock_source_refused(struct bpf_sock_addr *ctx, __be32 addr, __be16 port, __u8 proto, __u8 scope,
					       struct lb4_service *svc)
{
	struct lb4_netns_source *src;
	__u64 netns;
	__be32 saddr;

	if (scope == LB_SCOPE_INTERNAL && (svc->flags & LB_F_LOAD_BALANCER))
		svc = lb4_lookup_master(addr, port, proto, LB_SCOPE_EXTERNAL);
	if (!svc || !(svc->flags & LB_F_SOURCE_RANGES))
		return 0;
	netns = bpf_get_netns_cookie(ctx);
	if (is_host_netns(netns)) {
		saddr = snat4_node_address();
	} else {
		src = bpf_map_lookup_elem(&lb4_netns_sources, &netns);
		if (!src) {
			count_drop(DROP_SOURCE_UNKNOWN, 0);
			return 1;
		}
		saddr = src->address;
	}
	if (lb4_source_allowed(svc, saddr))
		return 0;
	count_drop(DROP_SOURCE_RANGE, 0);
	return 1;
}

/* loadBalancerSourceRanges of an IPv6 frontend, as sock_source_refused's: the host's
 * connections leave from the node's IPv6 address (snat6_address; with none, refused), a pod's
 * from the IPv6 address the agent recorded for its namespace (lb6_netns_sources). */
static __always_inline int sock6_source_refused(struct bpf_sock_addr *ctx, struct lb6_key *key, struct lb6_service *svc)
{
	struct lb6_netns_source *src;
	__u8 saddr[16];
	__u8 scope = key->scope;
	__u64 netns;
	int allowed;

	if (scope == LB_SCOPE_INTERNAL && (svc->flags & LB_F_LOAD_BALANCER)) {
		key->scope = LB_SCOPE_EXTERNAL;
		svc = bpf_map_lookup_elem(&lb6_services, key);
		key->scope = scope;
	}
	if (!svc || !(svc->flags & LB_F_SOURCE_RANGES))
		return 0;
	netns = bpf_get_netns_cookie(ctx);
	if (is_host_netns(netns)) {
		if (!snat6_on()) {
			count_drop(DROP_SOURCE_UNKNOWN, 0);
			return 1;
		}
		snat6_node_address(saddr);
	} else {
		src = bpf_map_lookup_elem(&lb6_netns_sources, &netns);
		if (!src) {
			count_drop(DROP_SOURCE_UNKNOWN, 0);
			return 1;
		}
		__builtin_memcpy(saddr, src->address, 16);
	}
	allowed = lb6_source_allowed(key, svc, saddr);
	if (!allowed)
		count_drop(DROP_SOURCE_RANGE, 0);
	return !allowed;
}

#endif
