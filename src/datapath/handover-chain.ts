// An upgrade's switch across layouts: the previous build's tc programs stay attached behind
// this build's until the last copy, so that a packet of a flow they made and the agent has
// not copied yet is passed to them, which place it from their own maps (lib/snat.h,
// handover_unplaced), not dropped. With tcx they stay where they are: this build's go in
// ahead of them, and a clsact filter (a previous build that attached so) runs after tcx
// anyway. With clsact they are attached again at the next priority, which sees what the
// first passes, before this build's filter takes the first one's place.
import { libbpf } from '../ebpf/libbpf.js';
import { attachTc, detachTcFilter, tcFilterProgramId, type TcDirection } from '../ebpf/link-tc.js';
import { detachTcxProgram, tcxProgramsNamed, tcxSupported } from '../ebpf/link-tcx.js';
import { programNameById } from '../ebpf/link-xdp.js';
import { NetnsLink, type Link } from '../ebpf/link.js';
import { HANDOVER_TC, TC_PROGRAM } from './tc-places.js';
import { HandoverFlags } from './layouts.js';

export { HANDOVER_TC } from './tc-places.js';

const DIRECTIONS: readonly TcDirection[] = ['ingress', 'egress'];
const CHAINED = BigInt(HandoverFlags.FERRY_HANDOVER_CHAINED);

/** ferry_handover's until_ns: a switch's deadline (0: none), its lowest bit whether the chain waits. */
export function handoverUntil(deadlineNs: bigint, chained: boolean): bigint {
  return deadlineNs === 0n ? 0n : (deadlineNs & ~CHAINED) | (chained ? CHAINED : 0n);
}

export interface HandoverChain {
  /** One per device and direction; empty when the chain could not be made. */
  links: Link[];
  /** Why there is no chain. */
  reason?: string;
}

/**
 * The programs in ferry's filter of every device's tc hooks (the previous build's, before this
 * build replaces them), attached again behind it. All or nothing: a packet passed on where
 * no previous program waits would reach the host, which resets what it does not know.
 */
export function chainPreviousPrograms(devices: readonly string[], mode: 'tcx' | 'clsact' = 'clsact'): HandoverChain {
  const lb = libbpf();
  const links: Link[] = [];
  const none = (reason: string): HandoverChain => {
    for (const l of links.reverse()) l.close();
    return { links: [], reason };
  };
  try {
    for (const ifname of devices) {
      for (const direction of DIRECTIONS) {
        if (mode === 'tcx') {
          const held = holdPrevious(ifname, direction);
          if (!held) return none(`no previous tc ${direction} program on ${ifname}`);
          links.push(held);
          continue;
        }
        removeChain(ifname, direction);
        const id = tcFilterProgramId(ifname, direction);
        if (!id) return none(`no previous tc ${direction} program on ${ifname}`);
        const fd = lb.progGetFdById(id);
        if (fd < 0) return none(`the previous tc ${direction} program of ${ifname} is gone`);
        try {
          links.push(attachTc({ name: `previous tc_${direction} (id ${id})`, fd }, { ifname, direction, ...HANDOVER_TC }));
        } finally {
          lb.close(fd);
        }
      }
    }
  } catch (e) {
    return none((e as Error).message);
  }
  return links.length ? { links } : { links, reason: 'no devices' };
}

/**
 * tcx: the previous program of a direction where it is, held until the switch's end: the
 * first of ferry's in the tcx list (others behind it were left by an agent that died in
 * its own switch, and go now), else ferry's clsact filter.
 */
function holdPrevious(ifname: string, direction: TcDirection): Link | undefined {
  const name = TC_PROGRAM[direction];
  const [first, ...stale] = tcxSupported() ? tcxProgramsNamed(ifname, direction, name) : [];
  for (const id of stale) detachTcxProgram(ifname, direction, id);
  removeChain(ifname, direction); // a clsact chain an agent of that way left
  if (first !== undefined) return new HeldPrevious(`previous ${name} (id ${first})`, ifname, direction, first);
  const id = tcFilterProgramId(ifname, direction);
  return id && programNameById(id) === name ? new HeldPrevious(`previous ${name} (id ${id})`, ifname, direction, 'clsact') : undefined;
}

/**
 * A previous program held where it was attached (tcx). Closed, it goes only from behind a
 * program of ferry's ahead of it in the tcx list: a switch that failed before the new
 * programs went in on this device leaves the previous ones serving, not the device bare.
 */
class HeldPrevious extends NetnsLink {
  constructor(
    program: string,
    private readonly ifname: string,
    private readonly direction: TcDirection,
    /** Its id in the tcx list, or its place: ferry's clsact filter. */
    private readonly held: number | 'clsact',
  ) {
    super(program, `${held === 'clsact' ? 'tc' : 'tcx'} ${direction} ${ifname}`);
  }

  get what(): string {
    return `${this.program} at ${this.where}`;
  }

  protected detach(): void {
    const ferry = tcxProgramsNamed(this.ifname, this.direction, TC_PROGRAM[this.direction]);
    const ahead = this.held === 'clsact' ? ferry.length > 0 : ferry.length > 1 && ferry[0] !== this.held;
    if (!ahead) return;
    if (this.held === 'clsact') detachTcFilter(this.ifname, this.direction);
    else detachTcxProgram(this.ifname, this.direction, this.held);
  }
}

/** A chain an agent that died in its switch left on a device (nothing if there is none). */
export function removeChain(ifname: string, direction?: TcDirection): void {
  for (const d of direction ? [direction] : DIRECTIONS) detachTcFilter(ifname, d, HANDOVER_TC);
}
