/* Includes and small helpers every datapath program uses. */
#ifndef FERRY_LIB_COMMON_H
#define FERRY_LIB_COMMON_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/icmp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <stddef.h>

#ifndef AF_INET
#define AF_INET 2
#endif

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define NSEC_PER_SEC 1000000000ULL

#endif
