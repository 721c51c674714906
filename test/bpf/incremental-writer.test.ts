// The incremental path against the full one, on real maps: random Service changes (ports,
// endpoints, conflicting LoadBalancer IPs and externalIPs, source ranges, affinity,
// removals) applied to one node Service by Service (FrontendTable → applyChanged) and to
// another whole (snapshot → apply). After every step both nodes' maps must say the same
// (ids aside: frontends, slots, backends, wildcards, source ranges), and the writer's
// reference counts must match what its frontends hold. Then a full sync that reads the maps
// back puts right an entry changed behind the writer's back.
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { LbScope, protoName } from '../../src/datapath/layouts.js';
import { dumpMap, listFrontends } from '../../src/datapath/inspect.js';
import { readServiceTable } from '../../src/datapath/service-table.js';
import { firstBackendsMatch } from '../../src/datapath/write-plan.js';
import { nodeView, serviceOutcome } from '../../src/model/desired.js';
import { FrontendTable } from '../../src/model/frontend-table.js';
import { NODE_IP, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { describeWith } from '../harness/requirements.js';
import { rng } from '../harness/rng.js';

let inc: DatapathNode;
let full: DatapathNode;
beforeAll(async () => {
  inc = await datapathNode({ maglevTableSize: 251 });
  full = await datapathNode({ maglevTableSize: 251 });
}, 60_000);
afterAll(async () => {
  await inc?.close();
  await full?.close();
});

const NODE: V1Node = { metadata: { name: 'node-1' }, status: { addresses: [{ type: 'InternalIP', address: NODE_IP }] } };

/** What the maps mean, without the ids: frontend → flags, backends in slot order; wildcards; ranges per frontend. */
function meaning(n: DatapathNode) {
  const t = readServiceTable(n.dp.maps);
  const frontendOfRevNat = new Map<number, string>();
  const backend = (id: number) => {
    const b = t.backends.get(id);
    return b ? `${b.address}:${b.port}/${b.proto}${b.flags ? `(${b.flags})` : ''}` : `missing#${id}`;
  };
  const frontends = t.frontends.map((f) => {
    const k = `${f.key.address}:${f.key.port}/${f.key.proto}#${f.key.scope}`;
    frontendOfRevNat.set(f.master.revNatId, k);
    // first=stale: the master entry's first_backends are not its first slots' backends.
    const first = firstBackendsMatch(f.master, f.backendIds) ? 'ok' : 'stale';
    return `${k} flags=${f.master.flags} aff=${f.master.affinityTimeout}/${f.master.affinityId ? 'y' : 'n'} maglev=${f.master.backendId ? 'y' : 'n'} first=${first} → ${f.backendIds.map(backend).join(',')} ${f.name ?? ''}`;
  }).sort();
  const ranges = [...n.dp.maps.lb4_src_ranges.keys()].map((k) => `${frontendOfRevNat.get(k.revNatId) ?? `orphan#${k.revNatId}`} ${k.source}/${k.prefixlen - 32}`).sort();
  return { frontends, wildcards: [...t.wildcards].sort(), ranges, backends: [...t.backends.values()].map((b) => `${b.address}:${b.port}/${b.proto}(${b.flags})`).sort() };
}

describeWith(['root', 'bpffs', 'netns'], 'incremental service writer', () => {
  it('writing only the changed Services leaves the maps as a full write does, step after step', () => {
    const seed = Number(process.env.FERRY_DIFF_SEED ?? Date.now() % 100_000);
    const r = rng(seed);
    const pick = <T>(xs: readonly T[]) => xs[Math.floor(r() * xs.length)]!;
    const view = nodeView(NODE);
    const table = new FrontendTable();
    const services = new Map<string, { svc: V1Service; slices: V1EndpointSlice[] }>();
    const randomService = (i: number): { svc: V1Service; slices: V1EndpointSlice[] } => {
      const name = `s${i}`;
      const type = pick(['ClusterIP', 'NodePort', 'LoadBalancer'] as const);
      const ports = Array.from({ length: 1 + Math.floor(r() * 2) }, (_, p) => ({ name: `p${p}`, port: pick([53, 80, 443]) + p * 1000, protocol: pick(['TCP', 'UDP']), ...(type !== 'ClusterIP' ? { nodePort: 30000 + i * 4 + p } : {}) }));
      const svc: V1Service = {
        metadata: { name, namespace: 'default' },
        spec: {
          type, clusterIP: `10.96.0.${i + 1}`, ports,
          // A few shared addresses, so that Services fight over frontends.
          externalIPs: r() < 0.3 ? [pick(['10.0.100.50', '10.0.100.51'])] : undefined,
          externalTrafficPolicy: r() < 0.3 ? 'Local' : 'Cluster',
          sessionAffinity: r() < 0.2 ? 'ClientIP' : 'None',
          loadBalancerSourceRanges: type === 'LoadBalancer' && r() < 0.4 ? [pick(['10.0.10.0/24', '192.168.0.0/16']), '10.9.0.0/16'] : undefined,
        },
        status: type === 'LoadBalancer' ? { loadBalancer: { ingress: [{ ip: pick(['10.0.100.1', '10.0.100.2', '10.0.100.3']) }] } } : undefined,
      };
      const eps = Math.floor(r() * 4);
      const slices: V1EndpointSlice[] = [{
        metadata: { name: `${name}-a`, namespace: 'default', labels: { 'kubernetes.io/service-name': name } },
        addressType: 'IPv4',
        ports: ports.map((p) => ({ name: p.name, port: 8000 + (p.port % 100), protocol: p.protocol })),
        // Pod addresses shared between Services, so that backends are shared too.
        endpoints: Array.from({ length: eps }, () => ({ addresses: [`10.244.${pick([1, 2])}.${1 + Math.floor(r() * 6)}`], nodeName: pick(['node-1', 'node-2']), conditions: { ready: r() < 0.85, serving: true, terminating: r() < 0.1 } })),
      }];
      return { svc, slices };
    };
    const step = (name: string) => {
      const s = services.get(name);
      table.set(`default/${name}`, s ? serviceOutcome(s.svc, s.slices, view) : undefined);
    };
    const sync = (first: boolean) => {
      const changed = table.takeChanged();
      const all = table.snapshot().frontends;
      if (first) inc.writer.apply(all);
      else inc.writer.applyChanged(new Map([...changed].map((n) => [n, table.frontendsOf(n)])));
      full.writer.apply(all);
      const a = meaning(inc);
      const b = meaning(full);
      expect(a, `seed ${seed}`).toEqual(b);
      // Reference counts: what the writer's frontends hold, counted again.
      const refs = new Map<number, number>();
      for (const fs of inc.writer.frontends.values()) for (const id of [...fs.backendIds, ...fs.drainingIds]) refs.set(id, (refs.get(id) ?? 0) + 1);
      expect(new Map([...inc.writer.backendRefs].sort()), `seed ${seed}`).toEqual(new Map([...refs].sort()));
      expect(new Set(inc.writer.wildcardRefs.keys()), `seed ${seed}`).toEqual(new Set(inc.writer.wildcards));
      expect(inc.writer.serviceEntries(), `seed ${seed}: lb4_services entries`).toBe([...inc.dp.maps.lb4_services.keys()].length);
    };
    for (let i = 0; i < 30; i++) {
      services.set(`s${i}`, randomService(i));
      step(`s${i}`);
    }
    sync(true);
    for (let k = 0; k < 60; k++) {
      const batch = 1 + Math.floor(r() * 4);
      for (let j = 0; j < batch; j++) {
        const i = Math.floor(r() * 36);
        if (r() < 0.2) services.delete(`s${i}`);
        else services.set(`s${i}`, randomService(i));
        step(`s${i}`);
      }
      sync(false);
    }
  });

  it('a full sync that reads the maps back puts right what was changed behind the writer', () => {
    const desired = [...new Set(inc.writer.lastSpecs.values())];
    // Written from the specs alone first (backend flags merged from earlier syncs settle).
    inc.writer.apply(desired, { reread: true });
    const before = meaning(inc);
    const masters = inc.dp.maps.lb4_services.entries().filter(([k, v]) => k.slot === 0 && k.scope === LbScope.LB_SCOPE_EXTERNAL && v.count > 0);
    const master = masters[0]!;
    const other = masters[1]!;
    expect(before.frontends.every((f) => f.includes(' first=ok '))).toBe(true);
    // A master entry carrying none of its first slots' backends (as a map migrated from
    // layout 4 has them), a backend slot pointed elsewhere, a master entry's count cut,
    // and a stray frontend.
    inc.dp.maps.lb4_services.update(other[0], { ...other[1], firstBackends: [] });
    // `ferry service list` flags it, `ferry map dump lb4_services` shows what each master carries.
    const stale = listFrontends(inc.pinDir).filter((r) => r.flags.includes('first-slots-stale')).map((r) => r.frontend);
    expect(stale).toEqual([`${other[0].address}:${other[0].port}/${protoName(other[0].proto)}`]);
    const dumped = dumpMap(inc.pinDir, 'lb4_services').filter((r) => r.slot === 0 && r.count !== 0);
    expect(dumped.filter((r) => r.firstBackends === '-')).toHaveLength(1);
    expect(dumped.filter((r) => typeof r.firstBackends === 'string' && /^\d+(,\d+)*$/.test(r.firstBackends)).length).toBe(dumped.length - 1);
    inc.dp.maps.lb4_services.update({ ...master[0], slot: 1 }, { ...master[1], backendId: 65_000, count: 0, revNatId: 0, flags: 0, affinityId: 0, affinityTimeout: 0 });
    inc.dp.maps.lb4_services.update(master[0], { ...master[1], count: 0 });
    inc.dp.maps.lb4_services.update({ address: '10.96.99.99', port: 1, proto: 6, scope: 0, slot: 0 }, { backendId: 0, count: 0, revNatId: 0, flags: 0, affinityId: 0, affinityTimeout: 0, firstBackends: [] });
    expect(meaning(inc)).not.toEqual(before);
    // An incremental sync with nothing changed does not look at the maps.
    inc.writer.applyChanged(new Map());
    expect(meaning(inc)).not.toEqual(before);
    const stats = inc.writer.apply(desired, { reread: true });
    expect(stats.entriesWritten + stats.entriesDeleted).toBeGreaterThanOrEqual(4);
    expect(meaning(inc)).toEqual(before);
  });
});
