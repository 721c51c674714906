// tcx: the kernel's own BPF hooks at tc ingress and egress (Linux 6.6+). Each hook holds an
// ordered list of programs that run before any clsact filter, with none of cls_bpf's
// classifier around them: per packet, tcx_run calls the program and that is all, where a
// clsact filter goes through tc_run, tcf_classify and cls_bpf_classify (bench/pps-node.ts's
// --profile shows what that costs). A program's verdict means the same in both: TC_ACT_UNSPEC
// (tcx's "next") hands the packet to the next program, then to the clsact filters.
//
// Attached without a BPF link (BPF_PROG_ATTACH), as a tc filter is: it stays when this
// process exits, so traffic flows across an agent's restart, and the next agent replaces it
// in one step (BPF_F_REPLACE). The list is per device and direction; ferry finds its own
// programs in it by their names.
import { ErrorCode, errnoError, errnoName } from '../errors.js';
import { libbpf } from './libbpf.js';
import { NetnsLink, type Link } from './link.js';
import { programNameById } from './link-xdp.js';
import { kernelStruct } from './skb-context.js';
import { ifindexOf, type TcDirection } from './link-tc.js';
import type { Program } from './object.js';

/** linux/bpf.h enum bpf_attach_type. */
export const BPF_TCX = { ingress: 46, egress: 47 } as const satisfies Record<TcDirection, number>;
/** linux/bpf.h generic attach flags. */
const BPF_F_REPLACE = 1 << 2;
const BPF_F_BEFORE = 1 << 3;
const BPF_F_AFTER = 1 << 4;
/** More programs than any device carries; the kernel's own limit is 64. */
const MAX_LISTED = 64;

let supported: boolean | undefined;

/** Does this kernel have tcx? (A query of loopback's list: kernels before 6.6 know no such attach type.) */
export function tcxSupported(): boolean {
  if (supported === undefined) supported = libbpf().progQuery(1, BPF_TCX.ingress, new Uint32Array(MAX_LISTED)).rc === 0;
  return supported;
}

/** The programs in a device's tcx list, in the order they run (in the calling thread's netns). */
export function tcxProgramIds(ifname: string, direction: TcDirection): number[] {
  const ids = new Uint32Array(MAX_LISTED);
  const { rc, count } = libbpf().progQuery(ifindexOf(ifname), BPF_TCX[direction], ids);
  if (rc < 0) throw errnoError(`list the tcx ${direction} programs of ${ifname}`, rc, ErrorCode.Attach);
  return [...ids.subarray(0, Math.min(count, MAX_LISTED))];
}

/** The programs of a device's tcx list named `name` (ferry's, by the names it loads them under). */
export function tcxProgramsNamed(ifname: string, direction: TcDirection, name: string): number[] {
  return tcxProgramIds(ifname, direction).filter((id) => programNameById(id) === name);
}

/** A program's id, from its fd. */
function programId(fd: number): number {
  const at = kernelStruct('bpf_prog_info').offset('id');
  const info = Buffer.alloc(at + 4); // the kernel fills what the buffer holds
  const rc = libbpf().objGetInfoByFd(fd, info);
  if (rc < 0) throw errnoError('read a program id', rc, ErrorCode.Attach);
  return info.readUInt32LE(at);
}

class TcxLink extends NetnsLink {
  constructor(
    program: string,
    where: string,
    private readonly ifindex: number,
    private readonly direction: TcDirection,
    readonly id: number,
  ) {
    super(program, where);
  }

  get what(): string {
    return `tcx link ${this.program} at ${this.where}`;
  }

  protected detach(): void {
    detachTcxById(this.ifindex, this.direction, this.id, this.what);
  }
}

function detachTcxById(ifindex: number, direction: TcDirection, id: number, what: string): boolean {
  const lb = libbpf();
  const fd = lb.progGetFdById(id);
  if (fd < 0) return false; // the program is gone, so it is attached nowhere
  try {
    const rc = lb.progDetach(fd, ifindex, BPF_TCX[direction]);
    // ENOENT/ENODEV: not in the list (any more), or the device is gone.
    if (rc < 0 && !['ENOENT', 'ENODEV'].includes(errnoName(rc))) throw errnoError(`detach ${what}`, rc, ErrorCode.Attach);
    return rc === 0;
  } finally {
    lb.close(fd);
  }
}

/** Take a program off a device's tcx list (in the calling thread's netns). false: it was not there. */
export function detachTcxProgram(ifname: string, direction: TcDirection, id: number): boolean {
  return detachTcxById(ifindexOf(ifname), direction, id, `tcx ${direction} program ${id} of ${ifname}`);
}

export interface TcxAttachOptions {
  ifname: string;
  direction: TcDirection;
  /** Where in the list: ahead of every other program, or behind them. */
  position?: 'first' | 'last';
  /** A program of the list (its id) that this one takes the place of, in one step. */
  replace?: number;
}

/** Attach a program to a device's tcx hook (in the calling thread's netns). */
export function attachTcx(program: Pick<Program, 'name' | 'fd'>, o: TcxAttachOptions): Link & { readonly id: number } {
  const lb = libbpf();
  const ifindex = ifindexOf(o.ifname);
  const where = `tcx ${o.direction} ${o.ifname} (ifindex ${ifindex})`;
  const id = programId(program.fd);
  const link = (): TcxLink => new TcxLink(program.name, where, ifindex, o.direction, id);
  if (o.replace === id) return link(); // already in that place
  let rc: number;
  if (o.replace !== undefined) {
    const old = lb.progGetFdById(o.replace);
    if (old < 0) throw errnoError(`attach ${program.name} to ${where} in place of program ${o.replace}`, old, ErrorCode.Attach);
    try {
      rc = lb.progAttach(program.fd, ifindex, BPF_TCX[o.direction], BPF_F_REPLACE, old);
    } finally {
      lb.close(old);
    }
  } else {
    rc = lb.progAttach(program.fd, ifindex, BPF_TCX[o.direction], o.position === 'last' ? BPF_F_AFTER : BPF_F_BEFORE, 0);
  }
  if (rc < 0) throw errnoError(`attach ${program.name} to ${where}`, rc, ErrorCode.Attach);
  return link();
}
