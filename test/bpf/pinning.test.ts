import { mkdirSync, rmSync, existsSync, readdirSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { structCodec } from '../../src/ebpf/codec.js';
import { ErrorCode, FerryError } from '../../src/errors.js';
import { BpfObject } from '../../src/ebpf/object.js';
import { openPinnedMap } from '../../src/ebpf/pinned.js';
import { bpfObject } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { flowKeyCodec, flowValueCodec } from './codecs.js';

let dir = '';
beforeEach(() => {
  dir = join('/sys/fs/bpf', `ferry-pins-${randomBytes(3).toString('hex')}`); // not fy…: no testbed owns it
  mkdirSync(dir);
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const k = { addr: '10.96.0.1', port: 443, proto: 6 };
const v = { createdNs: 42n, hits: 7, state: 1 };

function loadPinned(name: string): BpfObject {
  const obj = BpfObject.open(bpfObject(name));
  try {
    obj.pinMaps({ dir });
    obj.load();
    return obj;
  } catch (e) {
    obj.close();
    throw e;
  }
}

function errorOf(fn: () => unknown): FerryError {
  try {
    fn();
  } catch (e) {
    return e as FerryError;
  }
  throw new Error('expected an error');
}

describeWith(['root', 'bpffs'], 'pinned maps', () => {
  it('pins new maps, and a second load adopts them with their contents', () => {
    const first = loadPinned('tests/map_kinds');
    expect(first.pinReport.created.sort()).toEqual(['test_array', 'test_hash', 'test_lru', 'test_small']);
    first.map('test_hash', flowKeyCodec, flowValueCodec).update(k, v);
    first.close(); // the pins keep the maps alive

    expect(readdirSync(dir).sort()).toEqual(['test_array', 'test_hash', 'test_lru', 'test_small']);
    const second = loadPinned('tests/map_kinds');
    try {
      expect(second.pinReport.adopted.sort()).toEqual(['test_array', 'test_hash', 'test_lru', 'test_small']);
      expect(second.pinReport.created).toEqual([]);
      expect(second.map('test_hash', flowKeyCodec, flowValueCodec).lookup(k)).toEqual(v);
    } finally {
      second.close();
    }
  });

  it('opens a pinned map from another process view, checking codecs against its BTF', () => {
    loadPinned('tests/map_kinds').close();
    const m = openPinnedMap(join(dir, 'test_hash'), flowKeyCodec, flowValueCodec);
    try {
      m.update(k, v);
      expect(m.entries()).toEqual([[k, v]]);
    } finally {
      m.close();
    }
    const wrong = structCodec('test_flow_value', { createdNs: { type: 'u64' }, hits: { type: 'u64' } });
    const err = errorOf(() => openPinnedMap(join(dir, 'test_hash'), flowKeyCodec, wrong));
    expect(err.code).toBe(ErrorCode.Layout);
    expect(err.detail?.split('\n')).toEqual(['field hits: size BTF 4, codec 8', 'field state: in BTF, missing from the codec']);
  });

  it('refuses to adopt a pinned map whose layout changed, naming each field', () => {
    loadPinned('tests/map_kinds').close();
    const obj = BpfObject.open(bpfObject('tests/map_kinds_v2'));
    try {
      obj.pinMaps({ dir, maps: ['test_hash'] });
      const err = errorOf(() => obj.load());
      expect(err.code).toBe(ErrorCode.Layout);
      expect(err.message).toMatch(new RegExp(`^adopt pinned map ${dir}/test_hash: the pinned map differs from the object: `));
      expect(err.detail?.split('\n')).toEqual([
        'value size: pinned 16, object 24',
        'value type: size pinned 16, object 24',
        'value field hits: size pinned 4, object 8',
        'value field state: offset pinned 12, object 16',
        'value field backend_id: in the object, missing from the pinned map',
      ]);
      expect(err.hint).toMatch(/remove .*test_hash to start afresh/);
    } finally {
      obj.close();
    }
  });

  it('says how to mount bpffs when the pin directory is not on one', () => {
    const obj = BpfObject.open(bpfObject('tests/map_kinds'));
    try {
      expect(() => obj.pinMaps({ dir: '/nonexistent/ferry' })).toThrow(/mount -t bpf bpf \/sys\/fs\/bpf/);
    } finally {
      obj.close();
    }
    expect(() => openPinnedMap('/tmp/not-bpffs/test_hash', flowKeyCodec, flowValueCodec)).toThrow(/is not on a bpf filesystem \(mount -t bpf bpf \/sys\/fs\/bpf/);
    expect(existsSync('/tmp/not-bpffs')).toBe(false);
  });

  it('says the agent may not have run when a pin is missing', () => {
    expect(() => openPinnedMap(join(dir, 'nope'), flowKeyCodec, flowValueCodec)).toThrow(/no such file or directory/);
  });
});
