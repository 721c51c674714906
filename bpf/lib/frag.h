/* IPv4 fragments. Only a datagram's first fragment carries ports, so the translation made
 * for it (new addresses, and whether it was redirected) is remembered by (source,
 * destination, IP id, protocol), and every later fragment follows it. A later fragment
 * that arrives before its first, or long after, has nothing to follow. */
#ifndef FERRY_LIB_FRAG_H
#define FERRY_LIB_FRAG_H

#include "config.h"
#include "maps.h"
#include "clock.h"
#include "parse.h"
#include "nat.h"
#include "fib.h"
#include "icmp.h"

static __always_inline void frag4_key_of(const struct pkt4 *p, struct frag4_key *k)
{
	k->saddr = p->saddr;
	k->daddr = p->daddr;
	k->id = p->frag_id;
	k->proto = p->proto;
	k->pad = 0;
}

/* After translating `p`: if it is a first fragment, let its later fragments follow. */
static __always_inline void frag4_record(const struct pkt4 *p, __be32 saddr, __be32 daddr, __u8 action)
{
	struct frag4_key k;
	struct frag4_entry e = {
		.saddr = saddr,
		.daddr = daddr,
		.action = action,
	};

	if (!pkt4_first_fragment(p))
		return;
	e.expires_ns = ferry_now() + (__u64)frag_lifetime * NSEC_PER_SEC;
	frag4_key_of(p, &k);
	bpf_map_update_elem(&frag4, &k, &e, BPF_ANY);
}

/* A later fragment: translated as its first was. Without a record it is passed on, unless
 * it is addressed to a Service (`service`): then nothing could have been meant by it. */
__ferry_global int frag4_follow(struct __ctx_buff *ctx, const struct pkt4 *p, int service)
{
	struct frag4_key k;
	struct frag4_entry *e;

	if (!p)
		return CTX_ACT_UNSPEC;
	frag4_key_of(p, &k);
	e = bpf_map_lookup_elem(&frag4, &k);
	if (!e || e->expires_ns < ferry_now())
		return service ? count_drop(DROP_FRAGMENT, p->len) : CTX_ACT_UNSPEC;
	if (e->action == FRAG_ACT_REDIRECT && p->ttl <= 1)
		return icmp4_time_exceeded(ctx, p);
	if (nat4_rewrite_addr(ctx, p, NAT_SRC, p->saddr, e->saddr, 0) < 0 ||
	    nat4_rewrite_addr(ctx, p, NAT_DST, p->daddr, e->daddr, 0) < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	count_stat(STAT_FRAGMENT, p->len);
	if (e->action != FRAG_ACT_REDIRECT)
		return CTX_ACT_OK;
	if (ipv4_dec_ttl(ctx, p) < 0)
		return count_drop(DROP_CSUM_FAILED, p->len);
	return fib_redirect4(ctx, e->saddr, e->daddr);
}

#endif
