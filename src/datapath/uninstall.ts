// Taking ferry off a node once its agent is gone: the XDP programs and tc filters on every
// device (the agent leaves them attached so that traffic flows across restarts), the socket hooks
// (pinned links: unpinned, they detach when no process holds them), and every pin. Without
// this, deleting the DaemonSet would leave ClusterIPs steered to stale backends until a
// reboot.
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { detachTcFilter, type TcDirection } from '../ebpf/link-tc.js';
import { detachXdpDevice } from '../ebpf/link-xdp.js';
import { detachTcxProgram } from '../ebpf/link-tcx.js';
import { inNetns } from '../sys/netns.js';
import { attachedPrograms } from './attachments.js';
import { HANDOVER_TC } from './handover-chain.js';

export interface UninstallReport {
  /** `tc ingress eth0`, … */
  tcFilters: string[];
  /** `xdp/native eth0`, … */
  xdpPrograms: string[];
  /** Pinned cgroup links removed (the hooks detach with them once no agent holds them). */
  cgroupLinks: string[];
  /** Pins removed (maps, links) and whether the pin directory is gone. */
  pins: number;
  pinDirRemoved: boolean;
  /** ferry's programs still attached afterwards (a tc filter at another handle or priority than ferry's). */
  left: string[];
}

/** ferry's tc filters and tcx programs (in `netns`, or this one), by device and direction. */
function ferryTcFilters(netns?: string): Array<{ ifname: string; direction: TcDirection; tcx?: number }> {
  return attachedPrograms(netns)
    .filter((a) => a.where.startsWith('tc ') || a.where.startsWith('tcx '))
    .map((a) => {
      const [kind, direction, ifname] = a.where.split(' ');
      return { ifname: ifname!, direction: direction as TcDirection, ...(kind === 'tcx' ? { tcx: a.id } : {}) };
    });
}
const tcWhere = (f: { ifname: string; direction: TcDirection; tcx?: number }): string => `${f.tcx === undefined ? 'tc' : 'tcx'} ${f.direction} ${f.ifname}`;

/** ferry's XDP programs (in `netns`, or this one): where, and the device. */
function ferryXdp(netns?: string): Array<{ where: string; ifname: string }> {
  return attachedPrograms(netns)
    .filter((a) => a.where.startsWith('xdp/'))
    .map((a) => ({ where: a.where, ifname: a.where.split(' ')[1]! }));
}

export function uninstall(o: { pinDir: string; netns?: string }): UninstallReport {
  const report: UninstallReport = { tcFilters: [], xdpPrograms: [], cgroupLinks: [], pins: 0, pinDirRemoved: false, left: [] };
  const run = <T>(fn: () => T): T => (o.netns ? inNetns(o.netns, fn) : fn());
  for (const x of ferryXdp(o.netns)) {
    if (run(() => detachXdpDevice(x.ifname))) report.xdpPrograms.push(x.where);
  }
  for (const f of ferryTcFilters(o.netns)) {
    // Also a previous build's programs an agent that died in an upgrade's switch left behind ferry's.
    const detach = () => (f.tcx !== undefined ? detachTcxProgram(f.ifname, f.direction, f.tcx) : detachTcFilter(f.ifname, f.direction) || detachTcFilter(f.ifname, f.direction, HANDOVER_TC));
    if (run(detach)) report.tcFilters.push(tcWhere(f));
  }
  report.left = [...ferryXdp(o.netns).map((x) => x.where), ...ferryTcFilters(o.netns).map(tcWhere)];
  if (existsSync(o.pinDir)) {
    const pins = readdirSync(o.pinDir);
    report.cgroupLinks = pins.filter((p) => p.startsWith('link_'));
    report.pins = pins.length;
    rmSync(o.pinDir, { recursive: true, force: true });
    report.pinDirRemoved = !existsSync(o.pinDir);
  }
  return report;
}

/** What uninstall would take off, without touching it. */
export function uninstallPlan(o: { pinDir: string; netns?: string }): { xdpPrograms: string[]; tcFilters: string[]; pins: string[] } {
  return { xdpPrograms: ferryXdp(o.netns).map((x) => x.where), tcFilters: ferryTcFilters(o.netns).map(tcWhere), pins: existsSync(o.pinDir) ? readdirSync(o.pinDir).map((p) => join(o.pinDir, p)) : [] };
}
