// The only writer of the service maps. apply() takes the whole desired set of frontends and
// changes the maps to match, make-before-break: backends first, then reverse NAT, then each
// frontend's slots, then its master entry (which makes the new slots visible at once),
// then wildcard entries; stale slots, frontends, wildcards and backends are removed last.
// IDs are restored from the maps, so an agent restart keeps conntrack entries valid.
import { ipv4FromString, ipv4ToString, u32Codec } from '../ebpf/codec.js';
import { BPF_F_INNER_MAP, MapType, createMap } from '../ebpf/map.js';
import { maglevTable } from './maglev.js';
import { BackendFlags, LbFlags, LbScope, Proto, protoName, type Lb4Backend, type Lb4Key, type Lb4Service, type Lb4SrcRangeKey, type ProtoName } from './layouts.js';
import { IdAllocator } from './ids.js';
import type { DatapathMaps } from './loader.js';
import { backendId, frontendId, type BackendSpec, type FrontendKind, type FrontendSpec } from './spec.js';

const kindFlag: Record<FrontendKind, number> = {
  ClusterIP: LbFlags.LB_F_CLUSTER_IP,
  NodePort: LbFlags.LB_F_NODE_PORT,
  LoadBalancer: LbFlags.LB_F_LOAD_BALANCER,
  ExternalIP: LbFlags.LB_F_EXTERNAL_IP,
};

interface FrontendState {
  key: Lb4Key; // slot 0
  revNatId: number;
  flags: number;
  affinityId: number;
  affinityTimeout: number;
  /** Maglev table id (0: none). */
  tableId: number;
  backendIds: number[];
  /** Terminating backends kept for the flows they still serve, in no slot. */
  drainingIds: number[];
}

export interface ApplyStats {
  frontendsWritten: number;
  frontendsRemoved: number;
  backendsWritten: number;
  backendsRemoved: number;
  entriesWritten: number;
  entriesDeleted: number;
  /** Backends no frontend uses any more: flows to them are stale. */
  removedBackends: Lb4Backend[];
}

const rangeId = (k: Lb4SrcRangeKey) => `${k.revNatId}|${k.prefixlen}|${k.source}`;
const rangeKey = (id: string): Lb4SrcRangeKey => {
  const [revNatId, prefixlen, source] = id.split('|');
  return { revNatId: Number(revNatId), prefixlen: Number(prefixlen), source: source! };
};

interface ScopedFrontend {
  f: FrontendSpec;
  scope: number;
  backends: FrontendSpec['backends'];
  dropWhenEmpty: boolean;
}

export type ServiceMaps = Pick<DatapathMaps, 'lb4_services' | 'lb4_backends' | 'lb4_reverse_nat' | 'lb4_src_ranges' | 'lb4_maglev' | 'lb4_names'>;

/** `10.0.0.0/8` → its LPM key for a frontend. */
export function sourceRangeKey(revNatId: number, cidr: string): Lb4SrcRangeKey {
  const [addr, bits = '32'] = cidr.split('/');
  const n = Number(bits);
  const ip = ipv4FromString(addr!);
  const mask = n === 0 ? 0 : (0xffffffff << (32 - n)) >>> 0;
  return { prefixlen: 32 + n, revNatId, source: ipv4ToString((ip & mask) >>> 0) };
}

export class ServiceWriter {
  private readonly backendIds: IdAllocator;
  private readonly revNatIds: IdAllocator;
  /** One id per Service port with ClientIP affinity, shared by all its frontends. */
  private readonly affinityIds = new IdAllocator('affinity', 65_535, 'fewer Services with sessionAffinity');
  private readonly backends = new Map<number, Lb4Backend>();
  private readonly frontends = new Map<string, FrontendState>();
  /** Addresses with a wildcard entry. */
  private readonly wildcards = new Set<string>();
  /** The spec object each frontend was last written from: the same object again means
   * "unchanged", so a sync after one Service changed does not re-diff ten thousand. */
  private readonly lastSpecs = new Map<string, FrontendSpec>();
  /** Frontend ids by spec object and scope: the model hands the same objects back for
   * unchanged Services, and at 100k frontends the ids are worth not rebuilding. */
  private readonly fids = new WeakMap<FrontendSpec, string[]>();
  /** loadBalancerSourceRanges entries, as `revNatId|prefixlen|source`. */
  private readonly ranges = new Set<string>();

  /** Maglev tables by owner (Service port): their id and the backend ids they were built from. */
  private readonly tables = new Map<string, { id: number; signature: string }>();
  private readonly tableIds: IdAllocator;

