/* The flow hash that picks a backend slot. Mirrored exactly by the TypeScript reference
 * model (src/datapath/reference/hash.ts): inputs are the raw network-order words as the
 * CPU reads them, mixed with Bob Jenkins' lookup3 final() and a per-cluster seed. */
#ifndef FERRY_LIB_HASH_H
#define FERRY_LIB_HASH_H

#include "common.h"

#define FERRY_HASH_INIT 0xdeadbeefU

static __always_inline __u32 rol32(__u32 w, unsigned int s)
{
	return (w << s) | (w >> (32 - s));
}

static __always_inline __u32 hash_final(__u32 a, __u32 b, __u32 c)
{
	c ^= b; c -= rol32(b, 14);
	a ^= c; a -= rol32(c, 11);
	b ^= a; b -= rol32(a, 25);
	c ^= b; c -= rol32(b, 16);
	a ^= c; a -= rol32(c, 4);
	b ^= a; b -= rol32(a, 14);
	c ^= b; c -= rol32(b, 24);
	return c;
}

static __always_inline __u32 flow_hash4(__be32 saddr, __be32 daddr, __be16 sport, __be16 dport, __u8 proto, __u32 seed)
{
	__u32 init = FERRY_HASH_INIT + seed;

	return hash_final((__u32)saddr + init, (__u32)daddr + init,
			  ((__u32)sport | ((__u32)dport << 16)) + proto + init);
}

#endif
