/* One datapath, two hooks: the lib code works on a `struct __ctx_buff` through the ctx_*
 * calls below, and builds for tc (an skb) or, with FERRY_XDP defined before any include,
 * for XDP (a frame before the kernel made an skb of it).
 *
 * Verdicts: CTX_ACT_OK (translated; the stack takes it on), CTX_ACT_UNSPEC (not ferry's, or
 * not for this hook: tc's next filter, or for XDP the stack and then tc), CTX_ACT_SHOT,
 * CTX_ACT_REDIRECT. XDP has no skb: it cannot have the kernel resolve a neighbour, and it
 * cannot know a checksum the sender left partial; where it would need the first, it passes
 * the packet untouched and tc, which runs next, decides (the second is the sandbox's to
 * avoid: a NIC hands over complete checksums). */
#ifndef FERRY_LIB_CTX_H
#define FERRY_LIB_CTX_H

#include "common.h"
#include "csum.h"
#include <bpf/bpf_core_read.h>

/* Direct packet access up to this offset (a bound the verifier needs); beyond, helpers. */
#define CTX_DIRECT_MAX_OFF 256

/* ctx_store_bytes flag (ferry's, never passed to the kernel): on tc, write the bytes
 * directly where they lie in the skb's head, a store instead of a helper call. Only for
 * code tc_egress never reaches: a tc program with any direct write gets a prologue that
 * makes every cloned skb's head private before it runs, and TCP's own segments leaving the
 * host are clones (test/bpf/direct-writes.test.ts checks tc_egress has none). XDP always
 * writes directly. */
#define CTX_STORE_DIRECT (1ULL << 63)

#ifdef FERRY_XDP
#define __ctx_buff xdp_md
#define CTX_IS_XDP 1
#define CTX_ACT_OK XDP_PASS
#define CTX_ACT_UNSPEC XDP_PASS
#define CTX_ACT_SHOT XDP_DROP
#define CTX_ACT_REDIRECT XDP_REDIRECT
#else
#define __ctx_buff __sk_buff
#define CTX_IS_XDP 0
#define CTX_ACT_OK TC_ACT_OK
#define CTX_ACT_UNSPEC TC_ACT_UNSPEC
#define CTX_ACT_SHOT TC_ACT_SHOT
#define CTX_ACT_REDIRECT TC_ACT_REDIRECT
#endif

/* `len` bytes at `off` when they lie in the packet's linear part (an skb's head, an XDP
 * frame without fragments), for direct access, no helper call; NULL otherwise (bytes past
 * the linear part or the end). */
static __always_inline void *ctx_linear(struct __ctx_buff *ctx, __u32 off, __u32 len)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	void *at;

	if (off > CTX_DIRECT_MAX_OFF)
		return NULL;
	at = data + off;
	if (at + len > end)
		return NULL;
	return at;
}

/* `len` bytes (a constant) written directly where they lie in the linear part; 0 when
 * they do not lie there (the caller's helper writes them). */
static __always_inline int ctx_store_linear(struct __ctx_buff *ctx, __u32 off, const void *from, __u32 len)
{
	void *at = ctx_linear(ctx, off, len);

	if (!at)
		return 0;
	__builtin_memcpy(at, from, len);
	return 1;
}

/* Bytes of the packet into `to`: read directly where they lie in the linear part (a
 * constant length, so the copy is a few loads), else by the hook's helper, which also
 * reads an skb's paged data or an XDP frame's fragments. */
static __always_inline long ctx_load_bytes(struct __ctx_buff *ctx, __u32 off, void *to, __u32 len)
{
	if (__builtin_constant_p(len)) {
		void *at = ctx_linear(ctx, off, len);

		if (at) {
			__builtin_memcpy(to, at, len);
			return 0;
		}
	}
#if CTX_IS_XDP
	return bpf_xdp_load_bytes(ctx, off, to, len);
#else
	return bpf_skb_load_bytes(ctx, off, to, len);
#endif
}

/* A checksum field after `from` became `to` (RFC 1624), as the kernel's helpers do it. */
static __always_inline __u16 csum16_replace(__u16 check, __u32 from, __u32 to, __u32 size)
{
	__u32 sum = (__u16)~check;

	if (size == 0) {
		/* `to` is a 32-bit partial sum of the change (the helpers' diff form) */
		sum += (to & 0xffff) + (to >> 16);
	} else if (size == 4) {
		sum += (__u16)~(from & 0xffff) + (__u16)~(from >> 16);
		sum += (to & 0xffff) + (to >> 16);
	} else {
		sum += (__u16)~(from & 0xffff) + (to & 0xffff);
	}
	return csum_fold32(sum);
}

#if CTX_IS_XDP

/* A helper rather than data_end - data: those load as packet pointers, which the
 * verifier will not let be spilled as plain numbers. */
static __always_inline __u32 ctx_len(struct xdp_md *ctx)
{
	return bpf_xdp_get_buff_len(ctx);
}

