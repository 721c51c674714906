// Maglev on the tc path: two nodes with the same backends agree on every flow's backend,
// and removing one of N backends remaps at most 1/N + 5% of flows.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { FrontendSpec } from '../../src/model/frontend.js';
import { buildPacket, eth, ipv4, tcp } from '../../src/packet/build.js';
import { decodePacket } from '../../src/packet/decode.js';
import { datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { describeWith } from '../harness/requirements.js';

const N = 10;
const FLOWS = 1000;
const pods = Array.from({ length: N }, (_, i) => `10.244.2.${10 + i}`);
const spec = (backends: string[]): FrontendSpec[] => [
  { address: '10.0.100.40', port: 80, proto: 'TCP', kind: 'LoadBalancer', service: 'default/web:http', backends: backends.map((a) => ({ address: a, port: 8080, local: false })) },
  { address: '10.0.30.21', port: 30040, proto: 'TCP', kind: 'NodePort', service: 'default/web:http', backends: backends.map((a) => ({ address: a, port: 8080, local: false })) },
];

let a: DatapathNode;
let b: DatapathNode;
beforeAll(async () => {
  [a, b] = await Promise.all([datapathNode({ maglevTableSize: 16381, hashSeed: 42 }), datapathNode({ maglevTableSize: 16381, hashSeed: 42 })]);
});
afterAll(async () => {
  await a?.close();
  await b?.close();
});

function backendsFor(node: DatapathNode): string[] {
  node.flushState();
  return Array.from({ length: FLOWS }, (_, i) => {
    const r = node.run('tc_ingress', buildPacket([eth(), ipv4({ src: `10.0.${10 + (i >> 8)}.${i & 255}`, dst: '10.0.100.40' }), tcp({ sport: 1024 + i * 7, dport: 80, flags: 'S' })]));
    return String(decodePacket(r.data).find((l) => l.name === 'ipv4')!.fields.dst);
  });
}

describeWith(['root', 'bpffs', 'netns'], 'Maglev', () => {
  it('shares one table per Service port, and two nodes agree on the backend of every flow', () => {
    a.writer.apply(spec(pods));
    b.writer.apply([...spec(pods)].reverse()); // order of frontends does not matter
    expect(a.dp.maps.lb4_maglev.keys().next().value).toBeGreaterThan(0);
    expect([...a.dp.maps.lb4_maglev.keys()].length).toBe(1);
    const onA = backendsFor(a);
    expect(backendsFor(b)).toEqual(onA);
    expect(new Set(onA).size).toBe(N);
  });

  it('moves at most 1/N + 5% of flows when one of N backends goes', () => {
    a.writer.apply(spec(pods));
    const before = backendsFor(a);
    a.writer.apply(spec(pods.filter((_, i) => i !== 3)));
    const after = backendsFor(a);
    const moved = before.filter((x, i) => x !== after[i]).length;
    expect(moved / FLOWS).toBeLessThanOrEqual(1 / N + 0.05);
    expect(after.includes(pods[3]!)).toBe(false);
    // And the flows that moved are exactly those of the removed backend (give or take a few).
    expect(before.filter((x, i) => x !== pods[3] && x !== after[i]).length / FLOWS).toBeLessThan(0.05);
  });

  it('drops the table with the Service', () => {
    a.writer.apply([]);
    expect([...a.dp.maps.lb4_maglev.keys()]).toEqual([]);
  });
});
