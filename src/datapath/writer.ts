// The only writer of the service maps. A sync is a plan and an apply: plan() compares the
// desired frontends with what the maps hold (kept in memory, restored from the maps after
// a restart) and lists every write and delete; apply writes them make-before-break:
// backends, reverse NAT, each frontend's slots and Maglev table, source ranges, then its
// master entry (which makes the new slots visible at once), then wildcard entries; stale
// slots, frontends, wildcards, ranges, backends and tables are removed last.
import { BackendFlags, LbFlags, LbScope, Proto, protoName, type Lb4Backend, type Lb4Key, type Lb4Service } from './layouts.js';
import { IdAllocator } from './ids.js';
import type { DatapathMaps } from './loader.js';
import { MaglevTables, type MaglevBuild } from './maglev-tables.js';
import { readServiceTable } from './service-table.js';
import { SourceRangeSet } from './source-ranges.js';
import { backendId, frontendId, type BackendSpec, type FrontendKind, type FrontendSpec, type ProtoName } from '../model/frontend.js';

export { sourceRangeKey } from './source-ranges.js';

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

interface ScopedFrontend {
  f: FrontendSpec;
  scope: number;
  backends: FrontendSpec['backends'];
  dropWhenEmpty: boolean;
}

export type ServiceMaps = Pick<DatapathMaps, 'lb4_services' | 'lb4_backends' | 'lb4_reverse_nat' | 'lb4_src_ranges' | 'lb4_maglev' | 'lb4_names'>;

/** Every write and delete one sync makes, in the order apply() makes them. */
interface WritePlan {
  backendWrites: Array<[number, Lb4Backend]>;
  reverseNat: Array<[number, { address: string; port: number }]>;
  names: Array<[number, string]>;
  slotWrites: Array<[Lb4Key, Lb4Service]>;
  maglevBuilds: Map<string, MaglevBuild>;
  newRanges: string[];
  masterWrites: Array<[Lb4Key, Lb4Service, string, FrontendState]>;
  /** Frontends whose state changed without a new master entry. */
  states: Array<[string, FrontendState]>;
  specs: Array<[string, FrontendSpec]>;
  newWildcards: string[];
  /** Slots of shrunk frontends, then removed frontends (master first). */
  serviceDeletes: Lb4Key[];
  removedFrontends: Array<[string, FrontendState]>;
  staleWildcards: string[];
  staleRanges: string[];
  staleBackends: number[];
}

