/* East-west Service traffic, balanced once per connect()/sendmsg() by cgroup socket hooks
 * at the cgroup v2 root: pods and host processes reaching ClusterIPs, NodePorts on this
 * node's addresses and loopback, LoadBalancer IPs and externalIPs. No per-packet NAT.
 * recvmsg()/getpeername() map the backend back to the Service address, so UDP replies
 * appear to come from the address the client sent to. loadBalancerSourceRanges apply here
 * too, by the namespace's address (lib/sock_policy.h). IPv6 sockets are translated when
 * they reach an IPv4 Service through an IPv4-mapped address (::ffff:a.b.c.d), and when
 * they reach an IPv6 frontend (lb6_services: the IPv6 family of a dual-stack or IPv6
 * Service). */
#include "lib/common.h"
#include "lib/config.h"
#include "lib/maps.h"
#include "lib/clock.h"
#include "lib/hash.h"
#include "lib/lb.h"
#include "lib/lb6.h"
#include "lib/sock_policy.h"

/* The Service decision for a destination (IPv4, or IPv4-mapped on an IPv6 socket): left
 * alone, refused, or *addr / *port rewritten to a backend. */
static __always_inline int sock_lb4(struct bpf_sock_addr *ctx, __be32 *dst, __be16 *dport)
{
	__be32 addr = *dst;
	__be16 port = *dport;
	__u8 proto = ctx->protocol;
	__u8 scope = LB_SCOPE_EXTERNAL;
	struct lb4_service *svc;
	struct lb4_backend *b;
	__u64 cookie;
	__u32 id;
	int found;

	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return SYS_PROCEED;
	found = lb4_lookup_internal(addr, port, proto, &scope, &svc);
	if (found == LB_NOT_SERVICE && lb4_is_loopback(addr)) {
		if (!is_host_netns(bpf_get_netns_cookie(ctx)))
			return SYS_PROCEED;
		addr = 0;
		found = lb4_lookup_loopback_nodeport(port, proto, &scope, &svc);
	}
	if (found == LB_NOT_SERVICE)
		return SYS_PROCEED;
	if (svc && sock_source_refused(ctx, addr, port, proto, scope, svc)) {
		bpf_set_retval(-EPERM);
		return SYS_REJECT;
	}
	if (found != LB_FOUND)
		return sock_refuse();

	/* The socket cookie spreads sockets over backends and keeps one socket's datagrams
	 * on one backend while the Service is unchanged. */
	cookie = bpf_get_socket_cookie(ctx);
	{
		struct lb4_affinity_key ak = { .netns_cookie = bpf_get_netns_cookie(ctx), .affinity_id = svc->affinity_id };
		__u64 now = ferry_now();

		id = lb4_affinity_get(&ak, addr, port, proto, scope, svc, now);
		if (!id) {
			id = lb4_select_slot(addr, port, proto, scope, svc,
					     hash_final((__u32)cookie + FERRY_HASH_INIT + hash_seed,
							(__u32)(cookie >> 32) + FERRY_HASH_INIT + hash_seed,
							(__u32)port + proto + FERRY_HASH_INIT + hash_seed));
			lb4_affinity_set(&ak, svc, id, now);
		}
	}
	b = lb4_backend(id);
	if (!b)
		return sock_refuse();

	{
		struct lb4_sock_key k = { .cookie = cookie, .address = b->address, .port = b->port };
		struct lb4_sock_value v = { .address = *dst, .port = *dport, .rev_nat_id = svc->rev_nat_id };

		bpf_map_update_elem(&lb4_sock_rev, &k, &v, BPF_ANY);
	}
	*dst = b->address;
	*dport = b->port;
	count_stat(STAT_SOCK_XLATE, 0);
	return SYS_PROCEED;
}

/* The frontend a backend address stands for on this socket, if it was rewritten. */
static __always_inline struct lb4_sock_value *sock_rev4(struct bpf_sock_addr *ctx, __be32 addr, __be16 port)
{
	struct lb4_sock_key k = { .cookie = bpf_get_socket_cookie(ctx), .address = addr, .port = port };

	return bpf_map_lookup_elem(&lb4_sock_rev, &k);
}

