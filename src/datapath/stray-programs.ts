// ferry's programs on devices this agent does not serve. tc filters and XDP programs outlive
// the agent that attached them (so traffic flows across restarts), so a device that an
// earlier agent served and this one does not choose (taken out of `devices`, or no longer
// carrying the node's addresses) would keep them: Service traffic arriving there would
// still be balanced, against the operator's choice, and after an upgrade across layouts by
// programs whose maps nobody writes any more. At its start the agent takes them off. Only
// programs by ferry's names at ferry's places are touched (its filter, the upgrade chain's
// behind it, ferry's programs by name in a tcx list, and XDP): another user's filter is not
// ferry's to remove.
import { DEFAULT_TC_HANDLE, DEFAULT_TC_PRIORITY, detachTcFilter, tcFilterProgramId, type TcDirection } from '../ebpf/link-tc.js';
import { detachXdpDevice, programNameById, xdpAttached } from '../ebpf/link-xdp.js';
import { detachTcxProgram, tcxProgramsNamed, tcxSupported } from '../ebpf/link-tcx.js';
import { HANDOVER_TC, TC_PROGRAM } from './tc-places.js';
import { XDP_PROGRAM } from './xdp-devices.js';

export { TC_PROGRAM } from './tc-places.js';
const PLACES = [{ handle: DEFAULT_TC_HANDLE, priority: DEFAULT_TC_PRIORITY }, HANDOVER_TC];

export interface StrayReport {
  /** What was taken off: `tc ingress eth1`, `xdp/native eth1`. */
  removed: string[];
  /** Devices that could not be looked at or cleaned, with why (the agent goes on). */
  failed: string[];
}

/**
 * Take ferry's tc filters and XDP programs off every device in `devices` (this network
 * namespace's, in the calling thread) that is not in `served`.
 */
export function detachStrayPrograms(devices: readonly string[], served: ReadonlySet<string>): StrayReport {
  const report: StrayReport = { removed: [], failed: [] };
  for (const ifname of devices) {
    if (served.has(ifname)) continue;
    try {
      for (const direction of ['ingress', 'egress'] as const) {
        for (const place of PLACES) {
          const id = tcFilterProgramId(ifname, direction, place);
          if (id && programNameById(id) === TC_PROGRAM[direction] && detachTcFilter(ifname, direction, place)) {
            report.removed.push(`tc ${direction} ${ifname}${place === HANDOVER_TC ? ' (upgrade chain)' : ''}`);
          }
        }
        if (!tcxSupported()) continue;
        // Behind the first: an upgrade's chain its agent died in.
        for (const [i, id] of tcxProgramsNamed(ifname, direction, TC_PROGRAM[direction]).entries()) {
          if (detachTcxProgram(ifname, direction, id)) report.removed.push(`tcx ${direction} ${ifname}${i > 0 ? ' (upgrade chain)' : ''}`);
        }
      }
      const xdp = xdpAttached(ifname);
      if (xdp && programNameById(xdp.id) === XDP_PROGRAM && detachXdpDevice(ifname)) report.removed.push(`xdp/${xdp.mode} ${ifname}`);
    } catch (e) {
      report.failed.push(`${ifname}: ${(e as Error).message}`);
    }
  }
  return report;
}
