/* Ones' complement arithmetic for the Internet checksum (RFC 1071, RFC 1624), on 32-bit
 * partial sums. Words are summed as they lie in memory, so the byte order takes care of
 * itself. */
#ifndef FERRY_LIB_CSUM_H
#define FERRY_LIB_CSUM_H

#include <linux/types.h>

/* a + b with the end-around carry. */
static __always_inline __u32 csum32_add(__u32 a, __u32 b)
{
	__u32 s = a + b;

	return s + (s < b);
}

/* A partial sum after a 32-bit word changed from `from` to `to`. */
static __always_inline __u32 csum32_replace(__u32 sum, __u32 from, __u32 to)
{
	return csum32_add(csum32_add(sum, ~from), to);
}

/* The partial sum of the change from one 16-byte address (IPv6) to another. */
static __always_inline __u32 csum_diff16(const __u8 *from, const __u8 *to)
{
	const __u32 *f = (const __u32 *)from, *t = (const __u32 *)to;
	__u32 diff = 0;

	diff = csum32_replace(diff, f[0], t[0]);
	diff = csum32_replace(diff, f[1], t[1]);
	diff = csum32_replace(diff, f[2], t[2]);
	return csum32_replace(diff, f[3], t[3]);
}

/* `acc` plus the change from one 16-byte address to another, in 64 bits (the carries are
 * folded once, by csum64_fold: a chain of csum32_replace keeps more values live than BPF
 * has registers when both addresses change, and the compiler spills them to the stack).
 * For one address csum_diff16 stays the smaller: built on this, it took nodeport6_ingress's
 * frame from 336 to 360 bytes, past its call chain's room. */
static __always_inline __u64 csum64_diff16(__u64 acc, const __u8 *from, const __u8 *to)
{
	const __u32 *f = (const __u32 *)from, *t = (const __u32 *)to;

	acc += (__u32)~f[0];
	acc += t[0];
	acc += (__u32)~f[1];
	acc += t[1];
	acc += (__u32)~f[2];
	acc += t[2];
	acc += (__u32)~f[3];
	return acc + t[3];
}

/* A 64-bit sum of 32-bit words (at most 2^32 of them) as a 32-bit partial sum. */
static __always_inline __u32 csum64_fold(__u64 acc)
{
	acc = (acc & 0xffffffff) + (acc >> 32);
	acc = (acc & 0xffffffff) + (acc >> 32);
	return (__u32)acc;
}

/* A partial sum folded to 16 bits and complemented: the checksum field's value. */
static __always_inline __u16 csum_fold32(__u32 csum)
{
	csum = (csum & 0xffff) + (csum >> 16);
	csum = (csum & 0xffff) + (csum >> 16);
	return (__u16)~csum;
}

#endif
