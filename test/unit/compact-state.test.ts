// The agent's compact state: id-indexed tables behave as the Map/Set they replace, the
// slice index as the Map of Maps it replaces, and the model shares one frozen empty list.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { DENSE_IDS, IdSet, IdTable } from '../../src/datapath/id-table.js';
import { NONE } from '../../src/model/frontend.js';
import { nodeView, serviceOutcome } from '../../src/model/desired.js';
import { SliceIndex } from '../../src/model/slice-index.js';

/** A small deterministic generator (tests must repeat). */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32);
}

describe('IdTable and IdSet', () => {
  it('answer as a Map and a Set do under random writes, iterating in id order', () => {
    for (const seed of [1, 2, 3]) {
      const r = rng(seed);
      const t = new IdTable<number>();
      const m = new Map<number, number>();
      const s = new IdSet();
      const ref = new Set<number>();
      for (let i = 0; i < 5000; i++) {
        // Mostly dense ids (growing, then shrinking back), some as far as a u32 read back
        // from a damaged map could be.
        const far = r() < 0.05;
        const id = far ? DENSE_IDS + Math.floor(r() * 2 ** 31) * 2 - Math.floor(r() * 3) : Math.floor(r() * (i < 2500 ? 300 : 3000));
        const op = r();
        if (op < 0.55) {
          t.set(id, i);
          m.set(id, i);
          s.add(id);
          ref.add(id);
        } else {
          expect(t.delete(id)).toBe(m.delete(id));
          expect(s.delete(id)).toBe(ref.delete(id));
        }
        expect(t.size).toBe(m.size);
        expect(s.size).toBe(ref.size);
        expect(t.get(id)).toBe(m.get(id));
        expect(t.has(id)).toBe(m.has(id));
        expect(s.has(id)).toBe(ref.has(id));
      }
      expect([...t]).toEqual([...m].sort((a, b) => a[0] - b[0]));
      expect([...t.keys()]).toEqual([...m.keys()].sort((a, b) => a - b));
      expect([...t.values()]).toEqual([...m].sort((a, b) => a[0] - b[0]).map(([, v]) => v));
    }
  });

  it('refuses what is not an id or not a value, and empties on clear', () => {
    const t = new IdTable<string>();
    expect(() => t.set(-1, 'x')).toThrow(RangeError);
    expect(() => t.set(1.5, 'x')).toThrow(RangeError);
    expect(() => t.set(1, undefined as unknown as string)).toThrow(RangeError);
    t.set(2 ** 32 - 1, 'u32');
    t.set(100_000, 'far');
    t.set(DENSE_IDS, 'sparse');
    expect([...t]).toEqual([[100_000, 'far'], [DENSE_IDS, 'sparse'], [2 ** 32 - 1, 'u32']]);
    t.clear();
    expect(t.size).toBe(0);
    expect(t.get(100_000)).toBeUndefined();
    const s = new IdSet();
    expect(() => s.add(-3)).toThrow(RangeError);
    s.add(70_000);
    s.add(2 ** 32 - 1);
    expect(s.size).toBe(2);
    expect(s.has(2 ** 32 - 1)).toBe(true);
    expect(s.has(70_000)).toBe(true);
    expect(s.has(69_999)).toBe(false);
    s.clear();
    expect(s.size).toBe(0);
  });
});

describe('SliceIndex', () => {
  const slice = (name: string, service: string | undefined, ns = 'default'): V1EndpointSlice => ({ metadata: { name, namespace: ns, ...(service ? { labels: { 'kubernetes.io/service-name': service } } : {}) }, addressType: 'IPv4', endpoints: [] });
  const names = (l: V1EndpointSlice[]) => l.map((s) => s.metadata!.name);

  it('files slices under their Service, follows a relabel, an update and a delete', () => {
    const ix = new SliceIndex();
    ix.update('add', slice('a-1', 'a'));
    ix.update('add', slice('a-2', 'a'));
    ix.update('add', slice('b-1', 'b'));
    ix.update('add', slice('a-1', 'a', 'other'));
    expect(names(ix.of('default', 'a'))).toEqual(['a-1', 'a-2']);
    expect(names(ix.of('other', 'a'))).toEqual(['a-1']);
    ix.update('update', slice('a-1', 'b')); // relabelled: moves to b
    expect(names(ix.of('default', 'a'))).toEqual(['a-2']);
    expect(names(ix.of('default', 'b'))).toEqual(['b-1', 'a-1']);
    const newer = slice('a-2', 'a');
    ix.update('update', newer);
    expect(ix.of('default', 'a')[0]).toBe(newer);
    ix.update('update', slice('b-1', undefined)); // label removed: filed nowhere
    expect(names(ix.of('default', 'b'))).toEqual(['a-1']);
    ix.update('delete', slice('a-2', 'a'));
    expect(ix.of('default', 'a')).toEqual([]);
    // A caller's copy: changing it changes nothing in the index.
    ix.of('default', 'b').pop();
    expect(names(ix.of('default', 'b'))).toEqual(['a-1']);
  });
});

