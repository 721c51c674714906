/* Base types for every struct shared with user space.
 *
 * Rules for bpf/shared (checked against the TypeScript codecs through BTF):
 * byte order in the type (__be16/__be32), explicit padding, no bitfields, constants as
 * C enums so they reach BTF. Retired fields and codes stay reserved.
 */
#ifndef FERRY_SHARED_TYPES_H
#define FERRY_SHARED_TYPES_H

#include <linux/types.h>

#endif
