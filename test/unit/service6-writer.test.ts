// The lb6_services writer against an in-memory map that logs every write: the order that
// keeps the socket hooks from reading a count past the slots that exist, Services taken
// whole or not at all, the shared wildcard, and refusals of what the map cannot hold.
import { describe, expect, it } from 'vitest';
import { ErrorCode, FerryError } from '../../src/errors.js';
import type { BpfMap } from '../../src/ebpf/map.js';
import type { Lb6Key, Lb6Service, Lb6SrcRangeKey } from '../../src/datapath/layouts6.js';
import { LbFlags } from '../../src/datapath/layouts.js';
import { rangeFrontend, rangeId, type Lb6SrcRanges } from '../../src/datapath/source-ranges6.js';
import { Service6Writer, splitFamilies, withIPv6, type Lb6Names } from '../../src/datapath/service6-writer.js';
import type { ApplyStats } from '../../src/datapath/writer.js';
import type { BackendSpec, FrontendSpec } from '../../src/model/frontend.js';

class MemoryMap {
  readonly log: string[] = [];
  readonly held = new Map<string, [Lb6Key, Lb6Service]>();
  constructor(readonly maxEntries: number) {}
  private id = (k: Lb6Key) => `${k.address}/${k.port}/${k.proto}/${k.scope}/${k.slot}`;
  entries(): Array<[Lb6Key, Lb6Service]> {
    return [...this.held.values()];
  }
  update(k: Lb6Key, v: Lb6Service): void {
    if (!this.held.has(this.id(k)) && this.held.size >= this.maxEntries) throw new FerryError({ code: ErrorCode.MapFull, op: 'update lb6_services', cause: 'full' });
    this.log.push(`write ${k.port}#${k.slot}${k.slot ? ` ${v.address}` : ` count ${v.count}`}`);
    this.held.set(this.id(k), [k, v]);
  }
  delete(k: Lb6Key): boolean {
    this.log.push(`delete ${k.port}#${k.slot}`);
    return this.held.delete(this.id(k));
  }
}

const backends = (...last: number[]) => last.map((n) => ({ address: `fd00:244::${n}`, port: 8080, local: false }));
const fe = (port: number, service: string, bs: BackendSpec[] = backends(1), address = 'fd00:96::10'): FrontendSpec => ({ address, port, proto: 'TCP', kind: 'ClusterIP', backends: bs, service: `default/${service}:p` });
const writerOn = (m: MemoryMap) => new Service6Writer(m as unknown as BpfMap<Lb6Key, Lb6Service>);