static __always_inline __u32 ctx_ifindex(const struct xdp_md *ctx)
{
	return ctx->ingress_ifindex;
}

/* The device the packet came in on, where route lookups start. */
static __always_inline __u32 ctx_fib_ifindex(const struct xdp_md *ctx)
{
	return ctx->ingress_ifindex;
}

static __always_inline long ctx_store_bytes(struct xdp_md *ctx, __u32 off, const void *from, __u32 len, __u64 flags)
{
	if (__builtin_constant_p(len) && ctx_store_linear(ctx, off, from, len))
		return 0;
	return bpf_xdp_store_bytes(ctx, off, (void *)from, len);
}

static __always_inline long ctx_l3_csum_replace(struct xdp_md *ctx, __u32 off, __u32 from, __u32 to, __u64 size)
{
	__u16 check;

	if (ctx_load_bytes(ctx, off, &check, sizeof(check)) < 0)
		return -1;
	check = csum16_replace(check, from, to, size & 0xf);
	return ctx_store_bytes(ctx, off, &check, sizeof(check), 0);
}

/* A frame's checksums are all whole: XDP runs before anything could leave one partial. */
static __always_inline int ctx_l4_csum_whole(const struct xdp_md *ctx)
{
	return 1;
}

static __always_inline int ctx_l4_csum_partial(const struct xdp_md *ctx)
{
	return 0;
}

/* Open (delta > 0) or close (delta < 0) room for IPv4 options right after a 20-byte
 * header, for a caller that then writes the Ethernet and IPv4 headers whole from the
 * frame's start: XDP moves only the start (what lies in the first ETH_HLEN + 20 bytes,
 * and the room, is left undefined); the rest of the frame stays where it is. */
static __always_inline long ctx_resize_ipv4_options(struct xdp_md *ctx, int delta)
{
	return bpf_xdp_adjust_head(ctx, -delta);
}

/* The packet becomes `len` bytes long (longer or shorter). */
static __always_inline long ctx_resize(struct xdp_md *ctx, __u32 len)
{
	return bpf_xdp_adjust_tail(ctx, (int)len - (int)ctx_len(ctx));
}

/* Send the frame back out of the device it came in on. */
static __always_inline int ctx_bounce(struct xdp_md *ctx)
{
	return XDP_TX;
}

/* Send the frame out of `ifindex`: back where it came from is XDP_TX, cheaper than a
 * redirect. */
