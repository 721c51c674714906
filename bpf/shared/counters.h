/* Packet and byte counters, kept per CPU and summed in user space. */
#ifndef FERRY_SHARED_COUNTERS_H
#define FERRY_SHARED_COUNTERS_H

#include "types.h"

struct ferry_counter {
	__u64 packets;
	__u64 bytes;
};

#endif
