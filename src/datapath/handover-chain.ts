// An upgrade's switch across layouts: the previous build's tc programs stay attached behind
// this build's (the next tc priority, which sees what the first passes) until the last
// copy, so that a packet of a flow they made and the agent has not copied yet is passed to
// them, which place it from their own maps (lib/snat.h, handover_unplaced), not dropped.
import { libbpf } from '../ebpf/libbpf.js';
import { DEFAULT_TC_PRIORITY, attachTc, detachTcFilter, tcFilterProgramId, type TcDirection } from '../ebpf/link-tc.js';
import type { Link } from '../ebpf/link.js';
import { HandoverFlags } from './layouts.js';

/** Where the previous programs wait during a switch: right behind ferry's filter. */
export const HANDOVER_TC = { handle: 0xf4, priority: DEFAULT_TC_PRIORITY + 1 } as const;

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
export function chainPreviousPrograms(devices: readonly string[]): HandoverChain {
  const lb = libbpf();
  const links: Link[] = [];
  const none = (reason: string): HandoverChain => {
    for (const l of links.reverse()) l.close();
    return { links: [], reason };
  };
  try {
    for (const ifname of devices) {
      for (const direction of DIRECTIONS) {
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

/** A chain an agent that died in its switch left on a device (nothing if there is none). */
export function removeChain(ifname: string, direction?: TcDirection): void {
  for (const d of direction ? [direction] : DIRECTIONS) detachTcFilter(ifname, d, HANDOVER_TC);
}
