// A struct __sk_buff context for tc PROG_TEST_RUN, laid out from the running kernel's BTF.
import { readFileSync } from 'node:fs';
import { Btf } from '../../src/ebpf/btf.js';

let kernel: Btf | undefined;
function kernelBtf(): Btf {
  kernel ??= Btf.parse(readFileSync('/sys/kernel/btf/vmlinux'));
  return kernel;
}

export function skbContext(fields: { ifindex?: number; mark?: number }): Buffer {
  const btf = kernelBtf();
  const skb = btf.struct('__sk_buff');
  if (!skb) throw new Error('kernel BTF has no struct __sk_buff');
  const ctx = Buffer.alloc(skb.size);
  const off = (name: string) => {
    const m = skb.members.find((x) => x.name === name);
    if (!m) throw new Error(`struct __sk_buff has no ${name}`);
    return m.bitOffset / 8;
  };
  if (fields.ifindex !== undefined) ctx.writeUInt32LE(fields.ifindex, off('ifindex'));
  if (fields.mark !== undefined) ctx.writeUInt32LE(fields.mark, off('mark'));
  return ctx;
}
