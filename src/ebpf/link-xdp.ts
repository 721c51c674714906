// XDP attachments. Two kinds:
// - attachXdp: a BPF link, detached when the link closes (tests);
// - attachXdpDevice: through netlink in a given mode, native (the driver runs it) or generic
//   (the kernel runs it on the skb). Like a tc filter it stays after the process exits, and
//   the next attach replaces it: the agent's datapath outlives the agent.
import { ErrorCode, FerryError, errnoError, errnoName } from '../errors.js';
import { libbpf } from './libbpf.js';
import { kernelStruct } from './skb-context.js';
import { linkNames } from '../sys/links.js';
import { ifindexOf } from './link-tc.js';
import { BpfLink, NetnsLink, type Link } from './link.js';
import type { Program } from './object.js';

export function attachXdp(program: Program, ifname: string): BpfLink {
  const ifindex = ifindexOf(ifname);
  const where = `xdp ${ifname} (ifindex ${ifindex})`;
  const lb = libbpf();
  const h = lb.programAttachXdp(program.handle, ifindex);
  if (!h) throw errnoError(`attach ${program.name} to ${where}`, lb.errno(), ErrorCode.Attach);
  return new BpfLink(program.name, where, h);
}

/** native: run by the driver, before any skb exists; generic: run by the kernel on the skb. */
export type XdpMode = 'native' | 'generic';

/** linux/if_link.h XDP_FLAGS_*. */
export const XDP_FLAGS = { SKB_MODE: 1 << 1, DRV_MODE: 1 << 2 } as const;
const modeFlag = (m: XdpMode) => (m === 'native' ? XDP_FLAGS.DRV_MODE : XDP_FLAGS.SKB_MODE);

/** The program attached to a device and its mode, if any (in the calling thread's netns). */
export function xdpAttached(ifname: string): { mode: XdpMode; id: number } | undefined {
  const ifindex = ifindexOf(ifname);
  for (const mode of ['native', 'generic'] as const) {
    const { rc, id } = libbpf().xdpQueryId(ifindex, modeFlag(mode));
    if (rc < 0) throw errnoError(`query the xdp program of ${ifname}`, rc, ErrorCode.Attach);
    if (id) return { mode, id };
  }
  return undefined;
}

/** The name of a loaded program, by its id ('' if it is gone). */
export function programNameById(id: number): string {
  const lb = libbpf();
  const fd = lb.progGetFdById(id);
  if (fd < 0) return '';
  try {
    const layout = kernelStruct('bpf_prog_info');
    const at = layout.offset('name');
    // Up to the name: the kernel fills what the buffer holds.
    const info = Buffer.alloc(at + BPF_OBJ_NAME_LEN);
    if (lb.objGetInfoByFd(fd, info) < 0) return '';
    const name = info.subarray(at, at + BPF_OBJ_NAME_LEN);
    return name.subarray(0, name.indexOf(0) < 0 ? BPF_OBJ_NAME_LEN : name.indexOf(0)).toString();
  } finally {
    lb.close(fd);
  }
}

/** linux/bpf.h: a program's name field, NUL-padded. */
const BPF_OBJ_NAME_LEN = 16;

/** Detach whatever XDP program a device has (uninstall). false: there was none. */
export function detachXdpDevice(ifname: string): boolean {
  const have = xdpAttached(ifname);
  if (!have) return false;
  beneathStacked(ifname, programNameById(have.id), () => {
    const rc = libbpf().xdpDetach(ifindexOf(ifname), modeFlag(have.mode));
    if (rc < 0 && !['ENOENT', 'ENODEV'].includes(errnoName(rc))) throw errnoError(`detach the xdp program of ${ifname}`, rc, ErrorCode.Attach);
  });
  return true;
}

/**
 * The kernel changes no device's XDP, attach or detach, while a device stacked on it (a
 * VLAN, a VXLAN tunnel or a macvlan over it) has XDP: EEXIST. An agent restarting finds its
 * previous programs on both, and the order of a close is not the order of stacking. So
 * `change` (on `ifname`) is made; on EEXIST, programs named `name` (the same program's
 * copies, ferry's own) come off the namespace's other devices, each held open so that it
 * lives, the change is made again, and they go back in their modes. Another program over
 * the device stays, and the error with it.
 */
