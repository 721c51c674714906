/* Includes and small helpers every datapath program uses. Only kernel UAPI, libbpf and
 * ferry's own headers: the objects are built with -nostdinc. */
#ifndef FERRY_LIB_COMMON_H
#define FERRY_LIB_COMMON_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "wire.h"

/* No C library and no compiler headers (-nostdinc): what they would give, from builtins. */
#ifndef offsetof
#define offsetof(type, member) __builtin_offsetof(type, member)
#endif

#ifndef AF_INET
#define AF_INET 2
#endif

#ifndef PACKET_HOST
#define PACKET_HOST 0 /* skb->pkt_type: addressed to this host (linux/if_packet.h) */
#endif

#ifndef PACKET_OTHERHOST
#define PACKET_OTHERHOST 3 /* skb->pkt_type: addressed to another host (linux/if_packet.h) */
#endif

/* A stage of a packet's path out of line: a global function, reached by a BPF-to-BPF call.
 * The verifier checks it once, on its own, for any arguments of its prototype (so it
 * null-checks its pointers), rather than again on every path that reaches it (inlined,
 * tc_ingress took 59% of the verifier's limit, now 3%); its stack frame is its own (the
 * frames of a chain of calls share 512 bytes, so the program's own stays small); and the
 * code of paths few packets take (new flows, ICMP, fragments, ARP) is not laid out among
 * the instructions of those that do not take them. Not static: the verifier checks a
 * static subprogram as if it were inlined. */
#define __ferry_global __attribute__((noinline))

/* A global function's ctx is used in every build: one the compiler sees unused (a stage
 * build returning early, below) it may pass as garbage, which the verifier refuses. */
#define ctx_keep(ctx) asm volatile("" : : "r"(ctx))

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define NSEC_PER_SEC 1000000000ULL

/* Markers along a packet's path for bench/packet-stages.ts, which builds the program with
 * FERRY_STAGE_STOP=n to return at marker n and so time the path up to it. Nothing in any
 * other build. */
#ifdef FERRY_STAGE_STOP
#define STAGE_STOP_VERDICT CTX_ACT_OK /* what a stop returns (a subprogram may say otherwise) */
#define STAGE_END(n)                                \
	do {                                        \
		if ((n) == FERRY_STAGE_STOP)        \
			return STAGE_STOP_VERDICT;  \
	} while (0)
#else
#define STAGE_END(n) do { } while (0)
#endif

#endif
