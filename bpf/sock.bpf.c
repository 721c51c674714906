/* East-west Service traffic, balanced once per connect()/sendmsg() by cgroup socket hooks
 * at the cgroup v2 root: pods and host processes reaching ClusterIPs, NodePorts on this
 * node's addresses and loopback, LoadBalancer IPs and externalIPs. No per-packet NAT.
 * recvmsg()/getpeername() map the backend back to the Service address, so UDP replies
 * appear to come from the address the client sent to. */
#include "lib/common.h"
#include "lib/config.h"
#include "lib/maps.h"
#include "lib/hash.h"
#include "lib/lb.h"

#define SYS_REJECT 0
#define SYS_PROCEED 1

#ifndef ECONNREFUSED
#define ECONNREFUSED 111
#endif

static __always_inline int is_loopback4(__be32 addr)
{
	return (bpf_ntohl(addr) >> 24) == 127;
}

/* Refuse the call with ECONNREFUSED, as a TCP client of kube-proxy's REJECT sees. */
static __always_inline int sock_refuse(void)
{
	count_stat(STAT_SOCK_REJECT, 0);
	bpf_set_retval(-ECONNREFUSED);
	return SYS_REJECT;
}

static __always_inline int sock4_xlate(struct bpf_sock_addr *ctx)
{
	__be32 addr = ctx->user_ip4;
	__be16 port = (__be16)ctx->user_port;
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
	if (found == LB_NOT_SERVICE && is_loopback4(addr)) {
		/* NodePort on loopback: the 0.0.0.0:port entry. */
		addr = 0;
		found = lb4_lookup_internal(addr, port, proto, &scope, &svc);
		if (found == LB_UNKNOWN_PORT)
			found = LB_NOT_SERVICE; /* 127.0.0.1:other is somebody's local port */
	}
	if (found == LB_NOT_SERVICE)
		return SYS_PROCEED;
	if (found != LB_FOUND)
		return sock_refuse();

	/* The socket cookie spreads sockets over backends and keeps one socket's datagrams
	 * on one backend while the Service is unchanged. */
	cookie = bpf_get_socket_cookie(ctx);
	{
		struct lb4_affinity_key ak = { .netns_cookie = bpf_get_netns_cookie(ctx), .affinity_id = svc->affinity_id };
		__u64 now = bpf_ktime_get_ns();

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
		struct lb4_sock_value v = { .address = ctx->user_ip4, .port = (__be16)ctx->user_port, .rev_nat_id = svc->rev_nat_id };

		bpf_map_update_elem(&lb4_sock_rev, &k, &v, BPF_ANY);
	}
	ctx->user_ip4 = b->address;
	ctx->user_port = (__u32)b->port;
	count_stat(STAT_SOCK_XLATE, 0);
	return SYS_PROCEED;
}

/* Map a backend address back to the frontend this socket asked for. */
static __always_inline int sock4_rev_xlate(struct bpf_sock_addr *ctx)
{
	struct lb4_sock_key k = {
		.cookie = bpf_get_socket_cookie(ctx),
		.address = ctx->user_ip4,
		.port = (__be16)ctx->user_port,
	};
	struct lb4_sock_value *v = bpf_map_lookup_elem(&lb4_sock_rev, &k);

	if (v) {
		ctx->user_ip4 = v->address;
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

char LICENSE[] SEC("license") = "GPL";