describe('the lb6_services writer', () => {
  it('writes slots before the master that counts them, and deletes masters before their slots', () => {
    const m = new MemoryMap(64);
    const w = writerOn(m);
    w.apply([fe(80, 'web', backends(2, 1))]);
    // Slots in address order whatever the slices' order; the wildcard (port 0) with the masters.
    expect(m.log.splice(0)).toEqual(['write 80#2 fd00:244::2', 'write 80#1 fd00:244::1', 'write 0#0 count 0', 'write 80#0 count 2']);
    w.apply([fe(80, 'web', backends(1))]);
    expect(m.log.splice(0)).toEqual(['write 80#0 count 1', 'delete 80#2']);
    w.apply([]);
    expect(m.log.splice(0).slice(0, 2).every((l) => l.endsWith('#0'))).toBe(true);
    expect(m.held.size).toBe(0);
  });

  it('a Service that does not fit keeps what it had and is reported; the others are written', () => {
    const m = new MemoryMap(7);
    const w = writerOn(m);
    expect(w.apply([fe(80, 'web', backends(1)), fe(81, 'small')]).failures).toEqual([]); // a wildcard, two masters, two slots
    const s = w.apply([fe(80, 'web', backends(1, 2, 3, 4, 5)), fe(81, 'small', backends(2))]);
    expect(s.failures).toEqual([{ service: 'default/web', code: ErrorCode.MapFull, error: 'needs 4 entries in lb6_services, 2 left (raise mapSizes.services)' }]);
    expect(m.entries().filter(([k]) => k.port === 80).map(([, v]) => v.count + v.address).sort()).toEqual(['0fd00:244::1', '1::']);
    expect(m.entries().find(([k]) => k.port === 81 && k.slot === 1)?.[1].address).toBe('fd00:244::2');
    // A restarted writer: the Service that does not fit keeps what the map holds of it.
    const restarted = writerOn(m);
    expect(restarted.apply([fe(80, 'web', backends(1, 2, 3, 4, 5)), fe(81, 'small', backends(2))]).failures.map((f) => f.service)).toEqual(['default/web']);
    expect(m.entries().filter(([k]) => k.port === 80).length).toBe(2);
    // A Service that goes in the same sync makes room first: now it fits.
    m.log.length = 0;
    expect(w.apply([fe(80, 'web', backends(1, 2, 3, 4, 5))]).failures).toEqual([]);
    expect(m.log.slice(0, 2)).toEqual(['delete 81#0', 'delete 81#1']);
    expect(w.entries).toBe(7);
  });

  it('draining backends stand after the counted slots; UDP slots that lose their backend are counted', () => {
    const m = new MemoryMap(64);
    const w = writerOn(m);
    const dns = (bs: number[], draining: number[]): FrontendSpec => ({ ...fe(53, 'dns', backends(...bs)), proto: 'UDP', drainingBackends: backends(...draining) });
    expect(w.apply([dns([1], [])]).udpSlotsReplaced).toBe(0);
    // Backend 1 terminates but serves: out of the count, kept in a slot after it.
    expect(w.apply([dns([2], [1])]).udpSlotsReplaced).toBe(1);
    const master = m.entries().find(([k]) => k.port === 53 && k.slot === 0)![1];
    expect([master.count, master.draining]).toEqual([1, 1]);
    expect(m.entries().filter(([k]) => k.port === 53 && k.slot > 0).map(([k, v]) => `${k.slot} ${v.address}`).sort()).toEqual(['1 fd00:244::2', '2 fd00:244::1']);
    expect(w.apply([dns([2], [])]).udpSlotsReplaced).toBe(1);
  });

  it('Services at one address share its wildcard: it goes with the last of them', () => {
    const m = new MemoryMap(64);
    const w = writerOn(m);
    w.apply([fe(80, 'a'), fe(81, 'b')]);
    w.applyChanged(new Map([['default/a', []]]));
    expect(m.entries().some(([k]) => k.port === 0)).toBe(true);
    w.applyChanged(new Map([['default/b', []]]));
    expect(m.held.size).toBe(0);
  });

  it('a frontend\'s kind in its flags; unknown ports refused only at an address that is the Service\'s alone', () => {
    const m = new MemoryMap(64);
    const kinds: FrontendSpec[] = [
      { ...fe(30080, 'np', backends(1), 'fd00:30::21'), kind: 'NodePort' },
      { ...fe(80, 'lb', backends(1), 'fd00:100::1'), kind: 'LoadBalancer' },
      { ...fe(80, 'shared', backends(1), 'fd00:30::22'), kind: 'LoadBalancer', serviceOnlyAddress: false },
      { ...fe(80, 'ext', backends(1), 'fd00:e::1'), kind: 'ExternalIP' },
    ];
    expect(writerOn(m).apply(kinds).failures).toEqual([]);
    const masters = m.entries().filter(([k]) => k.slot === 0).map(([k, v]) => `${k.address} ${k.port} ${v.flags}`).sort();
    expect(masters).toEqual(['fd00:100::1 0 16', 'fd00:100::1 80 4', 'fd00:30::21 30080 2', 'fd00:30::22 80 4', 'fd00:e::1 80 8']);
  });

  it('a slot says whether its backend is this node\'s and whether it is terminating (for the CLI)', () => {
    const m = new MemoryMap(64);
    writerOn(m).apply([fe(80, 'web', [{ address: 'fd00:244::1', port: 8080, local: true }, { address: 'fd00:244::2', port: 8080, local: false, terminating: true }])]);
    expect(m.entries().filter(([k]) => k.slot > 0).map(([k, v]) => `${k.slot} ${v.address} ${v.flags}`).sort()).toEqual(['1 fd00:244::1 1', '2 fd00:244::2 2']);
  });

  it('ETP=Local: the external entry holds this node\'s backends (tc may DNAT them: local-only), the internal one the cluster\'s', () => {
    const m = new MemoryMap(64);
    const here = { address: 'fd00:244::1', port: 8080, local: true };
    const there = { address: 'fd00:244::2', port: 8080, local: false };
    const w = writerOn(m);
    expect(w.apply([
      { ...fe(80, 'lb', [here], 'fd00:100::1'), kind: 'LoadBalancer', internalBackends: [here, there], dropWhenEmpty: true },
      { ...fe(81, 'spread', [here, there], 'fd00:100::1'), kind: 'LoadBalancer' },
    ]).failures).toEqual([]);
    const masters = m.entries().filter(([k]) => k.slot === 0 && k.port !== 0).map(([k, v]) => `${k.port} scope ${k.scope} count ${v.count} flags ${v.flags}`).sort();
    // 4 LoadBalancer, 64 drop when empty, 1024 local-only.
    expect(masters).toEqual(['80 scope 0 count 1 flags 1092', '80 scope 1 count 2 flags 4', '81 scope 0 count 2 flags 4']);
    expect(m.entries().filter(([k]) => k.port === 80 && k.scope === 1 && k.slot > 0).map(([, v]) => v.address).sort()).toEqual(['fd00:244::1', 'fd00:244::2']);
    // The policy changes to Cluster: the internal entry goes.
    w.apply([{ ...fe(80, 'lb', [here, there], 'fd00:100::1'), kind: 'LoadBalancer' }]);
    expect(m.entries().filter(([k]) => k.scope === 1)).toEqual([]);
  });

  it('refuses a frontend it cannot encode (an IPv4 backend, SCTP) and writes the rest', () => {
    const m = new MemoryMap(64);
    const s = writerOn(m).apply([fe(80, 'mixed', [{ address: '10.244.1.1', port: 80, local: false }]), { ...fe(82, 'sctp'), proto: 'SCTP' }, fe(81, 'good')]);
    expect(s.failures.map((f) => [f.service, f.code])).toEqual([['default/mixed', ErrorCode.Codec], ['default/sctp', ErrorCode.Codec]]);
    expect(m.entries().map(([k]) => k.port).sort()).toEqual([0, 81, 81]);
  });

  it('reads the map back: a restarted writer removes what no Service needs, and rewrites nothing else', () => {
    const m = new MemoryMap(64);
    writerOn(m).apply([fe(80, 'web'), fe(81, 'gone')]);
    m.log.length = 0;
    const s = writerOn(m).apply([fe(80, 'web', [{ address: 'FD00:244:0::1', port: 8080, local: false }])]);
    expect([s.entriesWritten, s.entriesDeleted]).toEqual([0, 2]);
    expect(m.log).toEqual(['delete 81#0', 'delete 81#1']);
    // An entry deleted behind the writer's back: a plain apply trusts its view, a reread puts it right.
    const w = writerOn(m);
    m.held.delete('fd00:96::10/80/6/0/1');
    expect(w.apply([fe(80, 'web')]).entriesWritten).toBe(0);
    expect(w.apply([fe(80, 'web')], { reread: true }).entriesWritten).toBe(1);
    expect(m.held.has('fd00:96::10/80/6/0/1')).toBe(true);
  });
});

