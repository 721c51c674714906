/* IPv6 fragments, as lib/frag.h's IPv4 ones: only a datagram's first fragment carries
 * ports, so it is balanced and translated as a whole packet is, and its translation (new
 * addresses, and whether it was routed on) noted in frag6 by the fragments' addresses,
 * identification and protocol; the later fragments follow it (lib/nodeport6.h). A later
 * fragment that arrives before its first, or long after, has nothing to follow. */
#ifndef FERRY_LIB_FRAG6_H
#define FERRY_LIB_FRAG6_H

#include "config.h"
#include "maps.h"
#include "clock.h"
#include "parse6.h"

static __always_inline void frag6_key_of(const struct pkt6 *p, struct frag6_key *k)
{
	__builtin_memcpy(k->saddr, p->saddr, 16);
	__builtin_memcpy(k->daddr, p->daddr, 16);
	k->id = p->frag_id;
	k->proto = p->proto;
	k->pad[0] = 0;
	k->pad[1] = 0;
	k->pad[2] = 0;
}

/* Out of line, a global function with a frame of a few bytes: inlined, what it keeps
 * across its calls took its callers' frames past what their call chains have room for. */
__ferry_global int frag6_write(const struct pkt6 *p, const struct in6_addr *saddr, const struct in6_addr *daddr,
			       __u32 action)
{
	struct frag6_record *r;

	r = bpf_map_lookup_elem(&frag6_scratch, &only_slot);
	if (!r || !p || !saddr || !daddr)
		return 0;
	/* Everything but the clock first, so that only the slot is kept across its read (the
	 * frame stays a few bytes). Addresses lie 4-byte aligned in every struct holding one:
	 * copied by words. */
	frag6_key_of(p, &r->key);
	__builtin_memcpy(r->entry.saddr, saddr, 16);
	__builtin_memcpy(r->entry.daddr, daddr, 16);
	r->entry.action = action;
	asm volatile("" : : : "memory");
	r->entry.expires_ns = ferry_now() + (__u64)frag_lifetime * NSEC_PER_SEC;
	return bpf_map_update_elem(&frag6, &r->key, &r->entry, BPF_ANY);
}

/* After translating `p` to saddr → daddr: if it is a first fragment, its later fragments
 * follow (`action`: enum frag_action). Built in a per-CPU slot: its callers' frames have
 * no room for the key and entry. */
static __always_inline void frag6_note(const struct pkt6 *p, const __u8 *saddr, const __u8 *daddr, __u8 action)
{
	if (p->fragment == PKT6_FIRST_FRAGMENT)
		frag6_write(p, (const struct in6_addr *)saddr, (const struct in6_addr *)daddr, action);
}

/* The translation a later fragment follows, or NULL (none, or expired). Its key too is
 * built in the per-CPU slot. */
static __always_inline struct frag6_entry *frag6_followed(const struct pkt6 *p)
{
	struct frag6_record *r = bpf_map_lookup_elem(&frag6_scratch, &only_slot);
	struct frag6_entry *e;

	if (!r)
		return NULL;
	frag6_key_of(p, &r->key);
	e = bpf_map_lookup_elem(&frag6, &r->key);
	return e && e->expires_ns >= ferry_now() ? e : NULL;
}

#endif
