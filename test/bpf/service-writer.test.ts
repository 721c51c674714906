// The service writer against real maps: layout of what it writes, make-before-break
// order, removal of everything stale, IDs restored from the maps, and full maps.
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { LbFlags, BackendFlags } from '../../src/datapath/layouts.js';
import type { FrontendSpec } from '../../src/model/frontend.js';
import { ServiceWriter, type ServiceMaps } from '../../src/datapath/writer.js';
import { readServiceTable } from '../../src/datapath/service-table.js';
import { ErrorCode, FerryError } from '../../src/errors.js';
import { buildPacket, eth, ipv4, tcp } from '../../src/packet/build.js';
import { decodePacket } from '../../src/packet/decode.js';
import { TcVerdict } from '../../src/sandbox/packet-fixture.js';
import { NODE_IP, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { describeWith } from '../harness/requirements.js';

let node: DatapathNode;
beforeAll(async () => {
  node = await datapathNode({ mapSizes: { backends: 64, services: 256 } });
});
afterAll(async () => {
  await node?.close();
});
beforeEach(() => {
  node.writer.apply([]);
  node.writer.releaseRetiredBackends(new Set()); // no flow holds the ids of earlier tests
  node.flushState();
});

const web = (n: number, extra: Partial<FrontendSpec> = {}): FrontendSpec => ({
  address: '10.96.0.10', port: 80, proto: 'TCP', kind: 'ClusterIP', service: 'default/web:http',
  backends: Array.from({ length: n }, (_, i) => ({ address: `10.244.1.${10 + i}`, port: 8080, local: i % 2 === 0 })),
  ...extra,
});

function servicesView(n: DatapathNode) {
  return n.dp.maps.lb4_services.entries().map(([k, v]) => `${k.address}:${k.port}/${k.proto}#${k.slot} → ${k.slot === 0 ? `count=${v.count} flags=${v.flags}` : `backend=${v.backendId}`}`).sort();
}

/** Record the order of map writes through a writer. */
function recording(n: DatapathNode): { maps: ServiceMaps; log: string[] } {
  const log: string[] = [];
  const wrap = <T extends object>(name: string, m: T): T =>
    new Proxy(m, {
      get(target, prop, recv) {
        const v = Reflect.get(target, prop, recv);
        if (typeof v !== 'function' || !['update', 'updateBatch', 'updateBatchOf', 'delete', 'deleteBatch'].includes(String(prop))) return typeof v === 'function' ? v.bind(target) : v;
        return (...args: unknown[]) => {
          const arg = args[0];
          const what = (k: unknown) => {
            const slot = typeof k === 'object' && k !== null && 'slot' in k ? (k as { slot: number; port: number }) : undefined;
            return slot ? (slot.port === 0 ? 'wildcard' : slot.slot === 0 ? 'master' : 'slot') : name;
          };
          // updateBatchOf(count, entry): each entry read as entry(i) gives it (a scratch pair may be reused).
          const whats = String(prop) === 'updateBatch' ? (arg as [unknown, unknown][]).map(([k]) => what(k))
            : String(prop) === 'updateBatchOf' ? Array.from({ length: arg as number }, (_, i) => what((args[1] as (i: number) => [unknown, unknown])(i)[0]))
            : String(prop) === 'deleteBatch' ? (arg as unknown[]).map(what) : [what(arg)];
          for (const w of whats) log.push(`${String(prop).startsWith('delete') ? 'del' : 'put'} ${w}`);
          return (v as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    });
  return { maps: { lb4_services: wrap('services', n.dp.maps.lb4_services), lb4_backends: wrap('backend', n.dp.maps.lb4_backends), lb4_backend_ids: wrap('index', n.dp.maps.lb4_backend_ids), lb4_reverse_nat: wrap('revnat', n.dp.maps.lb4_reverse_nat), lb4_src_ranges: wrap('ranges', n.dp.maps.lb4_src_ranges), lb4_maglev: wrap('maglev', n.dp.maps.lb4_maglev), lb4_names: wrap('names', n.dp.maps.lb4_names), lb4_addr_filter: n.dp.maps.lb4_addr_filter }, log };
}

describeWith(['root', 'bpffs', 'netns'], 'service writer', () => {
  it('writes backends, reverse NAT, slots, master and wildcard', () => {
    node.writer.apply([web(3)]);
    expect(servicesView(node)).toEqual([
      '10.96.0.10:0/0#0 → count=0 flags=16',
      `10.96.0.10:80/6#0 → count=3 flags=${LbFlags.LB_F_CLUSTER_IP}`,
      '10.96.0.10:80/6#1 → backend=1',
      '10.96.0.10:80/6#2 → backend=2',
      '10.96.0.10:80/6#3 → backend=3',
    ]);
    expect(node.dp.maps.lb4_backends.entries().sort(([a], [b]) => a - b)).toEqual([
      [1, { address: '10.244.1.10', port: 8080, proto: 6, flags: BackendFlags.LB_BACKEND_F_LOCAL }],
      [2, { address: '10.244.1.11', port: 8080, proto: 6, flags: 0 }],
      [3, { address: '10.244.1.12', port: 8080, proto: 6, flags: BackendFlags.LB_BACKEND_F_LOCAL }],
    ]);
    expect(node.dp.maps.lb4_reverse_nat.entries()).toEqual([[1, { address: '10.96.0.10', port: 80 }]]);
    // Each local backend's endpoint → its id (tc egress tells a local backend's packets by it).
    const index = () => node.dp.maps.lb4_backend_ids.entries().map(([k, id]) => `${k.address}:${k.port}/${k.proto} → ${id}`).sort();
    expect(index()).toEqual(['10.244.1.10:8080/6 → 1', '10.244.1.12:8080/6 → 3']);
    node.writer.apply([web(2)]);
    expect(index()).toEqual(['10.244.1.10:8080/6 → 1']);
    // An endpoint that is no longer on this node leaves the index; one that comes to it enters.
    node.writer.apply([web(2, { backends: [{ address: '10.244.1.10', port: 8080, local: false }, { address: '10.244.1.11', port: 8080, local: true }] })]);
    expect(index()).toEqual(['10.244.1.11:8080/6 → 2']);
    node.writer.apply([web(3)]);
    expect(node.dp.maps.lb4_names.lookup(1)?.name.toString().replace(/\0+$/, '')).toBe('default/web:http');
  });

  it('makes before it breaks: backends, then slots, then the master, removals last', () => {
    node.writer.apply([web(3)]);
    const { maps, log } = recording(node);
    const w = new ServiceWriter(maps);
    w.apply([web(1, { backends: [{ address: '10.244.1.99', port: 8080, local: true }] })]);
    // (Frontend names are for the CLI only: their order does not matter.)
    expect(log.filter((l) => !l.endsWith(' names'))).toEqual(['put backend', 'put index', 'put slot', 'put master', 'del slot', 'del slot', 'del backend', 'del backend', 'del backend', 'del index', 'del index']);
    w.apply([]); // one writer per map set: leave nothing behind for the shared one
  });

  it('removes a frontend completely: master, slots, reverse NAT, wildcard, unused backends', () => {
    node.writer.apply([web(2), web(1, { address: '10.96.0.11' })]);
    node.writer.apply([web(1, { address: '10.96.0.11' })]);
    expect(servicesView(node)).toEqual(['10.96.0.11:0/0#0 → count=0 flags=16', `10.96.0.11:80/6#0 → count=1 flags=${LbFlags.LB_F_CLUSTER_IP}`, '10.96.0.11:80/6#1 → backend=1']);
    expect(node.dp.maps.lb4_reverse_nat.entries().map(([, v]) => v.address)).toEqual(['10.96.0.11']);
    expect(node.dp.maps.lb4_backends.entries().map(([, b]) => b.address)).toEqual(["10.244.1.10"]);
  });

  it('restores IDs from the maps, so a restarted writer changes nothing', () => {
    node.writer.apply([web(3), web(2, { address: '10.96.0.20', port: 53, proto: 'UDP' })]);
    const before = servicesView(node);
    const rec = recording(node);
    const restarted = new ServiceWriter(rec.maps);
    const stats = restarted.apply([web(3), web(2, { address: '10.96.0.20', port: 53, proto: 'UDP' })]);
    expect(stats).toEqual({ frontendsWritten: 0, frontendsRemoved: 0, backendsWritten: 0, backendsRemoved: 0, entriesWritten: 0, entriesDeleted: 0, removedBackends: [], removedBackendIds: [], removedFrontends: [], failures: [] });
    expect(rec.log).toEqual([]); // not even the names, which it read back
    expect(servicesView(node)).toEqual(before);
    // A renamed Service port is written again.
    restarted.apply([web(3, { service: 'default/web:web' }), web(2, { address: '10.96.0.20', port: 53, proto: 'UDP' })]);
    expect(rec.log).toEqual(['put names']);
    node.writer = restarted;
  });

  it('a frontend planned again with only its draining backends changed still counts them (a backend another Service lets go of stays)', () => {
    const shared = { address: '10.244.1.50', port: 8080, local: false };
    const a = (draining: FrontendSpec['drainingBackends']) => web(1, { service: 'default/a:http', ...(draining ? { drainingBackends: draining } : {}) });
    const b = (backends: FrontendSpec['backends']) => web(0, { address: '10.96.0.11', service: 'default/b:http', backends });
    node.writer.apply([a(undefined), b([shared])]);
    // Same slots as before, one draining backend more: it holds that backend too.
    node.writer.applyChanged(new Map([['default/a', [a([{ ...shared, terminating: true }])]]]));
    node.writer.applyChanged(new Map([['default/b', [b([{ address: '10.244.1.51', port: 8080, local: false }])]]]));
    expect(node.dp.maps.lb4_backends.entries().map(([, v]) => v.address).sort()).toEqual(['10.244.1.10', '10.244.1.50', '10.244.1.51']);
    // A restarted writer (a draining backend is in no slot, so only the specs say which
    // frontend holds it) planned twice with the same frontends holds each backend once:
    // when A goes, its backends go.
    const restarted = new ServiceWriter(node.dp.maps);
    restarted.apply([a([{ ...shared, terminating: true }]), b([{ address: '10.244.1.51', port: 8080, local: false }])]);
    restarted.apply([a([{ ...shared, terminating: true }]), b([{ address: '10.244.1.51', port: 8080, local: false }])]);
    restarted.applyChanged(new Map([['default/a', []]]));
    expect(node.dp.maps.lb4_backends.entries().map(([, v]) => v.address).sort()).toEqual(['10.244.1.51']);
    node.writer = restarted;
  });

  it('a restarted writer reads the slots of each frontend back when frontends share an address and port across protocols and scopes', () => {
    const specs = [
      web(2, { address: '10.96.0.30', port: 53, proto: 'TCP', service: 'default/dns:tcp' }),
      web(3, { address: '10.96.0.30', port: 53, proto: 'UDP', service: 'default/dns:udp' }),
      // ETP=Local: its own slots in each scope.
      web(1, { address: NODE_IP, port: 30053, proto: 'UDP', kind: 'NodePort', service: 'default/dns:np', internalBackends: web(4).backends }),
    ];
    node.writer.apply(specs);
    // The slots as the map holds them, grouped by decoding every entry.
    const slots = new Map<string, number[]>();
    for (const [k, v] of node.dp.maps.lb4_services.entries()) {
      if (k.slot === 0) continue;
      const id = `${k.address}:${k.port}/${k.proto}#${k.scope}`;
      const ids = slots.get(id) ?? [];
      ids[k.slot - 1] = v.backendId;
      slots.set(id, ids);
    }
    const table = readServiceTable(node.dp.maps);
    const read = new Map(table.frontends.map((f) => [`${f.key.address}:${f.key.port}/${f.key.proto}#${f.key.scope}`, f.backendIds]));
    expect(read.size).toBe(4);
    expect(read).toEqual(slots);
    expect(read.get(`${NODE_IP}:30053/17#1`)).toHaveLength(4);
    const restarted = new ServiceWriter(node.dp.maps);
    expect(restarted.apply(specs)).toMatchObject({ frontendsWritten: 0, backendsWritten: 0, entriesWritten: 0, entriesDeleted: 0 });
    node.writer = restarted;
  });

  it('forwards to a new backend after an update, and never to a removed one', () => {
    const fe = (addrs: string[]): FrontendSpec => ({ address: NODE_IP, port: 30100, proto: 'TCP', kind: 'NodePort', backends: addrs.map((a) => ({ address: a, port: 8080, local: true })) });
    const dsts = () => {
      const seen = new Set<string>();
      for (let p = 0; p < 200; p++) {
        const r = node.run('tc_ingress', buildPacket([eth(), ipv4({ src: '10.0.10.2', dst: NODE_IP }), tcp({ sport: 20000 + p, dport: 30100, flags: 'S' })]));
        expect(r.retval).toBe(TcVerdict.OK);
        seen.add(String(decodePacket(r.data).find((l) => l.name === 'ipv4')!.fields.dst));
      }
      return [...seen].sort();
    };
    node.writer.apply([fe(['10.244.1.50'])]);
    expect(dsts()).toEqual(['10.244.1.50']);
    node.writer.apply([fe(['10.244.1.50', '10.244.1.51', '10.244.1.52'])]);
    node.flushState();
    expect(dsts()).toEqual(['10.244.1.50', '10.244.1.51', '10.244.1.52']);
    node.writer.apply([fe(['10.244.1.51', '10.244.1.52'])]);
    expect(dsts()).toEqual(['10.244.1.51', '10.244.1.52']); // established flows to .50 were re-balanced
  });

  it('a Service the maps cannot take is reported and keeps what it had; every other Service is written', () => {
    const many = Array.from({ length: 70 }, (_, i) => ({ address: `10.244.3.${i}`, port: 80, local: false }));
    const other = (n: number) => web(n, { address: '10.96.0.30', service: 'default/other:http' });
    node.writer.apply([web(2), other(1)]);
    const before = servicesView(node).filter((l) => l.startsWith('10.96.0.10'));
    // web grows past the 64 backends the map holds; "other" changes at the same time.
    const stats = node.writer.apply([web(0, { backends: many }), other(2)]);
    expect(stats.failures).toEqual([{ service: 'default/web', code: ErrorCode.MapFull, error: 'needs 70 more backend ids, 62 left (raise mapSizes.backends)' }]);
    expect(servicesView(node).filter((l) => l.startsWith('10.96.0.10'))).toEqual(before);
    expect(servicesView(node).filter((l) => l.startsWith('10.96.0.30:80/6#0 → count'))).toEqual(['10.96.0.30:80/6#0 → count=2 flags=1']);
    // Once it fits again it is written.
    const back = node.writer.apply([web(3), other(2)]);
    expect(back.failures).toEqual([]);
    expect(node.dp.maps.lb4_backends.entries().length).toBe(3);
  });

  it('a new Service that does not fit is left out whole, and the service map is never overfilled', () => {
    // 256 service entries: 60 frontends of 3 entries (master, slot, wildcard) fit, the next do not.
    const svc = (i: number): FrontendSpec => ({ address: `10.96.1.${i}`, port: 80, proto: 'TCP', kind: 'ClusterIP', service: `default/s${String(i).padStart(3, '0')}:http`, backends: [{ address: '10.244.1.5', port: 8080, local: true }] });
    const stats = node.writer.apply(Array.from({ length: 100 }, (_, i) => svc(i)));
    expect(stats.failures.length).toBeGreaterThan(0);
    expect(stats.failures[0]).toMatchObject({ code: ErrorCode.MapFull, error: expect.stringMatching(/raise mapSizes\.services/) });
    const written = node.dp.maps.lb4_services.entries().length;
    expect(written).toBeLessThanOrEqual(256);
    expect(written + 3).toBeGreaterThan(256);
    // Failures are whole Services: every programmed one is complete.
    expect(node.writer.frontendKeys().length + stats.failures.length).toBe(100);
  });

  it('backends are written in one order (address, then port), whatever order the spec lists them', () => {
    const order = (bs: string[]) => {
      node.writer.apply([web(0, { backends: bs.map((a) => ({ address: a, port: 8080, local: true })) })]);
      const slots = node.dp.maps.lb4_services.entries().filter(([k]) => k.address === '10.96.0.10' && k.slot > 0).sort(([a], [b]) => a.slot - b.slot);
      return slots.map(([, v]) => node.dp.maps.lb4_backends.lookup(v.backendId)!.address);
    };
    const a = order(['10.244.1.9', '10.244.1.10', '10.244.0.200']);
    node.writer.apply([]);
    const b = order(['10.244.0.200', '10.244.1.9', '10.244.1.10']);
    expect(a).toEqual(['10.244.0.200', '10.244.1.9', '10.244.1.10']);
    expect(b).toEqual(a);
  });

  it('a removed backend\'s id is not given to another backend while a flow may point at it', () => {
    node.writer.apply([web(1)]);
    const oldId = node.dp.maps.lb4_backends.entries()[0]![0];
    node.writer.apply([web(0, { backends: [{ address: '10.244.7.7', port: 8080, local: true }] })]);
    const newId = node.dp.maps.lb4_backends.entries()[0]![0];
    expect(newId).not.toBe(oldId);
    // Once no flow uses it, it is free again.
    expect(node.writer.releaseRetiredBackends(new Set([oldId]))).toBe(0);
    expect(node.writer.releaseRetiredBackends(new Set())).toBe(1);
    node.writer.apply([web(0, { backends: [{ address: '10.244.7.7', port: 8080, local: true }, { address: '10.244.7.8', port: 8080, local: true }] })]);
    expect(node.dp.maps.lb4_backends.entries().map(([id]) => id).sort()).toContain(oldId);
  });
});
