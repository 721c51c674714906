import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { Btf, BtfKind } from '../../src/ebpf/btf.js';
import { describeWith } from '../harness/requirements.js';

describeWith(['btf'], 'BTF reader on the running kernel', () => {
  const btf = Btf.parse(readFileSync('/sys/kernel/btf/vmlinux'));

  it('reads tens of thousands of kernel types', () => {
    expect(btf.types.length).toBeGreaterThan(10_000);
    expect(btf.struct('sk_buff')?.kind).toBe(BtfKind.Struct);
  });

  it('agrees with the bpf_map_info offsets the map layer reads', () => {
    const info = btf.struct('bpf_map_info')!;
    const off = (name: string) => info.members.find((m) => m.name === name)!.bitOffset / 8;
    expect({
      type: off('type'), id: off('id'), key_size: off('key_size'), value_size: off('value_size'),
      max_entries: off('max_entries'), map_flags: off('map_flags'), name: off('name'),
      btf_id: off('btf_id'), btf_key_type_id: off('btf_key_type_id'), btf_value_type_id: off('btf_value_type_id'),
    }).toEqual({ type: 0, id: 4, key_size: 8, value_size: 12, max_entries: 16, map_flags: 20, name: 24, btf_id: 64, btf_key_type_id: 68, btf_value_type_id: 72 });
  });

  it('resolves typedef chains to sizes and names', () => {
    const be32 = btf.find('__be32', BtfKind.Typedef)[0]!;
    expect(btf.sizeOf(be32.id)).toBe(4);
    expect(btf.describe(be32.id)).toBe('__be32');
    expect(btf.enumValues('bpf_map_type')?.get('BPF_MAP_TYPE_LRU_HASH')).toBe(9);
  });
});

describe('BTF reader input checks', () => {
  it('rejects garbage with a hint', () => {
    expect(() => Btf.parse(Buffer.alloc(30))).toThrow(/parse btf: bad magic \(.*clang -g/);
    expect(() => Btf.parse(Buffer.alloc(4))).toThrow(/too short/);
  });
});
