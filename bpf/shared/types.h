/* Base types for every struct shared with user space.
 *
 * Rules for bpf/shared (checked against the TypeScript codecs through BTF):
 * byte order in the type (__be16/__be32), explicit padding, no bitfields, constants as
 * C enums so they reach BTF. Retired fields and codes stay reserved.
 */
#ifndef FERRY_SHARED_TYPES_H
#define FERRY_SHARED_TYPES_H

#include <linux/types.h>

/* The layout of the pinned maps, as a whole. Bump it when a struct in bpf/shared that a
 * pinned map holds changes, and give src/datapath/layout-history.ts the old layout and its
 * converter: an agent upgrading from the previous layout then migrates the live maps
 * instead of refusing them. */
enum ferry_layout {
	FERRY_LAYOUT_VERSION = 6,
};

#endif
