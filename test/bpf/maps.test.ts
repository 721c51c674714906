import { describe, expect, it } from 'vitest';
import { structCodec, u32Codec } from '../../src/ebpf/codec.js';
import { ErrorCode, FerryError } from '../../src/errors.js';
import { MapType, UpdateFlag } from '../../src/ebpf/map.js';
import { BpfObject } from '../../src/ebpf/object.js';
import { bpfObject } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { flowKeyCodec, flowValueCodec } from './codecs.js';

function withMaps(fn: (obj: BpfObject) => void): void {
  const obj = BpfObject.open(bpfObject('tests/map_kinds'));
  try {
    obj.load();
    fn(obj);
  } finally {
    obj.close();
  }
}

const key = (i: number) => ({ addr: `10.96.${i >> 8}.${i & 255}`, port: 1000 + i, proto: 6 });
const value = (i: number) => ({ createdNs: BigInt(i) * 1_000_000_000n, hits: i, state: i % 2 });

describeWith(['root'], 'typed maps', () => {
  it('looks up, updates and deletes with typed keys and values', () => {
    withMaps((obj) => {
      const m = obj.map('test_hash', flowKeyCodec, flowValueCodec);
      expect(m.info.type).toBe(MapType.Hash);
      expect(m.lookup(key(1))).toBeUndefined();
      m.update(key(1), value(1));
      expect(m.lookup(key(1))).toEqual(value(1));
      expect(() => m.update(key(1), value(2), UpdateFlag.NoExist)).toThrow(/update map test_hash: already exists/);
      m.update(key(1), value(3), UpdateFlag.Exist);
      expect(m.lookup(key(1))?.hits).toBe(3);
      expect(m.delete(key(1))).toBe(true);
      expect(m.delete(key(1))).toBe(false);
    });
  });

  it('iterates keys and reads entries in batches across several batch boundaries', () => {
    withMaps((obj) => {
      const m = obj.map('test_hash', flowKeyCodec, flowValueCodec);
      m.updateBatch(Array.from({ length: 50 }, (_, i) => [key(i), value(i)] as [ReturnType<typeof key>, ReturnType<typeof value>]));
      expect([...m.keys()].length).toBe(50);
      const entries = m.entries(7); // 7 per batch: 8 round trips
      expect(entries.length).toBe(50);
      const byHits = new Map(entries.map(([k, v]) => [v.hits, k]));
      for (let i = 0; i < 50; i++) expect(byHits.get(i)).toEqual(key(i));
      expect(m.deleteBatch([key(0), key(1), key(999), key(2)])).toBe(3);
      expect(m.entries().length).toBe(47);
    });
  });

  it('walks raw entries batch by batch, each once, as the codecs encode them; a sparse array without its zero slots', () => {
    withMaps((obj) => {
      const m = obj.map('test_hash', flowKeyCodec, flowValueCodec);
      m.updateBatch(Array.from({ length: 20 }, (_, i) => [key(i), value(i)] as [ReturnType<typeof key>, ReturnType<typeof value>]));
      const seen = new Map<string, string>();
      m.forEachRaw((keys, k, values, v) => {
        seen.set(keys.toString('hex', k, k + flowKeyCodec.size), values.toString('hex', v, v + flowValueCodec.size));
      }, 3); // 3 per batch: 7 round trips
      expect(seen.size).toBe(20);
      for (let i = 0; i < 20; i++) expect(seen.get(flowKeyCodec.encode(key(i)).toString('hex'))).toBe(flowValueCodec.encode(value(i)).toString('hex'));
      const arr = obj.map('test_array', u32Codec, flowValueCodec, { sparse: true });
      arr.updateBatch([[2, value(2)], [7, value(7)]]);
      const slots: number[] = [];
      arr.forEachRaw((keys, k, values, v) => {
        slots.push(keys.readUInt32LE(k));
        expect(flowValueCodec.decode(values, v)).toEqual(value(keys.readUInt32LE(k)));
      }, 3);
      expect(slots).toEqual([2, 7]);
      arr.deleteBatch([2, 7]);
    });
  });

  it('handles array and LRU maps', () => {
    withMaps((obj) => {
      const arr = obj.map('test_array', u32Codec, flowValueCodec);
      arr.update(3, value(3));
      expect(arr.lookup(3)).toEqual(value(3));
      expect(arr.entries().length).toBe(8); // arrays always hold max_entries
      const lru = obj.map('test_lru', flowKeyCodec, flowValueCodec);
      for (let i = 0; i < 200; i++) lru.update(key(i), value(i)); // LRU evicts instead of failing
      expect(lru.entries().length).toBeLessThanOrEqual(64);
    });
  });

  it('a sparse array: all-zero slots are absent to lookups and walks, and a delete zeroes a slot', () => {
    withMaps((obj) => {
      const arr = obj.map('test_array', u32Codec, flowValueCodec, { sparse: true });
      expect(arr.sparse).toBe(true);
      expect(arr.lookup(3)).toBeUndefined();
      expect(arr.entries()).toEqual([]);
      arr.updateBatch([[3, value(3)], [5, value(5)], [6, value(6)]]);
      expect(arr.entries()).toEqual([[3, value(3)], [5, value(5)], [6, value(6)]]);
      expect([...arr.keys()]).toEqual([3, 5, 6]);
      expect(arr.delete(3)).toBe(true);
      expect(arr.delete(3)).toBe(false);
      expect(arr.lookup(3)).toBeUndefined();
      expect(arr.deleteBatch([4, 5, 6])).toBe(2);
      expect(arr.entries()).toEqual([]);
      // The same map opened plainly: every slot is there, the deleted ones zero.
      const plain = obj.map('test_array', u32Codec, flowValueCodec);
      expect(plain.lookup(3)).toEqual({ createdNs: 0n, hits: 0, state: 0 });
      // Not an array: the option is ignored.
      expect(obj.map('test_hash', flowKeyCodec, flowValueCodec, { sparse: true }).sparse).toBe(false);
    });
  });

  it('makes a full map an explicit error that names the setting to raise', () => {
    withMaps((obj) => {
      const small = obj.map('test_small', flowKeyCodec, flowValueCodec, { sizeSetting: 'mapSizes.test' });
      for (let i = 0; i < 4; i++) small.update(key(i), value(i));
      let err: FerryError | undefined;
      try {
        small.update(key(4), value(4));
      } catch (e) {
        err = e as FerryError;
      }
      expect(err?.code).toBe(ErrorCode.MapFull);
      expect(err?.message).toBe('update map test_small: map is full (4 entries) (raise mapSizes.test)');
      expect(() => small.updateBatch([[key(5), value(5)]])).toThrow(/map is full/);
    });
  });

  it('refuses codecs of the wrong size before touching the map', () => {
    withMaps((obj) => {
      expect(() => obj.map('test_hash', u32Codec, flowValueCodec)).toThrow(/^map test_hash key: __u32 in TypeScript does not match the BTF of the object: expected __u32, BTF has struct test_flow_key/);
      const hostOrderPort = structCodec('test_flow_key', { addr: { type: 'ipv4' }, port: { type: 'u16' }, proto: { type: 'u8' }, pad: { type: 'pad', length: 1 } });
      expect(() => obj.map('test_hash', hostOrderPort, flowValueCodec)).toThrow(/field port: expected host byte order \(u16\), BTF has __be16/);
    });
  });

  it('resizes a map between open and load', () => {
    const obj = BpfObject.open(bpfObject('tests/map_kinds'));
    try {
      obj.setMaxEntries('test_hash', 1000);
      obj.load();
      expect(obj.map('test_hash', flowKeyCodec, flowValueCodec).maxEntries).toBe(1000);
    } finally {
      obj.close();
    }
  });
});
