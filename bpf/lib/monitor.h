/* ferry monitor: while it asks (the ferry_monitor switch), report drops with their reason
 * and traces of translations (the packet before and after) through the ring buffer, while
 * its lease holds. Costs one array lookup per packet otherwise. */
#ifndef FERRY_LIB_MONITOR_H
#define FERRY_LIB_MONITOR_H

#include "maps.h"
#include "clock.h"
#include "parse.h"

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

/* What an event tells of the packet as it arrived. */
struct monitor_tuple {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
};

/* Out of line (lib/common.h), as is monitor_note: their packets' copies are in their own
 * stack frames, not in the program's, which every chain of calls adds to. */
__ferry_global int monitor_event(struct __ctx_buff *ctx, const struct monitor_tuple *in, __u32 flags, int verdict, __u8 hook)
{
	struct ferry_scratch *s = scratch();
	struct ferry_event *e;
	struct pkt4 out;
	__u32 type;

	ctx_keep(ctx);
	if (!in || !s)
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
	e->saddr = in->saddr;
	e->daddr = in->daddr;
	e->sport = in->sport;
	e->dport = in->dport;
	e->proto = in->proto;
	e->hook = hook;
	e->ifindex = ctx_ifindex(ctx);
	e->verdict = verdict;
	if (type == EVENT_TRACE && parse_ipv4(ctx, &out) == PARSE_OK) {
		e->out_saddr = out.saddr;
		e->out_daddr = out.daddr;
		e->out_sport = out.sport;
		e->out_dport = out.dport;
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* What a monitored packet looked like on arrival, while a monitor asks. */
struct monitor_ctx {
	__u32 flags;
	int have;
	struct monitor_tuple in;
};

/* A monitored packet's tuple as it arrived; 1 when it is IPv4 with one. */
__ferry_global int monitor_note(struct __ctx_buff *ctx, struct monitor_tuple *t)
{
	struct pkt4 in;

	ctx_keep(ctx);
	if (!t || parse_ipv4(ctx, &in) != PARSE_OK)
		return 0;
	*t = (struct monitor_tuple){ .saddr = in.saddr, .daddr = in.daddr, .sport = in.sport, .dport = in.dport, .proto = in.proto };
	return 1;
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
	m->have = monitor_note(ctx, &m->in);
}

/* After: report the verdict, if a monitor asks for this kind of event. */
static __always_inline int monitor_end(struct __ctx_buff *ctx, const struct monitor_ctx *m, int verdict, __u8 hook)
{
	if (m->have)
		monitor_event(ctx, &m->in, m->flags, verdict, hook);
	return verdict;
}

#endif
