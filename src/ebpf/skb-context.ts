// Test-run contexts (struct __sk_buff for tc, struct xdp_md for XDP) and other kernel
// struct offsets, laid out from the running kernel's BTF rather than written down here.
import { readFileSync } from 'node:fs';
import { Btf, BtfKind } from './btf.js';
import { ErrorCode, FerryError } from '../errors.js';

let kernel: Btf | undefined;

/** A kernel struct's size and the byte offset of each named member (kernel BTF). */
export function kernelStruct(name: string): { size: number; offset(member: string): number } {
  kernel ??= Btf.parse(readFileSync('/sys/kernel/btf/vmlinux'));
  const s = kernel.struct(name);
  if (!s) throw new FerryError({ code: ErrorCode.NotFound, op: `lay out struct ${name}`, cause: `kernel BTF has no struct ${name}` });
  return {
    size: s.size,
    offset: (member) => {
      const m = s.members.find((x) => x.name === member);
      if (!m) throw new FerryError({ code: ErrorCode.NotFound, op: `lay out struct ${name}`, cause: `struct ${name} has no ${member}` });
      return m.bitOffset / 8;
    },
  };
}

/** Does the kernel's BTF have a function (a kfunc programs may call) of this name? */
export function kernelHasFunc(name: string): boolean {
  kernel ??= Btf.parse(readFileSync('/sys/kernel/btf/vmlinux'));
  return kernel.types.some((t) => t.kind === BtfKind.Func && t.name === name);
}

export function skbContext(fields: { ifindex?: number; mark?: number }): Buffer {
  const skb = kernelStruct('__sk_buff');
  const ctx = Buffer.alloc(skb.size);
  if (fields.ifindex !== undefined) ctx.writeUInt32LE(fields.ifindex, skb.offset('ifindex'));
  if (fields.mark !== undefined) ctx.writeUInt32LE(fields.mark, skb.offset('mark'));
  return ctx;
}

/** A struct xdp_md for PROG_TEST_RUN: no metadata, the whole `len`-byte packet, arrived on `ifindex`. */
export function xdpContext(ifindex: number, len: number): Buffer {
  const md = kernelStruct('xdp_md');
  const ctx = Buffer.alloc(md.size);
  ctx.writeUInt32LE(len, md.offset('data_end'));
  ctx.writeUInt32LE(ifindex, md.offset('ingress_ifindex'));
  return ctx;
}