describe('the names of IPv6 frontends (lb6_names)', () => {
  it('a master\'s Service port name follows it: written with it, renamed, gone with it, read back after a restart', () => {
    const m = new MemoryMap(64);
    const names = new Map<string, [Lb6Key, { name: Buffer }]>();
    const namesMap = {
      entries: () => [...names.values()],
      update: (k: Lb6Key, v: { name: Buffer }) => void names.set(`${k.address}/${k.port}/${k.proto}`, [k, v]),
      delete: (k: Lb6Key) => names.delete(`${k.address}/${k.port}/${k.proto}`),
    };
    const writer = () => new Service6Writer(m as unknown as BpfMap<Lb6Key, Lb6Service>, namesMap as unknown as Lb6Names);
    const text = () => [...names.entries()].map(([k, [, v]]) => `${k} ${v.name.toString()}`).sort();
    const w = writer();
    w.apply([fe(80, 'web'), fe(81, 'api')]);
    expect(text()).toEqual(['fd00:96::10/80/6 default/web:p', 'fd00:96::10/81/6 default/api:p']);
    w.applyChanged(new Map([['default/web', [{ ...fe(80, 'web'), service: 'default/web:http' }]]]));
    expect(text()).toEqual(['fd00:96::10/80/6 default/web:http', 'fd00:96::10/81/6 default/api:p']);
    w.applyChanged(new Map([['default/api', []]]));
    expect(text()).toEqual(['fd00:96::10/80/6 default/web:http']);
    // A restarted writer: nothing to write for the same state; a name left by nobody goes.
    names.set('fd00:96::99/1/6', [{ address: 'fd00:96::99', port: 1, proto: 6, scope: 0, slot: 0 }, { name: Buffer.from('default/old:p') }]);
    const again = writer();
    again.apply([{ ...fe(80, 'web'), service: 'default/web:http' }]);
    expect(text()).toEqual(['fd00:96::10/80/6 default/web:http']);
  });
});