static __always_inline int sock4_xlate(struct bpf_sock_addr *ctx)
{
	__be32 addr = ctx->user_ip4;
	__be16 port = (__be16)ctx->user_port;
	int rc = sock_lb4(ctx, &addr, &port);

	if (rc == SYS_PROCEED && (addr != ctx->user_ip4 || port != (__be16)ctx->user_port)) {
		ctx->user_ip4 = addr;
		ctx->user_port = (__u32)port;
	}
	return rc;
}

/* Map a backend address back to the frontend this socket asked for. */
static __always_inline int sock4_rev_xlate(struct bpf_sock_addr *ctx)
{
	struct lb4_sock_value *v = sock_rev4(ctx, ctx->user_ip4, (__be16)ctx->user_port);

	if (v) {
		ctx->user_ip4 = v->address;
		ctx->user_port = (__u32)v->port;
	}
	return SYS_PROCEED;
}

/* An IPv6 socket reaching an IPv4 address through ::ffff:a.b.c.d (Java and .NET open
 * dual-stack sockets by default): the translation is IPv4's, on the low 32 bits. */
static __always_inline int v4_mapped(struct bpf_sock_addr *ctx)
{
	return ctx->user_ip6[0] == 0 && ctx->user_ip6[1] == 0 && ctx->user_ip6[2] == bpf_htonl(0xffff);
}

/* The socket's IPv6 address, 16 bytes in network order (the context gives it as words). */
static __always_inline void sock6_addr(struct bpf_sock_addr *ctx, __u8 *to)
{
	__u32 w[4] = { ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3] };

	__builtin_memcpy(to, w, 16);
}

static __always_inline void sock6_set_addr(struct bpf_sock_addr *ctx, const __u8 *from, __be16 port)
{
	__u32 w[4];

	__builtin_memcpy(w, from, 16);
	ctx->user_ip6[0] = w[0];
	ctx->user_ip6[1] = w[1];
	ctx->user_ip6[2] = w[2];
	ctx->user_ip6[3] = w[3];
	ctx->user_port = (__u32)port;
}

/* A native IPv6 destination: left alone, refused, or rewritten to a backend, as IPv4's
 * (the socket cookie spreads sockets over the slots; ClientIP affinity by namespace). */
static __always_inline int sock_lb6(struct bpf_sock_addr *ctx)
{
	struct lb6_key key = { .port = (__be16)ctx->user_port, .proto = ctx->protocol };
	struct lb6_service *svc, *b;
	__u64 cookie;
	int found;

	if (key.proto != IPPROTO_TCP && key.proto != IPPROTO_UDP)
		return SYS_PROCEED;
	sock6_addr(ctx, key.address);
	found = lb6_lookup(&key, &svc);
	if (found == LB_NOT_SERVICE)
		return SYS_PROCEED;
	if (svc && sock6_source_refused(ctx, &key, svc)) {
		bpf_set_retval(-EPERM);
		return SYS_REJECT;
	}
	if (found != LB_FOUND)
		return sock_refuse();
	cookie = bpf_get_socket_cookie(ctx);
	{
		struct lb6_affinity_key ak = { .netns_cookie = bpf_get_netns_cookie(ctx), .port = key.port, .proto = key.proto };
		__u64 now = ferry_now();

		__builtin_memcpy(ak.address, key.address, 16);
		b = lb6_affinity_get(&ak, &key, svc, now);
		if (!b) {
			b = lb6_select_slot(&key, svc,
					    hash_final((__u32)cookie + FERRY_HASH_INIT + hash_seed,
						       (__u32)(cookie >> 32) + FERRY_HASH_INIT + hash_seed,
						       (__u32)key.port + key.proto + FERRY_HASH_INIT + hash_seed));
			if (b)
				lb6_affinity_set(&ak, svc, b, now);
		}
	}
	if (!b)
		return sock_refuse();
	{
		struct lb6_sock_key k = { .cookie = cookie, .port = b->port };
		struct lb6_sock_value v = { .port = key.port };

		__builtin_memcpy(k.address, b->address, 16);
		__builtin_memcpy(v.address, key.address, 16);
		bpf_map_update_elem(&lb6_sock_rev, &k, &v, BPF_ANY);
	}
	sock6_set_addr(ctx, b->address, b->port);
	count_stat(STAT_SOCK_XLATE, 0);
	return SYS_PROCEED;
}