const wildcardKey = (address: string): Lb4Key => ({ address, port: 0, proto: 0, scope: LbScope.LB_SCOPE_EXTERNAL, slot: 0 });
const emptyService: Lb4Service = { backendId: 0, count: 0, revNatId: 0, flags: 0, affinityId: 0, affinityTimeout: 0 };

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
  private ranges!: SourceRangeSet;
  private maglev!: MaglevTables;

  constructor(
    private readonly maps: ServiceMaps,
    private readonly opts: { maglevTableSize?: number } = {},
  ) {
    this.backendIds = new IdAllocator('backend', maps.lb4_backends.maxEntries, 'mapSizes.backends');
    this.revNatIds = new IdAllocator('reverse-NAT', maps.lb4_reverse_nat.maxEntries, 'mapSizes.reverseNat');
    this.restore();
  }

  /** Rebuild the in-memory view (and the IDs) from what the maps hold. */
  private restore(): void {
    this.ranges = new SourceRangeSet(this.maps.lb4_src_ranges);
    this.maglev = new MaglevTables(this.maps.lb4_maglev, this.opts.maglevTableSize ?? 0);
    const table = readServiceTable(this.maps);
    for (const [id, b] of table.backends) {
      this.backends.set(id, b);
      this.backendIds.restore(backendId(b, protoName(b.proto)), id);
    }
    for (const a of table.wildcards) this.wildcards.add(a);
    for (const { key, master: v, backendIds } of table.frontends) {
      const fid = `${frontendId({ address: key.address, port: key.port, proto: protoName(key.proto) })}#${key.scope}`;
      this.frontends.set(fid, { key, revNatId: v.revNatId, flags: v.flags, affinityId: v.affinityId, affinityTimeout: v.affinityTimeout, tableId: v.backendId, backendIds, drainingIds: [] });
      this.revNatIds.restore(fid, v.revNatId);
      // Claimed again by the frontend's Service port on its first sync.
      if (v.affinityId) this.affinityIds.restoreUnclaimed(v.affinityId);
    }
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
      return this.write(this.plan(desired));
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
    this.backendIds.clear();
    this.revNatIds.clear();
    this.affinityIds.clear();
    this.restore();
  }

  private fidOf(f: FrontendSpec, scope: number): string {
    let ids = this.fids.get(f);
    if (!ids) this.fids.set(f, (ids = []));
    return (ids[scope] ??= `${frontendId(f)}#${scope}`);
  }

  /** The Service port's affinity id: every frontend of a port shares it, and keeps the one
   * its master entry carried before a restart, so clients keep their backends. */
  private affinityIdFor(f: FrontendSpec, fid: string): number {
    return this.affinityIds.claimOrAllocate(f.service ?? frontendId(f), this.frontends.get(fid)?.affinityId || undefined);
  }

  /** Compare `specs` with the maps and list every change; only IDs are allocated here. */
  private plan(specs: FrontendSpec[]): WritePlan {
    const plan: WritePlan = {
      backendWrites: [], reverseNat: [], names: [], slotWrites: [], maglevBuilds: new Map(), newRanges: [], masterWrites: [], states: [], specs: [],
      newWildcards: [], serviceDeletes: [], removedFrontends: [], staleWildcards: [], staleRanges: [], staleBackends: [],
    };
    // One entry per lookup scope: external always, internal where its backends differ.
    const desired: ScopedFrontend[] = specs.flatMap((f) => [
      { f, scope: LbScope.LB_SCOPE_EXTERNAL, backends: f.backends, dropWhenEmpty: Boolean(f.dropWhenEmpty) },
      ...(f.internalBackends ? [{ f, scope: LbScope.LB_SCOPE_INTERNAL, backends: f.internalBackends, dropWhenEmpty: false }] : []),
    ]);

    // Backends: allocate IDs; write new or changed ones.
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
    for (const [id, b] of wantBackends) {
      const have = this.backends.get(id);
      if (!have || have.address !== b.address || have.port !== b.port || have.proto !== b.proto || have.flags !== b.flags) plan.backendWrites.push([id, b]);
    }

    // Frontends: reverse NAT, slots, Maglev tables, source ranges, master.
    const wantFrontends = new Set<string>();
    const wantWildcards = new Set<string>();
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
        if (scope === LbScope.LB_SCOPE_EXTERNAL) for (const r of SourceRangeSet.entries(this.frontends.get(fid)!.revNatId, f.sourceRanges)) wantRanges.add(r);
        continue;
      }
      plan.specs.push([fid, f]);
      const key: Lb4Key = { address: f.address, port: f.port, proto: Proto[f.proto], scope, slot: 0 };
      const ids = frontendBackends.get(fid)!;
      const ranged = scope === LbScope.LB_SCOPE_EXTERNAL && (f.sourceRanges?.length ?? 0) > 0;
      const flags = kindFlag[f.kind] | (f.nodePortAny ? LbFlags.LB_F_NODE_PORT_ANY : 0) | (dropWhenEmpty ? LbFlags.LB_F_DROP_WHEN_EMPTY : 0) | (ranged ? LbFlags.LB_F_SOURCE_RANGES : 0) | (f.forwarding === 'dsr' ? LbFlags.LB_F_FWD_DSR : f.forwarding === 'snat' ? LbFlags.LB_F_FWD_SNAT : 0);
      const affinityTimeout = f.affinityTimeout ?? 0;
      const affinityId = affinityTimeout > 0 ? this.affinityIdFor(f, fid) : 0;
      const have = this.frontends.get(fid);
      const revNatId = this.revNatIds.allocate(fid);
      if (scope === LbScope.LB_SCOPE_EXTERNAL) for (const r of SourceRangeSet.entries(revNatId, f.sourceRanges)) wantRanges.add(r);
      if (!have) plan.reverseNat.push([revNatId, { address: f.address, port: f.port }]);
      if (f.service && (!have || this.lastSpecs.get(fid)?.service !== f.service)) plan.names.push([revNatId, f.service]);
      const oldIds = have?.backendIds ?? [];
      ids.forEach((id, i) => {
        if (oldIds[i] !== id) plan.slotWrites.push([{ ...key, slot: i + 1 }, { ...emptyService, backendId: id }]);
      });
      for (let s = ids.length + 1; s <= oldIds.length; s++) plan.serviceDeletes.push({ ...key, slot: s });
      const tableId = scope === LbScope.LB_SCOPE_EXTERNAL && f.kind !== 'ClusterIP'
        ? this.maglev.plan(`${f.service ?? frontendId(f)}#maglev`, have?.tableId ?? 0, ids, () => ids.map((id) => {
          // Positions name backends by address, so every node builds the same table.
          const b = wantBackends.get(id)!;
          return `${b.address}:${b.port}/${b.proto}`;
        }), plan.maglevBuilds)
        : 0;
      const changed = !have || have.backendIds.length !== ids.length || have.flags !== flags || have.affinityTimeout !== affinityTimeout || have.affinityId !== affinityId || have.revNatId !== revNatId || have.tableId !== tableId;
      const state: FrontendState = { key, revNatId, flags, affinityId, affinityTimeout, tableId, backendIds: ids, drainingIds: frontendDraining.get(fid) ?? [] };
      if (changed) plan.masterWrites.push([key, { backendId: tableId, count: ids.length, revNatId, flags, affinityId, affinityTimeout }, fid, state]);
      else plan.states.push([fid, state]);
    }
    plan.newRanges = this.ranges.added(wantRanges);
    for (const a of wantWildcards) if (!this.wildcards.has(a)) plan.newWildcards.push(a);

    // Removals.
    for (const [fid, st] of this.frontends) {
      if (wantFrontends.has(fid)) continue;
      plan.serviceDeletes.push(st.key, ...st.backendIds.map((_, i) => ({ ...st.key, slot: i + 1 })));
      plan.removedFrontends.push([fid, st]);
    }
    for (const a of this.wildcards) if (!wantWildcards.has(a)) plan.staleWildcards.push(a);
    plan.staleRanges = this.ranges.stale(wantRanges);
    for (const id of this.backends.keys()) if (!wantBackends.has(id)) plan.staleBackends.push(id);
    return plan;
  }

  /** Make the plan's writes, in make-before-break order. */
  private write(plan: WritePlan): ApplyStats {
    const stats: ApplyStats = { frontendsWritten: 0, frontendsRemoved: 0, backendsWritten: 0, backendsRemoved: 0, entriesWritten: 0, entriesDeleted: 0, removedBackends: [] };
    const m = this.maps;
    if (plan.backendWrites.length > 0) {
      m.lb4_backends.updateBatch(plan.backendWrites);
      for (const [id, b] of plan.backendWrites) this.backends.set(id, b);
      stats.backendsWritten += plan.backendWrites.length;
      stats.entriesWritten += plan.backendWrites.length;
    }
    for (const [id, v] of plan.reverseNat) m.lb4_reverse_nat.update(id, v);
    for (const [id, name] of plan.names) m.lb4_names.update(id, { name: Buffer.from(name.slice(0, 95)) });
    if (plan.slotWrites.length > 0) {
      m.lb4_services.updateBatch(plan.slotWrites);
      stats.entriesWritten += plan.slotWrites.length;
    }
    for (const [owner, b] of plan.maglevBuilds) {
      this.maglev.build(owner, b);
      stats.entriesWritten += 1;
    }
    // Source ranges before the master entries that turn them on.
    stats.entriesWritten += this.ranges.write(plan.newRanges);
    if (plan.masterWrites.length > 0) {
      m.lb4_services.updateBatch(plan.masterWrites.map(([k, v]) => [k, v]));
      for (const [, , fid, state] of plan.masterWrites) this.frontends.set(fid, state);
      stats.entriesWritten += plan.masterWrites.length;
      stats.frontendsWritten += plan.masterWrites.length;
    }
    for (const [fid, state] of plan.states) this.frontends.set(fid, state);
    for (const [fid, f] of plan.specs) this.lastSpecs.set(fid, f);
    if (plan.newWildcards.length > 0) {
      m.lb4_services.updateBatch(plan.newWildcards.map((a) => [wildcardKey(a), { ...emptyService, flags: LbFlags.LB_F_WILDCARD }]));
      for (const a of plan.newWildcards) this.wildcards.add(a);
      stats.entriesWritten += plan.newWildcards.length;
    }

    // Removals: stale slots, whole frontends, wildcards, ranges, then what nothing uses.
    const deletes = [...plan.serviceDeletes, ...plan.staleWildcards.map(wildcardKey)];
    if (deletes.length > 0) stats.entriesDeleted += m.lb4_services.deleteBatch(deletes);
    for (const a of plan.staleWildcards) this.wildcards.delete(a);
    // A removed frontend's reverse NAT goes after its entries: replies in flight still map.
    for (const [fid, st] of plan.removedFrontends) {
      this.frontends.delete(fid);
      this.lastSpecs.delete(fid);
      m.lb4_reverse_nat.delete(st.revNatId);
      m.lb4_names.delete(st.revNatId);
      this.revNatIds.release(fid);
      stats.frontendsRemoved++;
    }
    stats.entriesDeleted += this.ranges.remove(plan.staleRanges);
    if (plan.staleBackends.length > 0) {
      stats.entriesDeleted += m.lb4_backends.deleteBatch(plan.staleBackends);
      for (const id of plan.staleBackends) {
        const b = this.backends.get(id)!;
        stats.removedBackends.push(b);
        this.backends.delete(id);
        this.backendIds.release(backendId(b, protoName(b.proto)));
      }
      stats.backendsRemoved += plan.staleBackends.length;
    }
    this.collectIds();
    return stats;
  }

  /** Maglev tables and affinity ids no frontend carries any more. */
  private collectIds(): void {
    const usedTables = new Set<number>();
    const usedAffinity = new Set<number>();
    for (const st of this.frontends.values()) {
      if (st.tableId) usedTables.add(st.tableId);
      if (st.affinityId) usedAffinity.add(st.affinityId);
    }
    this.maglev.collect(usedTables);
    for (const owner of [...this.affinityIds.keys()]) {
      if (!usedAffinity.has(this.affinityIds.get(owner)!)) this.affinityIds.release(owner);
    }
    for (const id of this.affinityIds.unclaimed()) if (!usedAffinity.has(id)) this.affinityIds.releaseUnclaimed(id);
  }
}