describe('loadBalancerSourceRanges of IPv6 LB IPs (lb6_src_ranges)', () => {
  /** An LPM map in memory writing into the lb6_services map's log, so that the order of both shows. */
  const rangesOn = (m: MemoryMap, maxEntries = 64) => {
    const held = new Map<string, Lb6SrcRangeKey>();
    const id = (k: Lb6SrcRangeKey) => `${k.frontend}/${k.port}/${k.proto} ${k.source}/${k.prefixlen - 160}`;
    const map = {
      maxEntries,
      keys: () => [...held.values()],
      update: (k: Lb6SrcRangeKey) => {
        if (!held.has(id(k)) && held.size >= maxEntries) throw new FerryError({ code: ErrorCode.MapFull, op: 'update lb6_src_ranges', cause: 'full' });
        m.log.push(`range ${id(k)}`);
        held.set(id(k), k);
      },
      delete: (k: Lb6SrcRangeKey) => {
        m.log.push(`unrange ${id(k)}`);
        return held.delete(id(k));
      },
    };
    return { held, map: map as unknown as Lb6SrcRanges };
  };
  const lb = (ranges: string[] | undefined, service = 'lb', port = 80): FrontendSpec => ({ ...fe(port, service, backends(1), 'fd00:100::1'), kind: 'LoadBalancer', ...(ranges ? { sourceRanges: ranges } : {}) });
  const RANGED = LbFlags.LB_F_LOAD_BALANCER | LbFlags.LB_F_SOURCE_RANGES;

  it('writes a frontend\'s ranges before the master that turns their check on, and removes them after it is off', () => {
    const m = new MemoryMap(64);
    const r = rangesOn(m);
    const w = new Service6Writer(m as unknown as BpfMap<Lb6Key, Lb6Service>, undefined, r.map);
    expect(w.apply([lb(['fd00:1::/64', 'fd00:2::7/128'])]).failures).toEqual([]);
    expect(m.log.splice(0)).toEqual(['range fd00:100::1/80/6 fd00:1::/64', 'range fd00:100::1/80/6 fd00:2::7/128', 'write 80#1 fd00:244::1', 'write 0#0 count 0', 'write 80#0 count 1']);
    expect(m.entries().find(([k]) => k.port === 80 && k.slot === 0)![1].flags).toBe(RANGED);
    // Host bits are cleared (the LPM key holds the network).
    w.apply([lb(['fd00:1::99/64'])]);
    expect(m.log.splice(0)).toEqual(['unrange fd00:100::1/80/6 fd00:2::7/128']);
    // Ranges gone: the master first, then its entries.
    w.apply([lb(undefined)]);
    expect(m.log.splice(0)).toEqual(['write 80#0 count 1', 'unrange fd00:100::1/80/6 fd00:1::/64']);
    expect(m.entries().find(([k]) => k.port === 80 && k.slot === 0)![1].flags).toBe(LbFlags.LB_F_LOAD_BALANCER);
    // Ranged again, then the Service goes: its master is deleted before its ranges.
    w.apply([lb(['fd00:1::/64'])]);
    m.log.length = 0;
    w.apply([]);
    expect(m.log.indexOf('delete 80#0')).toBeGreaterThanOrEqual(0);
    expect(m.log.indexOf('unrange fd00:100::1/80/6 fd00:1::/64')).toBeGreaterThan(m.log.indexOf('delete 80#0'));
    expect(r.held.size).toBe(0);
  });

  it('a Service whose ranges do not fit keeps what it had; a bad CIDR or a datapath without the map is its failure alone', () => {
    const m = new MemoryMap(64);
    const r = rangesOn(m, 2);
    const w = new Service6Writer(m as unknown as BpfMap<Lb6Key, Lb6Service>, undefined, r.map);
    expect(w.apply([lb(['fd00:1::/64'])]).failures).toEqual([]);
    const s = w.apply([lb(['fd00:1::/64', 'fd00:2::/64', 'fd00:3::/64'])]);
    expect(s.failures).toEqual([{ service: 'default/lb', code: ErrorCode.MapFull, error: 'needs 2 entries in lb6_src_ranges, 1 left (raise mapSizes.sourceRanges)' }]);
    expect([...r.held.keys()]).toEqual(['fd00:100::1/80/6 fd00:1::/64']);
    // Another Service going in the same sync frees its entries first: then it fits.
    expect(w.apply([lb(['fd00:9::/64'], 'other', 81)]).failures).toEqual([]);
    expect(w.apply([lb(['fd00:1::/64', 'fd00:2::/64'])]).failures).toEqual([]);
    expect([...r.held.keys()].sort()).toEqual(['fd00:100::1/80/6 fd00:1::/64', 'fd00:100::1/80/6 fd00:2::/64']);
    const bad = w.apply([lb(['fd00:1::/64', '10.0.0.0/8'], 'v4range', 82), lb(['fd00:1::/64'])]);
    expect(bad.failures).toEqual([{ service: 'default/v4range', code: ErrorCode.Codec, error: 'loadBalancerSourceRanges entry "10.0.0.0/8" is not an IPv6 CIDR' }]);
    const without = writerOn(new MemoryMap(64)).apply([lb(['fd00:1::/64']), fe(81, 'plain')]);
    expect(without.failures).toEqual([{ service: 'default/lb', code: ErrorCode.Codec, error: 'loadBalancerSourceRanges: this datapath has no lb6_src_ranges map' }]);
  });

  it('a CIDR is an IPv6 network and a length of 0..128, host bits cleared; anything else is no range', () => {
    const f = rangeFrontend('fd00:100::1', 80, 6);
    expect(rangeId(f, 'FD00:1::99/64')).toBe('fd00:100::1|80|6|64|fd00:1::');
    expect(rangeId(f, 'fd00:1::7')).toBe('fd00:100::1|80|6|128|fd00:1::7');
    expect(rangeId(f, '::/0')).toBe('fd00:100::1|80|6|0|::');
    for (const bad of ['fd00::/', 'fd00::/129', 'fd00::/-1', 'fd00::/6e1', 'fd00::/64/1', '10.0.0.0/8', 'fe80::1%eth0/64', '']) expect(rangeId(f, bad), bad).toBeUndefined();
  });

  it('a restarted writer reads the ranges back: the same state writes nothing, ranges no Service needs go', () => {
    const m = new MemoryMap(64);
    const r = rangesOn(m);
    new Service6Writer(m as unknown as BpfMap<Lb6Key, Lb6Service>, undefined, r.map).apply([lb(['fd00:1::/64']), lb(['fd00:5::/64'], 'gone', 81)]);
    m.log.length = 0;
    const s = new Service6Writer(m as unknown as BpfMap<Lb6Key, Lb6Service>, undefined, r.map).apply([lb(['fd00:1::/64'])]);
    expect(s.entriesWritten).toBe(0);
    expect(m.log.filter((l) => l.startsWith('range'))).toEqual([]);
    expect([...r.held.keys()]).toEqual(['fd00:100::1/80/6 fd00:1::/64']);
  });
});

describe('splitting a desired state by family', () => {
  it('hands the IPv4 writer the same list when there is no IPv6 frontend', () => {
    const v4: FrontendSpec[] = [{ ...fe(80, 'web'), address: '10.96.0.10', backends: [] }];
    expect(splitFamilies(v4)[0]).toBe(v4);
    const [a, b] = splitFamilies([...v4, fe(80, 'web')]);
    expect([a.length, b.map((f) => f.address)]).toEqual([1, ['fd00:96::10']]);
  });

  it('without lb6_services, Services with IPv6 frontends are failures, not dropped in silence', () => {
    const stats = { entriesWritten: 1, entriesDeleted: 0, failures: [] } as unknown as ApplyStats;
    const out = withIPv6(stats, undefined, () => ({ entriesWritten: 0, entriesDeleted: 0, udpSlotsReplaced: 0, failures: [] }), [fe(80, 'web'), fe(81, 'web')]);
    expect(out.failures).toEqual([{ service: 'default/web', code: ErrorCode.MapOp, error: 'IPv6 frontends: this datapath has no lb6_services map' }]);
  });
});
