/* Test-only shared layout, following the bpf/shared rules. */
#ifndef FERRY_TESTS_MAP_KINDS_H
#define FERRY_TESTS_MAP_KINDS_H

#include "shared/types.h"

struct test_flow_key {
	__be32 addr;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

struct test_flow_value {
	__u64 created_ns;
	__u32 hits;
	__u32 state;
};

#endif
