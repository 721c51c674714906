/* Events for `ferry monitor`: drops (with their reason) and traces of translations, sent
 * through a ring buffer only while a monitor asks for them (ferry_monitor flags). */
#ifndef FERRY_SHARED_EVENTS_H
#define FERRY_SHARED_EVENTS_H

#include "types.h"

enum ferry_event_type {
	EVENT_DROP = 1,
	EVENT_TRACE = 2,
};

/* ferry_monitor.flags: which events to send. */
enum ferry_monitor_flags {
	MONITOR_DROPS = 1 << 0,
	MONITOR_TRACES = 1 << 1,
};

enum ferry_hook {
	HOOK_TC_INGRESS = 0,
	HOOK_TC_EGRESS = 1,
	HOOK_XDP = 2,
};

struct ferry_monitor {
	__u32 flags; /* enum ferry_monitor_flags */
	__u32 pad;
};

/* Held by the monitor reading the events, renewed while it reads: events are sent only
 * until it lapses, so a monitor killed before it could turn them off leaves them on for
 * seconds, not for good; and a second monitor is refused while another's holds (two
 * readers of one ring buffer would each get some of the events). */
struct ferry_monitor_lease {
	__u64 until_ns; /* CLOCK_MONOTONIC */
	__u32 owner;    /* the monitor's process id, in its own pid namespace */
	__u32 pad;
};

/* An address of either family in an event: IPv6 whole, IPv4 in the first 4 bytes and the
 * rest zero (`family` says which). */
struct ferry_event {
	__u64 ts_ns;
	__u32 type;         /* enum ferry_event_type */
	__u32 reason;       /* drop: enum ferry_drop_reason; trace: enum ferry_stat (the path taken) */
	__u8 saddr[16];     /* the packet as it arrived */
	__u8 daddr[16];
	__u8 out_saddr[16]; /* trace: the packet as it left */
	__u8 out_daddr[16];
	__be16 sport;
	__be16 dport;
	__be16 out_sport;
	__be16 out_dport;
	__u8 proto;
	__u8 hook;          /* enum ferry_hook */
	__u8 family;        /* 4 or 6: the IP version of both tuples */
	__u8 pad;
	__u32 ifindex;
	__u32 verdict;
	__u32 pad2;
};

/* What count_drop/count_stat last recorded on this CPU, for the event of this packet; the
 * packet as it arrived while a monitor asks (monitor_note, lib/monitor.h: in this per-CPU
 * slot rather than on the stack, where an IPv6 tuple would not fit beside the deepest call
 * chain); and this CPU's copy of the coarse clock (ferry_now, lib/clock.h) with the tick it
 * was read in. */
struct ferry_scratch {
	__u32 last_drop;
	__u32 last_stat;
	__u64 clock_jiffies;
	__u64 clock_ns; /* 0: not read yet */
	__u8 in_saddr[16];
	__u8 in_daddr[16];
	__be16 in_sport;
	__be16 in_dport;
	__u8 in_proto;
	__u8 in_family; /* 4 or 6; 0: neither (no event) */
	__u8 in_pad[2];
};

#endif
