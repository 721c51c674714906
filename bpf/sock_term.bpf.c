/* Connected UDP sockets whose backend has left their Service: destroyed, so that the
 * application sees an error and connects again (balanced afresh by the socket hooks), as
 * kube-proxy deletes the conntrack entries of UDP flows to a removed endpoint. A socket
 * balanced at connect() talks to its backend's address directly; without this it would
 * send into the void until it is closed (Cilium terminates such sockets the same way).
 *
 * An iterator over the UDP sockets of the network namespace it is read in (the agent reads
 * it in every namespace of the node, src/datapath/socket-terminator.ts). A socket is
 * destroyed when the socket hooks balanced it (lb4_sock_rev holds its cookie and its
 * connected address; lb6_sock_rev for an IPv6 socket to an IPv6 ClusterIP) and that address
 * is no longer a backend of the frontend it asked for, nor a terminating backend that
 * still serves.
 * Each destroyed socket is reported as a line "<cookie> <backend address> <port> <rc>".
 * Needs the bpf_sock_destroy kfunc (kernel 6.5); the agent runs without it where missing. */
#include "lib/common.h"
#include "lib/config.h"
#include "lib/maps.h"
#include "lib/lb.h"
#include "lib/lb6.h"
#include <linux/in6.h>

#define TCP_ESTABLISHED 1 /* a connected UDP socket's state */
#ifndef AF_INET6
#define AF_INET6 10
#endif

/* The kernel's types this iterator reads, as far as it reads them: their offsets are the
 * running kernel's (CO-RE, relocated by libbpf from the kernel's BTF). */
struct sock_common {
	__be32 skc_daddr;
	__be16 skc_dport;
	unsigned short skc_family;
	volatile unsigned char skc_state;
	struct in6_addr skc_v6_daddr;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
} __attribute__((preserve_access_index));

struct udp_sock;
struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__udp {
	struct bpf_iter_meta *meta;
	struct udp_sock *udp_sk;
} __attribute__((preserve_access_index));

extern int bpf_sock_destroy(struct sock_common *sk) __ksym;

struct draining_search {
	__be32 address;
	__be16 port;
	__u8 found;
};

static long draining_step(__u64 i, void *ctx)
{
	struct draining_search *s = ctx;
	__u32 id = i + 1;
	struct lb4_backend *b = bpf_map_lookup_elem(&lb4_backends, &id);

	if (!b)
		return 1; /* past the last id */
	if (b->address == s->address && b->port == s->port && b->proto == IPPROTO_UDP && (b->flags & LB_BACKEND_F_TERMINATING)) {
		s->found = 1;
		return 1;
	}
	return 0;
}

/* Is baddr:bport a terminating backend that still serves? Those stay out of the frontends'
 * slots (no new flows) but keep what they have until they are gone, as kube-proxy keeps a
 * serving endpoint's conntrack entries. A walk over the backends, for sockets whose backend
 * is in no slot only. */
static __always_inline int sock_backend_draining(__be32 baddr, __be16 bport)
{
	struct draining_search s = { .address = baddr, .port = bport };

	bpf_loop(1 << 20, draining_step, &s, 0);
	return s.found;
}

/* Does the frontend this socket asked for (as the socket hooks found it: the internal
 * scope's entry first, a NodePort on loopback by its 0.0.0.0 entry) still have the backend
 * the socket is connected to? */
static __always_inline int sock_backend_current(const struct lb4_sock_value *asked, __be32 baddr, __be16 bport)
{
	struct lb4_service *svc;
	__be32 addr = asked->address;
	__u8 scope;
	int found;

	found = lb4_lookup_internal(addr, asked->port, IPPROTO_UDP, &scope, &svc);
	if (found == LB_NOT_SERVICE && lb4_is_loopback(addr)) {
		addr = 0;
		found = lb4_lookup_loopback_nodeport(asked->port, IPPROTO_UDP, &scope, &svc);
	}
	if (found != LB_FOUND || !svc)
		return 0;
	return lb4_has_backend_at(addr, asked->port, IPPROTO_UDP, scope, svc, baddr, bport, 0);
}

/* Destroy the socket, and report it as a line "<cookie> <backend address> <port> <rc>". */
static __always_inline void sock_destroy_reported(struct bpf_iter__udp *ctx, struct sock *sk, __u64 cookie, const void *address,
						  __be16 port, int ipv6)
{
	static const char fmt4[] = "%llu %pI4 %llu %lld\n";
	static const char fmt6[] = "%llu %pI6 %llu %lld\n";
	__u64 args[4] = { cookie, (__u64)address, bpf_ntohs(port), (__u64)(__s64)bpf_sock_destroy((struct sock_common *)sk) };

	if (ipv6)
		bpf_seq_printf(ctx->meta->seq, fmt6, sizeof(fmt6), args, sizeof(args));
	else
		bpf_seq_printf(ctx->meta->seq, fmt4, sizeof(fmt4), args, sizeof(args));
}

/* An IPv6 socket connected to a native IPv6 address: lb6_sock_rev holds it if the hooks
 * balanced it; destroyed unless the frontend it asked for still has its backend, active or
 * draining. */
static __always_inline int sock6_term(struct bpf_iter__udp *ctx, struct sock *sk)
{
	struct lb6_sock_key k = { .cookie = bpf_get_socket_cookie(sk), .port = sk->__sk_common.skc_dport };
	struct lb6_key fk = { .proto = IPPROTO_UDP };
	struct lb6_sock_value *asked;
	struct lb6_service *svc;

	__u32 w[4] = { sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[0], sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[1],
		       sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[2], sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[3] };

	__builtin_memcpy(k.address, w, 16);
	asked = bpf_map_lookup_elem(&lb6_sock_rev, &k);
	if (!asked)
		return 0;
	__builtin_memcpy(fk.address, asked->address, 16);
	fk.port = asked->port;
	if (lb6_lookup(&fk, &svc) == LB_FOUND && svc && lb6_find_backend(&fk, svc, k.address, k.port, 1))
		return 0;
	sock_destroy_reported(ctx, sk, k.cookie, k.address, k.port, 1);
	return 0;
}

SEC("iter/udp")
int sock4_term_udp(struct bpf_iter__udp *ctx)
{
	struct sock *sk = (struct sock *)ctx->udp_sk;
	struct lb4_sock_value *asked;
	struct lb4_sock_key k = {};

	if (!sk || sk->__sk_common.skc_state != TCP_ESTABLISHED)
		return 0;
	/* An IPv6 socket to a native IPv6 address; one to ::ffff:a.b.c.d has its IPv4 address
	 * in skc_daddr, as an IPv4 socket does. */
	if (sk->__sk_common.skc_family == AF_INET6 && !(sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[0] == 0 &&
							  sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[1] == 0 &&
							  sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[2] == bpf_htonl(0xffff)))
		return sock6_term(ctx, sk);
	k.cookie = bpf_get_socket_cookie(sk);
	k.address = sk->__sk_common.skc_daddr;
	k.port = sk->__sk_common.skc_dport;
	asked = bpf_map_lookup_elem(&lb4_sock_rev, &k);
	if (!asked || sock_backend_current(asked, k.address, k.port) || sock_backend_draining(k.address, k.port))
		return 0;
	sock_destroy_reported(ctx, sk, k.cookie, &k.address, k.port, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