static __always_inline int sock6_xlate(struct bpf_sock_addr *ctx)
{
	__be32 addr;
	__be16 port;
	int rc;

	if (!v4_mapped(ctx))
		return sock_lb6(ctx);
	addr = ctx->user_ip6[3];
	port = (__be16)ctx->user_port;
	rc = sock_lb4(ctx, &addr, &port);
	if (rc == SYS_PROCEED && (addr != ctx->user_ip6[3] || port != (__be16)ctx->user_port)) {
		ctx->user_ip6[3] = addr;
		ctx->user_port = (__u32)port;
	}
	return rc;
}

static __always_inline int sock6_rev_xlate(struct bpf_sock_addr *ctx)
{
	struct lb4_sock_value *v;

	if (!v4_mapped(ctx)) {
		struct lb6_sock_key k = { .cookie = bpf_get_socket_cookie(ctx), .port = (__be16)ctx->user_port };
		struct lb6_sock_value *v6;

		sock6_addr(ctx, k.address);
		v6 = bpf_map_lookup_elem(&lb6_sock_rev, &k);
		if (v6)
			sock6_set_addr(ctx, v6->address, v6->port);
		return SYS_PROCEED;
	}
	v = sock_rev4(ctx, ctx->user_ip6[3], (__be16)ctx->user_port);
	if (v) {
		ctx->user_ip6[3] = v->address;
		ctx->user_port = (__u32)v->port;
	}
	return SYS_PROCEED;
}

SEC("cgroup/connect4")
int sock4_connect(struct bpf_sock_addr *ctx)
{
	return sock4_xlate(ctx);
}

SEC("cgroup/sendmsg4")
int sock4_sendmsg(struct bpf_sock_addr *ctx)
{
	return sock4_xlate(ctx);
}

SEC("cgroup/recvmsg4")
int sock4_recvmsg(struct bpf_sock_addr *ctx)
{
	return sock4_rev_xlate(ctx);
}

SEC("cgroup/getpeername4")
int sock4_getpeername(struct bpf_sock_addr *ctx)
{
	return sock4_rev_xlate(ctx);
}

SEC("cgroup/connect6")
int sock6_connect(struct bpf_sock_addr *ctx)
{
	return sock6_xlate(ctx);
}

SEC("cgroup/sendmsg6")
int sock6_sendmsg(struct bpf_sock_addr *ctx)
{
	return sock6_xlate(ctx);
}

SEC("cgroup/recvmsg6")
int sock6_recvmsg(struct bpf_sock_addr *ctx)
{
	return sock6_rev_xlate(ctx);
}

SEC("cgroup/getpeername6")
int sock6_getpeername(struct bpf_sock_addr *ctx)
{
	return sock6_rev_xlate(ctx);
}

/* A socket in the host's network namespace was bound to a port (its own, or one the kernel
 * chose for bind(port 0)): mark it in host_ports, so that new SNAT bindings ask the host's
 * sockets about it. Never unmarked: a port marked in vain costs a lookup, a port missed
 * would cost a connection. */
static __always_inline int sock_post_bind(struct bpf_sock *sk)
{
	__u32 port = sk->src_port;
	__u32 k;
	__u64 *w;

	if (!is_host_netns(bpf_get_netns_cookie(sk)))
		return SYS_PROCEED;
	k = (port & 0xffff) >> 6;
	w = bpf_map_lookup_elem(&host_ports, &k);
	if (w && !(*w & (1ULL << (port & 63))))
		__sync_fetch_and_or(w, 1ULL << (port & 63));
	return SYS_PROCEED;
}

SEC("cgroup/post_bind4")
int sock4_post_bind(struct bpf_sock *sk)
{
	return sock_post_bind(sk);
}

SEC("cgroup/post_bind6")
int sock6_post_bind(struct bpf_sock *sk)
{
	return sock_post_bind(sk);
}

char LICENSE[] SEC("license") = "GPL";