describe('the model shares one frozen empty list', () => {
  it('gives untroubled Services the shared list, and it cannot be written', () => {
    const node = nodeView({ metadata: { name: 'n1' }, status: { addresses: [{ type: 'InternalIP', address: '192.0.2.1' }] } });
    const svc = { metadata: { name: 's', namespace: 'default' }, spec: { clusterIP: '10.96.0.1', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] } };
    const slc: V1EndpointSlice = { metadata: { name: 's-1', namespace: 'default', labels: { 'kubernetes.io/service-name': 's' } }, addressType: 'IPv4', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [{ addresses: ['10.244.0.1'], conditions: { ready: true } }] };
    const out = serviceOutcome(svc, [slc], node);
    expect(out.rejected).toBe(NONE);
    expect(out.result!.ignored).toBe(NONE);
    expect(out.result!.noLocalEndpoints).toBe(NONE);
    expect(out.result!.nodeAddresses).toBe(NONE);
    expect(out.result!.frontends[0]!.drainingBackends).toBe(NONE);
    expect(out.result!.service).toBe(out.service);
    expect(() => (NONE as unknown[]).push(1)).toThrow(TypeError);
    // With no endpoint: the shared list for backends too.
    expect(serviceOutcome(svc, [], node).result!.frontends[0]!.backends).toBe(NONE);
  });
});

describe('frontends of one shape', () => {
  it('share one hidden class across thousands of Services (V8 gives `{ ...base, more }` one each once hot)', () => {
    // In a child node with V8's natives syntax, on the built model (vitest's setup builds dist/).
    const script = `
      const { nodeView, serviceOutcome } = await import(${JSON.stringify(new URL('../../dist/model/desired.js', import.meta.url).href)});
      const node = nodeView({ metadata: { name: 'n1' }, status: { addresses: [{ type: 'InternalIP', address: '192.0.2.1' }] } });
      const same = new Function('a', 'b', 'return %HaveSameMap(a, b)');
      const fronts = [];
      for (let i = 0; i < 3000; i++) {
        const svc = { metadata: { name: 's' + i, namespace: 'default' }, spec: { type: 'NodePort', clusterIP: '10.96.' + (i >> 8) + '.' + (i & 255), ports: [{ name: 'http', port: 80, nodePort: 30000 + (i % 2000), protocol: 'TCP' }] } };
        const slice = { metadata: { name: 's' + i + '-1', namespace: 'default', labels: { 'kubernetes.io/service-name': 's' + i } }, addressType: 'IPv4', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [{ addresses: ['10.244.0.' + (i & 255)], conditions: { ready: true } }] };
        fronts.push(serviceOutcome(svc, [slice], node).result.frontends);
      }
      const bad = fronts.filter((f) => !same(f[0], fronts[0][0]) || !same(f[1], fronts[0][1]) || !same(f[2], fronts[0][2])).length;
      console.log(bad);
    `;
    const r = spawnSync(process.execPath, ['--allow-natives-syntax', '--input-type=module', '-e', script], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(Number(r.stdout.trim())).toBe(0);
  });
});

describe('flat keys', () => {
  it('kept keys built by concatenation take well under half the memory once flattened', () => {
    // In a child node (a clean heap, collections on demand), on the built helper, called
    // as the agent calls it: inlined into a hot key builder (where a flattening read whose
    // result goes unused is optimized away).
    const script = `
      const { flat } = await import(${JSON.stringify(new URL('../../dist/model/flat-string.js', import.meta.url).href)});
      const addrs = Array.from({ length: 50000 }, (_, i) => '10.' + (96 + (i >> 16)) + '.' + ((i >> 8) & 255) + '.' + (i & 255));
      const plainKey = (a, i) => \`\${a}:\${80 + (i & 1)}/\${'tcp'}#\${i & 1}\`;
      const flatKey = (a, i) => flat(\`\${a}:\${80 + (i & 1)}/\${'tcp'}#\${i & 1}\`);
      // The keys are kept only through globalThis; their memory is what a collection
      // frees once they are let go. Three rounds: the last runs optimized code.
      const build = (key) => {
        const keep = new Array(addrs.length);
        for (let i = 0; i < addrs.length; i++) keep[i] = key(addrs[i], i);
        if (keep[1] !== addrs[1] + ':81/tcp#1') throw new Error('a key changed');
        globalThis.keep = keep;
      };
      const used = (key) => {
        let bytes = 0;
        for (let round = 0; round < 3; round++) {
          build(key);
          gc(); gc();
          const held = process.memoryUsage().heapUsed;
          globalThis.keep = null;
          gc(); gc();
          bytes = held - process.memoryUsage().heapUsed;
        }
        return bytes;
      };
      const kept = used(plainKey);
      const flattened = used(flatKey);
      console.log(JSON.stringify({ kept, flattened }));
    `;
    const r = spawnSync(process.execPath, ['--expose-gc', '--max-semi-space-size=4', '--input-type=module', '-e', script], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    const { kept, flattened } = JSON.parse(r.stdout) as { kept: number; flattened: number };
    expect(flattened / kept).toBeLessThan(0.5);
  });
});
