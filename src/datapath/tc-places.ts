// Where ferry's tc programs are found: their names, and the clsact places of its filter and
// of an upgrade's chain (the names identify them in a tcx list, which has no places).
import { DEFAULT_TC_PRIORITY, type TcDirection } from '../ebpf/link-tc.js';

/** The programs bpf/tc.bpf.c attaches, by direction (the kernel's names for them; the loader attaches them by these). */
export const TC_PROGRAM: Record<TcDirection, string> = { ingress: 'tc_ingress', egress: 'tc_egress' };

/** Where the previous programs wait during a switch with clsact: right behind ferry's filter. */
export const HANDOVER_TC = { handle: 0xf4, priority: DEFAULT_TC_PRIORITY + 1 } as const;
