// A struct __sk_buff context for tc PROG_TEST_RUN, laid out from the running kernel's BTF.
import { readFileSync } from 'node:fs';
import { Btf } from './btf.js';
import { ErrorCode, FerryError } from '../errors.js';

let kernel: Btf | undefined;

export function skbContext(fields: { ifindex?: number; mark?: number }): Buffer {
  kernel ??= Btf.parse(readFileSync('/sys/kernel/btf/vmlinux'));
  const skb = kernel.struct('__sk_buff');
  if (!skb) throw new FerryError({ code: ErrorCode.NotFound, op: 'build a test-run context', cause: 'kernel BTF has no struct __sk_buff' });
  const ctx = Buffer.alloc(skb.size);
  const off = (name: string) => {
    const m = skb.members.find((x) => x.name === name);
    if (!m) throw new FerryError({ code: ErrorCode.NotFound, op: 'build a test-run context', cause: `struct __sk_buff has no ${name}` });
    return m.bitOffset / 8;
  };
  if (fields.ifindex !== undefined) ctx.writeUInt32LE(fields.ifindex, off('ifindex'));
  if (fields.mark !== undefined) ctx.writeUInt32LE(fields.mark, off('mark'));
  return ctx;
}
