// tc clsact attachment (ingress or egress) through libbpf's bpf_tc_* API. The clsact qdisc
// is destroyed on detach only if this link created it; filters of others are left alone.
import { libc } from '../sys/libc.js';
import { ErrorCode, FerryError, errnoError, errnoName } from '../errors.js';
import { BPF_TC_EGRESS, BPF_TC_INGRESS, TC_HOOK_SIZE, TC_OPTS_SIZE, libbpf, type TcHook, type TcOpts } from './libbpf.js';
import { NetnsLink, type Link } from './link.js';
import type { Program } from './object.js';

export type TcDirection = 'ingress' | 'egress';

export interface TcAttachOptions {
  /** Interface name, resolved in the calling thread's network namespace. */
  ifname: string;
  direction: TcDirection;
  /** Filter priority; ferry's default keeps it ahead of typical CNI filters. */
  priority?: number;
  handle?: number;
}

export const DEFAULT_TC_PRIORITY = 1;
export const DEFAULT_TC_HANDLE = 0xf3;

/** ifindex of an interface in the current network namespace. */
export function ifindexOf(ifname: string): number {
  const idx = libc().ifNameToIndex(ifname);
  if (idx === 0) {
    throw new FerryError({ code: ErrorCode.NotFound, op: `find interface ${ifname}`, cause: 'no such device in this network namespace', hint: 'check the device name (ip link)' });
  }
  return idx;
}

class TcLink extends NetnsLink {
  constructor(
    program: string,
    where: string,
    private readonly hook: TcHook,
    private readonly opts: TcOpts,
    private readonly createdHook: boolean,
  ) {
    super(program, where);
  }

  get what(): string {
    return `tc link ${this.program} at ${this.where}`;
  }

  protected detach(): void {
    const lb = libbpf();
    const rc = lb.tcDetach(this.hook, { ...this.opts, prog_fd: 0, prog_id: 0, flags: 0 });
    // ENOENT/ENODEV: the filter or the device is already gone, which is what we wanted.
    if (rc < 0 && !['ENOENT', 'ENODEV'].includes(errnoName(rc))) {
      throw errnoError(`detach ${this.what}`, rc, ErrorCode.Attach);
    }
    if (this.createdHook) {
      const rcHook = lb.tcHookDestroy({ ...this.hook, attach_point: BPF_TC_INGRESS | BPF_TC_EGRESS });
      if (rcHook < 0 && !['ENOENT', 'ENODEV'].includes(errnoName(rcHook))) {
        throw errnoError(`remove the clsact qdisc of ${this.where}`, rcHook, ErrorCode.Attach);
      }
    }
  }
}

export function attachTc(program: Pick<Program, 'name' | 'fd'>, o: TcAttachOptions): Link {
  const lb = libbpf();
  const ifindex = ifindexOf(o.ifname);
  const where = `tc ${o.direction} ${o.ifname} (ifindex ${ifindex})`;
  const op = `attach ${program.name} to ${where}`;
  const hook: TcHook = { sz: TC_HOOK_SIZE, ifindex, attach_point: o.direction === 'ingress' ? BPF_TC_INGRESS : BPF_TC_EGRESS, parent: 0 };
  const rcHook = lb.tcHookCreate({ ...hook, attach_point: BPF_TC_INGRESS | BPF_TC_EGRESS });
  const created = rcHook === 0;
  if (rcHook < 0 && errnoName(rcHook) !== 'EEXIST') throw errnoError(op, rcHook, ErrorCode.Attach);
  const opts: TcOpts = {
    sz: TC_OPTS_SIZE,
    prog_fd: program.fd,
    flags: 1, // BPF_TC_F_REPLACE: re-attaching ferry's own filter after a restart replaces it
    prog_id: 0,
    handle: o.handle ?? DEFAULT_TC_HANDLE,
    priority: o.priority ?? DEFAULT_TC_PRIORITY,
  };
  const rc = lb.tcAttach(hook, opts);
  if (rc < 0) {
    if (created) lb.tcHookDestroy({ ...hook, attach_point: BPF_TC_INGRESS | BPF_TC_EGRESS });
    throw errnoError(op, rc, ErrorCode.Attach);
  }
  return new TcLink(program.name, where, hook, opts, created);
}

/** Errors that mean there is no such filter (or device, or hook). */
const NO_FILTER = ['ENOENT', 'ENODEV', 'EINVAL'];

/** The hook and the filter at ferry's handle and priority (or those given) on a device, in the calling thread's netns. */
function filterAt(ifname: string, direction: TcDirection, o: { handle?: number; priority?: number }): { hook: TcHook; opts: TcOpts } {
  const hook: TcHook = { sz: TC_HOOK_SIZE, ifindex: ifindexOf(ifname), attach_point: direction === 'ingress' ? BPF_TC_INGRESS : BPF_TC_EGRESS, parent: 0 };
  return { hook, opts: { sz: TC_OPTS_SIZE, prog_fd: 0, flags: 0, prog_id: 0, handle: o.handle ?? DEFAULT_TC_HANDLE, priority: o.priority ?? DEFAULT_TC_PRIORITY } };
}

/**
 * Detach the filter at ferry's handle and priority from a device (in the calling thread's
 * netns), whoever attached it: uninstall, after the agent is gone. false: there was none.
 */
export function detachTcFilter(ifname: string, direction: TcDirection, o: { handle?: number; priority?: number } = {}): boolean {
  const { hook, opts } = filterAt(ifname, direction, o);
  const rc = libbpf().tcDetach(hook, opts);
  if (rc === 0) return true;
  if (NO_FILTER.includes(errnoName(rc))) return false;
  throw errnoError(`detach the tc ${direction} filter of ${ifname}`, rc, ErrorCode.Attach);
}

/**
 * The id of the program in the filter at ferry's handle and priority (or those given) on a
 * device's tc hook, in the calling thread's netns; undefined when there is none.
 */
export function tcFilterProgramId(ifname: string, direction: TcDirection, o: { handle?: number; priority?: number } = {}): number | undefined {
  const { hook, opts } = filterAt(ifname, direction, o);
  const rc = libbpf().tcQuery(hook, opts);
  if (rc === 0) return opts.prog_id;
  if (NO_FILTER.includes(errnoName(rc))) return undefined;
  throw errnoError(`read the tc ${direction} filter of ${ifname}`, rc, ErrorCode.Attach);
}
