/* Wire formats the kernel's UAPI headers would only give through the C library.
 *
 * <linux/icmp.h> includes <linux/if.h>, which includes glibc's <sys/socket.h>; under
 * -target bpf glibc then wants its 32-bit stubs. The objects are built with -nostdinc
 * (src/build/compile.ts), so the ICMP header and codes ferry uses are defined here, from
 * RFC 792 and RFC 1191. */
#ifndef FERRY_LIB_WIRE_H
#define FERRY_LIB_WIRE_H

#include <linux/types.h>

#define ICMP_ECHOREPLY 0
#define ICMP_DEST_UNREACH 3
#define ICMP_ECHO 8
#define ICMP_TIME_EXCEEDED 11
#define ICMP_PARAMETERPROB 12

/* Codes of ICMP_DEST_UNREACH. */
#define ICMP_PORT_UNREACH 3
#define ICMP_FRAG_NEEDED 4

/* Codes of ICMP_TIME_EXCEEDED. */
#define ICMP_EXC_TTL 0

struct icmphdr {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	union {
		struct {
			__be16 id;
			__be16 sequence;
		} echo;
		__be32 gateway;
		struct {
			__be16 __unused;
			__be16 mtu;
		} frag;
		__u8 reserved[4];
	} un;
};

#endif
