/* tc.bpf.c for kernels without bpf_cast_to_kern_ctx (before Linux 6.2): every L4 checksum
 * goes through the kernel's helper (ctx_l4_csum_whole in bpf/lib/ctx.h is 0). The loader
 * takes this build where the kernel's BTF has no such kfunc (src/datapath/tc-object.ts). */
#define FERRY_NO_KERN_CTX
#include "tc.bpf.c"
