// ferry's tc programs on a device, by either of the kernel's two ways (tcAttach):
// - tcx (Linux 6.6+, the default where the kernel has it): ferry's program first in the
//   device's tcx list; per packet the kernel calls it directly (link-tcx.ts);
// - clsact: a cls_bpf filter at ferry's handle and priority (link-tc.ts), for older kernels.
// Either way the attachment outlives the agent and the next agent's takes its place in one
// step. What an earlier agent left in the other way (a node upgraded from a clsact build, or
// the setting changed) is taken off once this one's is in place, so no packet finds neither.
import { ErrorCode, FerryError } from '../errors.js';
import { attachTc, detachTcFilter, type TcDirection } from '../ebpf/link-tc.js';
import { attachTcx, detachTcxProgram, tcxProgramsNamed, tcxSupported } from '../ebpf/link-tcx.js';
import type { Link } from '../ebpf/link.js';
import type { Program } from '../ebpf/object.js';
import { HANDOVER_TC, TC_PROGRAM } from './tc-places.js';

export const TC_ATTACH_SETTINGS = ['auto', 'tcx', 'clsact'] as const;
/** auto: tcx where the kernel has it, else clsact. */
export type TcAttachSetting = (typeof TC_ATTACH_SETTINGS)[number];
export type TcAttachMode = 'tcx' | 'clsact';

/** The way a setting attaches on this kernel; tcx asked of a kernel without it is an error. */
export function tcAttachMode(setting: TcAttachSetting = 'auto'): TcAttachMode {
  if (setting === 'clsact') return 'clsact';
  if (tcxSupported()) return 'tcx';
  if (setting === 'tcx') throw new FerryError({ code: ErrorCode.Config, op: 'attach the tc programs', cause: 'this kernel has no tcx hooks (Linux 6.6 brought them)', hint: 'set tcAttach to auto or clsact' });
  return 'clsact';
}

const DIRECTIONS: readonly TcDirection[] = ['ingress', 'egress'];

/**
 * Attach `programs` to a device's tc hooks (in the calling thread's netns). `chained`: an
 * upgrade's switch keeps the previous programs behind these (handover-chain.ts), so they
 * are left where they are; otherwise ferry's programs an earlier agent left are replaced,
 * and those it left in the other way, or behind its own in a switch it died in, go.
 */
export function attachTcHooks(programs: Record<TcDirection, Program>, ifname: string, mode: TcAttachMode, chained: boolean): Link[] {
  const links: Link[] = [];
  try {
    for (const direction of DIRECTIONS) {
      const program = programs[direction];
      if (mode === 'clsact') {
        links.push(attachTc(program, { ifname, direction }));
        if (!chained) detachTcFilter(ifname, direction, HANDOVER_TC);
        if (!chained && tcxSupported()) for (const id of tcxProgramsNamed(ifname, direction, TC_PROGRAM[direction])) detachTcxProgram(ifname, direction, id);
        continue;
      }
      const earlier = chained ? [] : tcxProgramsNamed(ifname, direction, TC_PROGRAM[direction]);
      const link = attachTcx(program, earlier.length ? { ifname, direction, replace: earlier[0]! } : { ifname, direction, position: 'first' });
      links.push(link);
      if (chained) continue;
      for (const id of earlier) if (id !== link.id) detachTcxProgram(ifname, direction, id);
      detachTcFilter(ifname, direction);
      detachTcFilter(ifname, direction, HANDOVER_TC);
    }
  } catch (e) {
    for (const l of links.reverse()) l.close();
    throw e;
  }
  return links;
}