static __always_inline int ctx_redirect(struct xdp_md *ctx, __u32 ifindex)
{
	if (ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(ifindex, 0);
}

#else /* tc */

static __always_inline __u32 ctx_len(const struct __sk_buff *ctx)
{
	return ctx->len;
}

static __always_inline __u32 ctx_ifindex(const struct __sk_buff *ctx)
{
	return ctx->ifindex;
}

static __always_inline __u32 ctx_fib_ifindex(const struct __sk_buff *ctx)
{
	return ctx->ingress_ifindex ? ctx->ingress_ifindex : ctx->ifindex;
}

static __always_inline long ctx_store_bytes(struct __sk_buff *ctx, __u32 off, const void *from, __u32 len, __u64 flags)
{
	if (__builtin_constant_p(len) && (flags & CTX_STORE_DIRECT) && ctx_store_linear(ctx, off, from, len))
		return 0;
	return bpf_skb_store_bytes(ctx, off, from, len, flags & ~CTX_STORE_DIRECT);
}

static __always_inline long ctx_l3_csum_replace(struct __sk_buff *ctx, __u32 off, __u32 from, __u32 to, __u64 size)
{
	return bpf_l3_csum_replace(ctx, off, from, to, size);
}

/* The kernel's helper also knows a checksum the sender left partial (CHECKSUM_PARTIAL). */
static __always_inline long ctx_l4_csum_replace(struct __sk_buff *ctx, __u32 off, __u32 from, __u32 to, __u64 flags)
{
	return bpf_l4_csum_replace(ctx, off, from, to, flags);
}

#ifdef FERRY_NO_KERN_CTX
/* A kernel without bpf_cast_to_kern_ctx (tc_compat.bpf.c): the helper for every checksum. */
static __always_inline int ctx_l4_csum_whole(struct __sk_buff *ctx)
{
	return 0;
}

static __always_inline int ctx_l4_csum_partial(struct __sk_buff *ctx)
{
	return 0;
}
#else
/* The skb's checksum state, as far as ctx_ip_summed reads it: the running kernel's
 * layout (CO-RE, relocated by libbpf from the kernel's BTF). */
struct sk_buff {
	__u8 ip_summed : 2;
} __attribute__((preserve_access_index));

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym; /* the verifier makes it a register move */

#define CHECKSUM_UNNECESSARY 1 /* linux/skbuff.h: 0 NONE, 1 UNNECESSARY, 2 COMPLETE, 3 PARTIAL */
#define CHECKSUM_PARTIAL 3

/* The skb's ip_summed: how much of its L4 checksum the field holds (below). */
static __always_inline __u8 ctx_ip_summed(struct __sk_buff *ctx)
{
	struct sk_buff *skb = bpf_cast_to_kern_ctx(ctx);

	return BPF_CORE_READ_BITFIELD(skb, ip_summed);
}

/* Does the L4 checksum field hold the whole checksum, so that it may be updated in place
 * (ctx_l4_csum_update, no helper call)? Yes for CHECKSUM_NONE and CHECKSUM_UNNECESSARY
 * (a NIC, a veth, XDP's skbs); not for CHECKSUM_PARTIAL (the field holds the pseudo
 * header's sum, the device completes it) nor CHECKSUM_COMPLETE (skb->csum, the sum of the
 * packet a NIC reported, changes with it): those take bpf_l4_csum_replace, which knows them. */
static __always_inline int ctx_l4_csum_whole(struct __sk_buff *ctx)
{
	return ctx_ip_summed(ctx) <= CHECKSUM_UNNECESSARY;
}

/* Did the sender leave the L4 checksum partial (CHECKSUM_PARTIAL: the field holds the
 * pseudo header's sum, the device completes it over the rest)? Then a change of the ports
 * leaves the field as it is (bpf_l4_csum_replace does nothing there), and only an address
 * change (the pseudo header) moves it. */
static __always_inline int ctx_l4_csum_partial(struct __sk_buff *ctx)
{
	return ctx_ip_summed(ctx) == CHECKSUM_PARTIAL;
}
#endif

/* tc: the kernel moves the headers itself (and keeps the skb's header offsets right). */
static __always_inline long ctx_resize_ipv4_options(struct __sk_buff *ctx, int delta)
{
	return bpf_skb_adjust_room(ctx, delta, BPF_ADJ_ROOM_NET, 0);
}

static __always_inline long ctx_resize(struct __sk_buff *ctx, __u32 len)
{
	return bpf_skb_change_tail(ctx, len, 0);
}

/* A packet tc sends back out of the device it came in on passes that device's tc egress,
 * where ferry has nothing to do with it (tc_egress translates what the stack sends): it is
 * marked so, if it bears no one else's mark, and tc_egress takes the mark off and lets it
 * go without parsing it (~75 ns a forwarded packet). Not for other devices: they may have
 * no ferry egress program to take the mark off. */
#define FERRY_MARK_FORWARDED 0x0fe70000

static __always_inline void ctx_mark_forwarded(struct __sk_buff *ctx, __u32 ifindex)
{
	if (ifindex == ctx->ifindex && !ctx->mark)
		ctx->mark = FERRY_MARK_FORWARDED;
}

/* In tc_egress: was this packet forwarded by tc_ingress (ctx_mark_forwarded)? The mark
 * goes with the answer. */
static __always_inline int ctx_take_forwarded_mark(struct __sk_buff *ctx)
{
	if (ctx->mark != FERRY_MARK_FORWARDED)
		return 0;
	ctx->mark = 0;
	return 1;
}

static __always_inline int ctx_bounce(struct __sk_buff *ctx)
{
	ctx_mark_forwarded(ctx, ctx->ifindex);
	return bpf_redirect(ctx->ifindex, 0);
}

static __always_inline int ctx_redirect(struct __sk_buff *ctx, __u32 ifindex)
{
	ctx_mark_forwarded(ctx, ifindex);
	return bpf_redirect(ifindex, 0);
}

#endif

/* A checksum field that holds the whole checksum (see ctx_l4_csum_whole) updated in place,
 * as bpf_l4_csum_replace would: the size in the low bits of `flags` (0: `to` is the
 * change's partial sum, `from` unused); a UDP checksum of 0 means "none" and stays 0
 * (BPF_F_MARK_MANGLED_0), and a computed 0 is sent as 0xffff. The pseudo-header flag needs
 * nothing here: a whole checksum covers the addresses anyway. `store`: ctx_store_bytes flags. */
static __always_inline long ctx_l4_csum_update(struct __ctx_buff *ctx, __u32 off, __u32 from, __u32 to, __u64 flags, __u64 store)
{
	__u16 check;

	if (ctx_load_bytes(ctx, off, &check, sizeof(check)) < 0)
		return -1;
	if ((flags & BPF_F_MARK_MANGLED_0) && !check)
		return 0;
	check = csum16_replace(check, from, to, flags & 0xf);
	if ((flags & BPF_F_MARK_MANGLED_0) && !check)
		check = 0xffff;
	return ctx_store_bytes(ctx, off, &check, sizeof(check), store);
}

#if CTX_IS_XDP
/* XDP has no skb: every checksum it sees is whole, and updated in place. */
static __always_inline long ctx_l4_csum_replace(struct xdp_md *ctx, __u32 off, __u32 from, __u32 to, __u64 flags)
{
	return ctx_l4_csum_update(ctx, off, from, to, flags, 0);
}
#endif

#endif
