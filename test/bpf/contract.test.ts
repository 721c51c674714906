// The C/TypeScript contract: every shared struct codec against the BTF of the datapath
// objects, every enum mirror against the C enums (carried into BTF by contract.bpf.c).
import { expect, it } from 'vitest';
import { eventCodec } from '../../src/datapath/event-layout.js';
import { mapSpecs, sharedEnums } from '../../src/datapath/layouts.js';
import type { Codec } from '../../src/ebpf/codec.js';
import { assertEnums, enumDiff } from '../../src/ebpf/enum-check.js';
import { BpfObject } from '../../src/ebpf/object.js';
import { bpfObject } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';

describeWith(['root'], 'C/TypeScript contract', () => {
  it('every map codec matches the BTF of tc.bpf.o and sock.bpf.o', () => {
    for (const file of ['tc', 'sock']) {
      const obj = BpfObject.open(bpfObject(file));
      try {
        obj.load();
        for (const [name, spec] of Object.entries(mapSpecs)) {
          // The object's own view of each map's key and value types.
          const m = obj.map(name, spec.key as Codec<unknown>, spec.value as Codec<unknown>);
          expect(m.info.keySize, `${file}:${name} key`).toBe(spec.key.size);
          expect(m.info.valueSize, `${file}:${name} value`).toBe(spec.value.size);
        }
      } finally {
        obj.close();
      }
    }
  });

  it('the ring buffer record (struct ferry_event) matches the BTF of the headers', () => {
    const obj = BpfObject.open(bpfObject('tests/contract'));
    try {
      const record = obj.btf.struct('ferry_event');
      expect(record, 'struct ferry_event in BTF').toBeDefined();
      expect(eventCodec.diff(obj.btf, record!.id)).toEqual([]);
    } finally {
      obj.close();
    }
  });

  it('every enum mirror matches the C enum, value for value', () => {
    const obj = BpfObject.open(bpfObject('tests/contract'));
    try {
      expect(() => assertEnums(obj.btf, sharedEnums)).not.toThrow();
      // And the check can fail: a wrong value, a missing and an extra name.
      const wrong = { ...sharedEnums.lb_flags, LB_F_WILDCARD: 1 << 7, LB_F_INVENTED: 1 << 9 } as Record<string, number>;
      delete wrong.LB_F_NODE_PORT_ANY;
      expect(enumDiff(obj.btf, 'lb_flags', wrong)).toEqual([
        'enum lb_flags: LB_F_WILDCARD is 16 in C, 128 in TypeScript',
        'enum lb_flags: LB_F_INVENTED is in TypeScript, not in C',
        'enum lb_flags: LB_F_NODE_PORT_ANY is in C, not in TypeScript',
      ]);
    } finally {
      obj.close();
    }
  });
});
