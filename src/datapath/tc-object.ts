// Which build of the tc program this kernel loads: tc.bpf.o updates whole L4 checksums in
// place, reading the skb's checksum state through the bpf_cast_to_kern_ctx kfunc (Linux
// 6.2+); tc_compat.bpf.o, the same source without it, leaves every checksum to the kernel's
// helper, for older kernels (the verifier refuses a call to a kfunc the kernel lacks).
import { kernelHasFunc } from '../ebpf/skb-context.js';

export const TC_OBJECT = 'tc.bpf.o';
export const TC_COMPAT_OBJECT = 'tc_compat.bpf.o';

/** The tc object file for the running kernel. */
export function tcObjectFile(): string {
  return kernelHasFunc('bpf_cast_to_kern_ctx') ? TC_OBJECT : TC_COMPAT_OBJECT;
}