  constructor(
    private readonly maps: ServiceMaps,
    private readonly opts: { maglevTableSize?: number } = {},
  ) {
    this.tableIds = new IdAllocator('Maglev table', maps.lb4_maglev.maxEntries, 'mapSizes.maglevTables');
    this.backendIds = new IdAllocator('backend', maps.lb4_backends.maxEntries, 'mapSizes.backends');
    this.revNatIds = new IdAllocator('reverse-NAT', maps.lb4_reverse_nat.maxEntries, 'mapSizes.reverseNat');
    this.restore();
  }

  /** Rebuild the in-memory view (and the IDs) from what the maps hold. */
  private restore(): void {
    for (const k of this.maps.lb4_src_ranges.keys()) this.ranges.add(rangeId(k));
    // Tables a previous writer built are claimed again by their frontends on first apply.
    for (const id of this.maps.lb4_maglev.keys()) this.tableIds.restore(`restored:${id}`, id);
    for (const [id, b] of this.maps.lb4_backends.entries()) {
      this.backends.set(id, b);
      this.backendIds.restore(backendId(b, protoName(b.proto)), id);
    }
    const slots = new Map<string, Map<number, number>>();
    for (const [k, v] of this.maps.lb4_services.entries()) {
      const fid = `${frontendId({ address: k.address, port: k.port, proto: protoName(k.proto) })}#${k.scope}`;
      if (k.slot === 0) {
        if (v.flags & LbFlags.LB_F_WILDCARD) {
          this.wildcards.add(k.address);
          continue;
        }
        this.frontends.set(fid, { key: k, revNatId: v.revNatId, flags: v.flags, affinityId: v.affinityId, affinityTimeout: v.affinityTimeout, tableId: v.backendId, backendIds: [], drainingIds: [] });
        this.revNatIds.restore(fid, v.revNatId);
        if (v.affinityId && this.affinityIds.get(`restored:${v.affinityId}`) === undefined) this.affinityIds.restore(`restored:${v.affinityId}`, v.affinityId);
      } else {
        if (!slots.has(fid)) slots.set(fid, new Map());
        slots.get(fid)!.set(k.slot, v.backendId);
      }
    }
    for (const [fid, st] of this.frontends) {
      const s = slots.get(fid) ?? new Map<number, number>();
      const master = this.maps.lb4_services.lookup(st.key);
      const count = master?.count ?? 0;
      st.backendIds = Array.from({ length: count }, (_, i) => s.get(i + 1) ?? 0);
    }
  }

  /**
   * The Service port's affinity id: every frontend of a port shares it. After a restart
   * the id a frontend already carries is claimed for its Service port, so clients keep
   * their backends.
   */
  private affinityIdFor(f: FrontendSpec, fid: string): number {
    const owner = f.service ?? frontendId(f);
    const have = this.affinityIds.get(owner);
    if (have !== undefined) return have;
    const restored = this.frontends.get(fid)?.affinityId;
    if (restored && this.affinityIds.get(`restored:${restored}`) !== undefined) {
      this.affinityIds.release(`restored:${restored}`);
      this.affinityIds.restore(owner, restored);
      return restored;
    }
    return this.affinityIds.allocate(owner);
  }

  /**
   * The Maglev table for an external frontend (0 when Maglev is off or it has no backend).
   * Frontends of one Service port share it; a new backend set builds a new inner map and
   * swaps it in atomically.
   */
  private maglevTableFor(f: FrontendSpec, fid: string, ids: number[], stats: ApplyStats): number {
    const m = this.opts.maglevTableSize ?? 0;
    if (!m || ids.length === 0) return 0;
    const owner = `${f.service ?? frontendId(f)}#maglev`;
    const signature = ids.join(',');
    let t = this.tables.get(owner);
    if (t?.signature === signature) return t.id;
    if (!t) {
      const restored = this.frontends.get(fid)?.tableId;
      let id: number;
      if (restored && this.tableIds.get(`restored:${restored}`) !== undefined) {
        this.tableIds.release(`restored:${restored}`);
        this.tableIds.restore(owner, restored);
        id = restored;
      } else {
        id = this.tableIds.allocate(owner);
      }
      t = { id, signature: '' };
      this.tables.set(owner, t);
    }
    // Positions name backends by address, so every node builds the same table.
    const names = ids.map((id) => {
      const b = this.backends.get(id)!;
      return `${b.address}:${b.port}/${b.proto}`;
    });
    const order = maglevTable(names, m);
    const inner = createMap({ type: MapType.Array, name: 'lb4_maglev_in', key: u32Codec, value: u32Codec, maxEntries: m, flags: BPF_F_INNER_MAP });
    try {
      inner.updateBatch(Array.from(order, (i, pos) => [pos, ids[i]!] as [number, number]));
      this.maps.lb4_maglev.update(t.id, inner.fd);
    } finally {
      inner.close(); // the outer map holds it now
    }
    t.signature = signature;
    stats.entriesWritten += 1;
    return t.id;
  }

