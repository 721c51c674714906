/* The datapath's clock (ferry_now). */
#ifndef FERRY_LIB_CLOCK_H
#define FERRY_LIB_CLOCK_H

#include "maps.h"

/* The clock of lifetimes and once-a-second decisions: CLOCK_MONOTONIC as the last tick
 * left it (at most a tick, 1-4 ms, behind), which the agent reads as CLOCK_MONOTONIC; a
 * tick is nothing against lifetimes of seconds. bpf_ktime_get_coarse_ns is a helper call
 * (its time read under a sequence lock, then converted) that took 6% of an established
 * flow's program time (bench/packet-profile.ts), for a value that moves once a tick; the
 * tick count (bpf_jiffies64) the verifier turns into one load. So each CPU keeps the value
 * with the tick it was read in and reads the clock again only when the tick moved: the
 * same value, unless a packet meets the instant between the tick count's step and the
 * clock's, when its CPU keeps the older reading one tick more. */
static __always_inline __u64 ferry_now(void)
{
	struct ferry_scratch *s = scratch();
	__u64 tick = bpf_jiffies64();

	if (unlikely(!s))
		return bpf_ktime_get_coarse_ns();
	if (s->clock_jiffies != tick || !s->clock_ns) {
		s->clock_ns = bpf_ktime_get_coarse_ns();
		s->clock_jiffies = tick;
	}
	return s->clock_ns;
}

#endif
