/* ferry monitor: while it asks (the ferry_monitor switch), report drops with their reason
 * and traces of translations (the packet before and after) through the ring buffer, while
 * its lease holds. Costs one array lookup per packet otherwise. */
#ifndef FERRY_LIB_MONITOR_H
#define FERRY_LIB_MONITOR_H

#include "maps.h"
#include "clock.h"
#include "parse.h"
#include "parse6.h"

static __always_inline __u32 monitor_flags(void)
{
	__u32 zero = 0;
	struct ferry_monitor *m = bpf_map_lookup_elem(&ferry_monitor, &zero);
	struct ferry_monitor_lease *lease;

	if (!m || !m->flags)
		return 0;
	/* Only while the monitor's lease holds (struct ferry_monitor_lease). */
	lease = bpf_map_lookup_elem(&ferry_monitor_lease, &zero);
	return lease && ferry_now() < lease->until_ns ? m->flags : 0;
}

/* A packet's addresses, ports and protocol, IPv4 or IPv6, into an event's or the scratch
 * slot's fields (16-byte addresses: IPv4 in the first 4 bytes). Returns its IP version, 0
 * when it is neither (or malformed). */
static __always_inline __u8 monitor_parse(struct __ctx_buff *ctx, __u8 *saddr, __u8 *daddr, __be16 *sport, __be16 *dport,
					  __u8 *proto)
{
	struct pkt4 p4;
	struct pkt6 p6;
	int rc = parse_ipv4(ctx, &p4);

	if (rc == PARSE_OK) {
		__builtin_memset(saddr, 0, 16);
		__builtin_memset(daddr, 0, 16);
		__builtin_memcpy(saddr, &p4.saddr, 4);
		__builtin_memcpy(daddr, &p4.daddr, 4);
		*sport = p4.sport;
		*dport = p4.dport;
		*proto = p4.proto;
		return 4;
	}
	if (rc != PARSE_NOT_IPV4 || parse_ipv6(ctx, &p6) != PARSE_OK)
		return 0;
	__builtin_memcpy(saddr, p6.saddr, 16);
	__builtin_memcpy(daddr, p6.daddr, 16);
	*sport = p6.sport;
	*dport = p6.dport;
	*proto = p6.proto;
	return 6;
}

/* Out of line (lib/common.h), as is monitor_note: their packets' copies are in their own
 * stack frames, not in the program's, which every chain of calls adds to. The packet as it
 * arrived is in this CPU's scratch slot (monitor_note). */
__ferry_global int monitor_event(struct __ctx_buff *ctx, __u32 flags, int verdict, __u8 hook)
{
	struct ferry_scratch *s = scratch();
	struct ferry_event *e;
	__u32 type;

	ctx_keep(ctx);
	if (!s)
		return 0;
	if (verdict == CTX_ACT_SHOT && (flags & MONITOR_DROPS) && s->last_drop)
		type = EVENT_DROP;
	else if (verdict != CTX_ACT_SHOT && (flags & MONITOR_TRACES) && s->last_stat)
		type = EVENT_TRACE;
	else
		return 0;
	e = bpf_ringbuf_reserve(&ferry_events, sizeof(*e), 0);
	if (!e)
		return 0;
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = bpf_ktime_get_ns();
	e->type = type;
	e->reason = type == EVENT_DROP ? s->last_drop : s->last_stat - 1;
	__builtin_memcpy(e->saddr, s->in_saddr, 16);
	__builtin_memcpy(e->daddr, s->in_daddr, 16);
	e->sport = s->in_sport;
	e->dport = s->in_dport;
	e->proto = s->in_proto;
	e->family = s->in_family;
	e->hook = hook;
	e->ifindex = ctx_ifindex(ctx);
	e->verdict = verdict;
	if (type == EVENT_TRACE) {
		__u8 proto;

		/* Both ends of a trace are of one family: ferry translates no IPv4 to IPv6. */
		if (monitor_parse(ctx, e->out_saddr, e->out_daddr, &e->out_sport, &e->out_dport, &proto) != e->family) {
			__builtin_memset(e->out_saddr, 0, 16);
			__builtin_memset(e->out_daddr, 0, 16);
			e->out_sport = 0;
			e->out_dport = 0;
		}
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* While a monitor asks: is the packet about to be judged. */
struct monitor_ctx {
	__u32 flags;
	int have;
};

/* A monitored packet's tuple as it arrived, into this CPU's scratch slot (a tc or XDP
 * program runs to its end before the next starts on the CPU: lib/maps.h); 1 when it is
 * IPv4 or IPv6 with one. */
__ferry_global int monitor_note(struct __ctx_buff *ctx)
{
	struct ferry_scratch *s = scratch();

	ctx_keep(ctx);
	if (!s)
		return 0;
	s->in_family = monitor_parse(ctx, s->in_saddr, s->in_daddr, &s->in_sport, &s->in_dport, &s->in_proto);
	return s->in_family != 0;
}

/* Before the program decides: note the packet, clear the last recorded stat and drop. */
static __always_inline void monitor_begin(struct __ctx_buff *ctx, struct monitor_ctx *m)
{
	struct ferry_scratch *s;

	m->flags = monitor_flags();
	m->have = 0;
	if (!m->flags)
		return;
	s = scratch();
	if (s) {
		s->last_drop = 0;
		s->last_stat = 0;
	}
	m->have = monitor_note(ctx);
}

/* After: report the verdict, if a monitor asks for this kind of event. */
static __always_inline int monitor_end(struct __ctx_buff *ctx, const struct monitor_ctx *m, int verdict, __u8 hook)
{
	if (m->have)
		monitor_event(ctx, m->flags, verdict, hook);
	return verdict;
}

#endif