function beneathStacked<T>(ifname: string, name: string, change: () => T): T {
  try {
    return change();
  } catch (e) {
    if (errnoName((e as FerryError).errno ?? 0) !== 'EEXIST') throw e;
  }
  const lb = libbpf();
  const lifted: Array<{ ifname: string; ifindex: number; mode: XdpMode; fd: number }> = [];
  let changed = false;
  try {
    for (const other of linkNames()) {
      let have: ReturnType<typeof xdpAttached>;
      let ifindex: number;
      try {
        have = other === ifname ? undefined : xdpAttached(other);
        ifindex = ifindexOf(other);
      } catch {
        continue; // gone since the listing
      }
      if (!have || programNameById(have.id) !== name) continue;
      const fd = lb.progGetFdById(have.id);
      if (fd < 0) continue;
      if (lb.xdpDetach(ifindex, modeFlag(have.mode)) < 0) lb.close(fd);
      else lifted.push({ ifname: other, ifindex, mode: have.mode, fd });
    }
    const out = change();
    changed = true;
    return out;
  } finally {
    const failed = lifted.filter((l) => {
      const rc = lb.xdpAttach(l.ifindex, l.fd, modeFlag(l.mode));
      lb.close(l.fd);
      return rc < 0;
    });
    // Thrown only where the change itself went through (else its own error says more).
    if (changed && failed.length) throw new FerryError({ code: ErrorCode.Attach, op: `put the xdp programs of ${failed.map((l) => l.ifname).join(', ')} back`, cause: 'the kernel refused them after a change beneath', hint: 'restart the agent' });
  }
}

class XdpDeviceLink extends NetnsLink {
  constructor(
    program: string,
    where: string,
    private readonly ifname: string,
    private readonly ifindex: number,
    readonly mode: XdpMode,
  ) {
    super(program, where);
  }

  get what(): string {
    return `xdp ${this.program} at ${this.where}`;
  }

  protected detach(): void {
    beneathStacked(this.ifname, this.program, () => {
      const rc = libbpf().xdpDetach(this.ifindex, modeFlag(this.mode));
      if (rc < 0 && !['ENOENT', 'ENODEV'].includes(errnoName(rc))) throw errnoError(`detach ${this.what}`, rc, ErrorCode.Attach);
    });
  }
}

/**
 * Attach in `mode`, replacing the program a previous agent left there. A program attached
 * in the other mode is detached first (a device runs one mode at a time). A driver without
 * native XDP refuses with EOPNOTSUPP, which the error names.
 */
export function attachXdpDevice(program: Program, ifname: string, mode: XdpMode): Link & { mode: XdpMode } {
  const ifindex = ifindexOf(ifname);
  const where = `xdp/${mode} ${ifname} (ifindex ${ifindex})`;
  const lb = libbpf();
  const other = mode === 'native' ? 'generic' : 'native';
  const rc = beneathStacked(ifname, program.name, () => {
    if (xdpAttached(ifname)?.mode === other) {
      const d = lb.xdpDetach(ifindex, modeFlag(other));
      if (d < 0) throw errnoError(`detach the ${other} xdp program of ${ifname}`, d, ErrorCode.Attach);
    }
    const r = lb.xdpAttach(ifindex, program.fd, modeFlag(mode));
    if (r < 0 && errnoName(r) === 'EEXIST') {
      throw new FerryError({ code: ErrorCode.Attach, op: `attach ${program.name} to ${where}`, cause: `a device stacked on ${ifname} has another XDP program (EEXIST)`, hint: 'take it off the VLAN, tunnel or macvlan over the device', errno: -r });
    }
    return r;
  });
  if (rc < 0) {
    const unsupported = errnoName(rc) === 'EOPNOTSUPP';
    throw new FerryError({
      code: unsupported ? ErrorCode.XdpUnsupported : ErrorCode.Attach,
      op: `attach ${program.name} to ${where}`,
      cause: unsupported ? `the driver of ${ifname} has no native XDP (EOPNOTSUPP)` : errnoName(rc),
      hint: unsupported ? 'use acceleration: best-effort (such a device is left to tc, or runs generic XDP if xdpDevices names it) or none' : 'see dmesg for the verifier or driver message',
    });
  }
  return new XdpDeviceLink(program.name, where, ifname, ifindex, mode);
}