  /** Frontend keys currently programmed (for tests and the CLI). */
  frontendKeys(): string[] {
    return [...this.frontends.keys()];
  }

  /**
   * Make the maps hold exactly `desired`. On failure (a full map, say) the maps may hold
   * part of the change: the in-memory view is rebuilt from them, so the next apply
   * continues from what is really there.
   */
  apply(desired: FrontendSpec[]): ApplyStats {
    try {
      return this.applyOnce(desired);
    } catch (e) {
      this.resync();
      throw e;
    }
  }

  private resync(): void {
    this.backends.clear();
    this.frontends.clear();
    this.wildcards.clear();
    this.lastSpecs.clear();
    this.ranges.clear();
    this.backendIds.clear();
    this.revNatIds.clear();
    this.affinityIds.clear();
    this.tables.clear();
    this.tableIds.clear();
    this.restore();
  }

  private fidOf(f: FrontendSpec, scope: number): string {
    let ids = this.fids.get(f);
    if (!ids) this.fids.set(f, (ids = []));
    return (ids[scope] ??= `${frontendId(f)}#${scope}`);
  }

  private applyOnce(specs: FrontendSpec[]): ApplyStats {
    const stats: ApplyStats = { frontendsWritten: 0, frontendsRemoved: 0, backendsWritten: 0, backendsRemoved: 0, entriesWritten: 0, entriesDeleted: 0, removedBackends: [] };
    // One entry per lookup scope: external always, internal where its backends differ.
    const desired: ScopedFrontend[] = specs.flatMap((f) => [
      { f, scope: LbScope.LB_SCOPE_EXTERNAL, backends: f.backends, dropWhenEmpty: Boolean(f.dropWhenEmpty) },
      ...(f.internalBackends ? [{ f, scope: LbScope.LB_SCOPE_INTERNAL, backends: f.internalBackends, dropWhenEmpty: false }] : []),
    ]);

    // 1. Backends: allocate IDs, write new or changed ones.
    const wantBackends = new Map<number, Lb4Backend>();
    const frontendBackends = new Map<string, number[]>();
    const frontendDraining = new Map<string, number[]>();
    const unchanged = new Set<string>();
    const want = (b: BackendSpec, proto: ProtoName, terminating: boolean): number => {
      const id = this.backendIds.allocate(backendId(b, proto));
      const flags = (b.local ? BackendFlags.LB_BACKEND_F_LOCAL : 0) | (terminating ? BackendFlags.LB_BACKEND_F_TERMINATING : 0);
      const value: Lb4Backend = { address: b.address, port: b.port, proto: Proto[proto], flags };
      const prev = wantBackends.get(id);
      // Locality and termination belong to the endpoint: frontends sharing it agree.
      wantBackends.set(id, prev ? { ...value, flags: prev.flags | value.flags } : value);
      return id;
    };
    for (const { f, scope, backends } of desired) {
      const fid = this.fidOf(f, scope);
      const known = this.frontends.get(fid);
      if (known && this.lastSpecs.get(fid) === f) {
        unchanged.add(fid);
        frontendBackends.set(fid, known.backendIds);
        frontendDraining.set(fid, known.drainingIds);
        for (const ids of [known.backendIds, known.drainingIds]) {
          for (const id of ids) {
            const b = this.backends.get(id);
            if (b && !wantBackends.has(id)) wantBackends.set(id, b);
          }
        }
        continue;
      }
      frontendBackends.set(fid, backends.map((b) => want(b, f.proto, Boolean(b.terminating))));
      frontendDraining.set(fid, (f.drainingBackends ?? []).map((b) => want(b, f.proto, true)));
    }
    const backendWrites: Array<[number, Lb4Backend]> = [];
    for (const [id, b] of wantBackends) {
      const have = this.backends.get(id);
      if (!have || have.address !== b.address || have.port !== b.port || have.proto !== b.proto || have.flags !== b.flags) backendWrites.push([id, b]);
    }
    if (backendWrites.length > 0) {
      this.maps.lb4_backends.updateBatch(backendWrites);
      for (const [id, b] of backendWrites) this.backends.set(id, b);
      stats.backendsWritten += backendWrites.length;
      stats.entriesWritten += backendWrites.length;
    }

    // 2-3. Frontends: reverse NAT, slots, then master.
    const wantFrontends = new Set<string>();
    const wantWildcards = new Set<string>();
    const slotWrites: Array<[Lb4Key, Lb4Service]> = [];
    const masterWrites: Array<[Lb4Key, Lb4Service, string, FrontendState]> = [];
    const staleSlots: Lb4Key[] = [];
    const wantRanges = new Set<string>();
    for (const { f, scope, dropWhenEmpty } of desired) {
      const fid = this.fidOf(f, scope);
      if (wantFrontends.has(fid)) continue; // duplicates are the model's bug; first wins
      wantFrontends.add(fid);
      // The "known address, unknown port → drop" entry is only for addresses that belong to
      // Services alone. A node address (NodePort, and often an externalIP) also carries the
      // host's own traffic: its other ports must reach the host.
      if (scope === LbScope.LB_SCOPE_EXTERNAL && (f.kind === 'ClusterIP' || f.kind === 'LoadBalancer')) wantWildcards.add(f.address);
      if (unchanged.has(fid)) {
        const known = this.frontends.get(fid)!;
        if (scope === LbScope.LB_SCOPE_EXTERNAL) for (const c of f.sourceRanges ?? []) wantRanges.add(rangeId(sourceRangeKey(known.revNatId, c)));
        continue;
      }
      this.lastSpecs.set(fid, f);
      const key: Lb4Key = { address: f.address, port: f.port, proto: Proto[f.proto], scope, slot: 0 };
      const ids = frontendBackends.get(fid)!;
      const ranged = scope === LbScope.LB_SCOPE_EXTERNAL && (f.sourceRanges?.length ?? 0) > 0;
      const flags = kindFlag[f.kind] | (f.nodePortAny ? LbFlags.LB_F_NODE_PORT_ANY : 0) | (dropWhenEmpty ? LbFlags.LB_F_DROP_WHEN_EMPTY : 0) | (ranged ? LbFlags.LB_F_SOURCE_RANGES : 0) | (f.forwarding === 'dsr' ? LbFlags.LB_F_FWD_DSR : f.forwarding === 'snat' ? LbFlags.LB_F_FWD_SNAT : 0);
      const affinityTimeout = f.affinityTimeout ?? 0;
      const affinityId = affinityTimeout > 0 ? this.affinityIdFor(f, fid) : 0;
      const have = this.frontends.get(fid);
      const revNatId = this.revNatIds.allocate(fid);
      if (scope === LbScope.LB_SCOPE_EXTERNAL) for (const c of f.sourceRanges ?? []) wantRanges.add(rangeId(sourceRangeKey(revNatId, c)));
      if (!have) this.maps.lb4_reverse_nat.update(revNatId, { address: f.address, port: f.port });
      if (f.service && (!have || this.lastSpecs.get(fid)?.service !== f.service)) this.maps.lb4_names.update(revNatId, { name: Buffer.from(f.service.slice(0, 95)) });
      const oldIds = have?.backendIds ?? [];
      ids.forEach((id, i) => {
        if (oldIds[i] !== id) slotWrites.push([{ ...key, slot: i + 1 }, { backendId: id, count: 0, revNatId: 0, flags: 0, affinityId: 0, affinityTimeout: 0 }]);
      });
      for (let s = ids.length + 1; s <= oldIds.length; s++) staleSlots.push({ ...key, slot: s });
      const tableId = scope === LbScope.LB_SCOPE_EXTERNAL && f.kind !== 'ClusterIP' ? this.maglevTableFor(f, fid, ids, stats) : 0;
      const changed = !have || have.backendIds.length !== ids.length || have.flags !== flags || have.affinityTimeout !== affinityTimeout || have.affinityId !== affinityId || have.revNatId !== revNatId || have.tableId !== tableId;
      const state: FrontendState = { key, revNatId, flags, affinityId, affinityTimeout, tableId, backendIds: ids, drainingIds: frontendDraining.get(fid) ?? [] };
      if (changed) {
        masterWrites.push([key, { backendId: tableId, count: ids.length, revNatId, flags, affinityId, affinityTimeout }, fid, state]);
      } else {
        this.frontends.set(fid, state);
      }
    }
    if (slotWrites.length > 0) {
      this.maps.lb4_services.updateBatch(slotWrites);
      stats.entriesWritten += slotWrites.length;
    }
    // Source ranges before the master entries that turn them on.
    const newRanges = [...wantRanges].filter((r) => !this.ranges.has(r));
    if (newRanges.length > 0) {
      for (const r of newRanges) this.maps.lb4_src_ranges.update(rangeKey(r), 1);
      for (const r of newRanges) this.ranges.add(r);
      stats.entriesWritten += newRanges.length;
    }
    if (masterWrites.length > 0) {
      this.maps.lb4_services.updateBatch(masterWrites.map(([k, v]) => [k, v]));
      for (const [, , fid, state] of masterWrites) this.frontends.set(fid, state);
      stats.entriesWritten += masterWrites.length;
      stats.frontendsWritten += masterWrites.length;
    }

    // 4. Wildcards for Service addresses.
    const newWildcards: string[] = [];
    for (const a of wantWildcards) if (!this.wildcards.has(a)) newWildcards.push(a);
    if (newWildcards.length > 0) {
      this.maps.lb4_services.updateBatch(
        newWildcards.map((a) => [{ address: a, port: 0, proto: 0, scope: LbScope.LB_SCOPE_EXTERNAL, slot: 0 }, { backendId: 0, count: 0, revNatId: 0, flags: LbFlags.LB_F_WILDCARD, affinityId: 0, affinityTimeout: 0 }]),
      );
      for (const a of newWildcards) this.wildcards.add(a);
      stats.entriesWritten += newWildcards.length;
    }

    // 5. Removals: stale slots of shrunk frontends, whole frontends (master first).
    const deletes: Lb4Key[] = [...staleSlots];
    for (const [fid, st] of this.frontends) {
      if (wantFrontends.has(fid)) continue;
      deletes.push(st.key, ...st.backendIds.map((_, i) => ({ ...st.key, slot: i + 1 })));
      this.frontends.delete(fid);
      this.lastSpecs.delete(fid);
      this.maps.lb4_reverse_nat.delete(st.revNatId);
      this.maps.lb4_names.delete(st.revNatId);
      this.revNatIds.release(fid);
      stats.frontendsRemoved++;
    }
    for (const a of this.wildcards) {
      if (wantWildcards.has(a)) continue;
      deletes.push({ address: a, port: 0, proto: 0, scope: LbScope.LB_SCOPE_EXTERNAL, slot: 0 });
      this.wildcards.delete(a);
    }
    if (deletes.length > 0) stats.entriesDeleted += this.maps.lb4_services.deleteBatch(deletes);

    const staleRanges = [...this.ranges].filter((r) => !wantRanges.has(r));
    for (const r of staleRanges) {
      if (this.maps.lb4_src_ranges.delete(rangeKey(r))) stats.entriesDeleted++;
      this.ranges.delete(r);
    }

    // 6. Backends nothing points at any more.
    const staleBackends: number[] = [];
    for (const id of this.backends.keys()) if (!wantBackends.has(id)) staleBackends.push(id);
    if (staleBackends.length > 0) {
      stats.entriesDeleted += this.maps.lb4_backends.deleteBatch(staleBackends);
      for (const id of staleBackends) {
        const b = this.backends.get(id)!;
        stats.removedBackends.push(b);
        this.backends.delete(id);
        this.backendIds.release(backendId(b, protoName(b.proto)));
      }
      stats.backendsRemoved += staleBackends.length;
    }

    // 7. Maglev tables and affinity ids no frontend carries any more.
    const usedTables = new Set<number>();
    const usedAffinity = new Set<number>();
    for (const st of this.frontends.values()) {
      if (st.tableId) usedTables.add(st.tableId);
      if (st.affinityId) usedAffinity.add(st.affinityId);
    }
    for (const [owner, t] of [...this.tables]) {
      if (usedTables.has(t.id)) continue;
      this.maps.lb4_maglev.delete(t.id);
      this.tables.delete(owner);
      this.tableIds.release(owner);
    }
    for (const owner of [...this.tableIds.keys()]) {
      const id = this.tableIds.get(owner)!;
      if (owner.startsWith('restored:') && !usedTables.has(id)) {
        this.maps.lb4_maglev.delete(id);
        this.tableIds.release(owner);
      }
    }
    for (const owner of [...this.affinityIds.keys()]) {
      if (!usedAffinity.has(this.affinityIds.get(owner)!)) this.affinityIds.release(owner);
    }
    return stats;
  }
}
