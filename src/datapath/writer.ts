// The only writer of the service maps. A sync is a plan and an apply: planWrites()
// (write-plan.ts) compares the desired frontends with what the maps hold (kept here,
// restored from the maps after a restart) and lists every write and delete, Service by
// Service as they fit; write() makes them make-before-break:
// backends, reverse NAT, each frontend's slots and Maglev table, source ranges, then its
// master entry (which makes the new slots visible at once), then wildcard entries; stale
// slots, frontends, wildcards, ranges, backends and tables are removed last. The filter of
// Service addresses (address-filter.ts) takes a new address before its first entry and
// lets one go after its last.
import { LbFlags, LbScope, protoName, type Lb4Backend, type Lb4Key, type Lb4Service } from './layouts.js';
import { IdAllocator, backendKey } from './ids.js';
import { IdTable } from './id-table.js';
import type { DatapathMaps } from './loader.js';
import { ServiceAddressFilter } from './address-filter.js';
import { MaglevTables } from './maglev-tables.js';
import { readServiceTable } from './service-table.js';
import { SourceRangeSet } from './source-ranges.js';
import { backendIndexKey, isLocal } from './backend-index.js';
import { emptyService, firstBackendsMatch, planChangedWrites, planWrites, type FrontendState, type WriteFailure, type WritePlan, type WriterState } from './write-plan.js';
import { ErrorCode, FerryError } from '../errors.js';
import { NONE, frontendId, type FrontendSpec } from '../model/frontend.js';
import { flat } from '../model/flat-string.js';
import { Service6Writer, withIPv6, splitFamilies, splitChanges } from './service6-writer.js';

export { sourceRangeKey } from './source-ranges.js';

export interface ApplyStats {
  frontendsWritten: number;
  frontendsRemoved: number;
  backendsWritten: number;
  backendsRemoved: number;
  entriesWritten: number;
  entriesDeleted: number;
  /** Backends no frontend uses any more: flows to them are stale. */
  removedBackends: Lb4Backend[];
  /** Their ids (retired: not given to another backend while a flow may point at them). */
  removedBackendIds: number[];
  /** External frontends no entry holds any more: flows to them are stale (the datapath
   * sends an established flow's packets on without looking its frontend up). */
  removedFrontends: Array<{ address: string; port: number; proto: number }>;
  /** Services the maps could not take: they keep what they had; everything else is written. */
  failures: WriteFailure[];
  /** IPv6 UDP backend slots deleted or given another backend (their connected sockets may be stale). */
  ipv6UdpSlotsReplaced?: number;
}

export type ServiceMaps = Pick<DatapathMaps, 'lb4_services' | 'lb4_backends' | 'lb4_backend_ids' | 'lb4_reverse_nat' | 'lb4_src_ranges' | 'lb4_maglev' | 'lb4_names' | 'lb4_addr_filter'> & Partial<Pick<DatapathMaps, 'lb6_services' | 'lb6_names' | 'lb6_src_ranges'>>;

/** A frontend's id in one lookup scope: the writer's key for it (kept, so flattened). */
const scopedFid = (f: Parameters<typeof frontendId>[0], scope: number) => flat(`${frontendId(f)}#${scope}`);

const wildcardKey = (address: string): Lb4Key => ({ address, port: 0, proto: 0, scope: LbScope.LB_SCOPE_EXTERNAL, slot: 0 });

export class ServiceWriter implements WriterState {
  readonly backendIds: IdAllocator<number>;
  readonly revNatIds: IdAllocator;
  /** One id per Service port with ClientIP affinity, shared by all its frontends. */
  readonly affinityIds = new IdAllocator('affinity', 65_535, 'fewer Services with sessionAffinity');
  readonly backends = new IdTable<Lb4Backend>();
  readonly frontends = new Map<string, FrontendState>();
  /** Addresses with a wildcard entry. */
  readonly wildcards = new Set<string>();
  /** The spec object each frontend was last written from: the same object again means
   * "unchanged", so a sync after one Service changed does not re-diff ten thousand. */
  readonly lastSpecs = new Map<string, FrontendSpec>();
  /** Frontend ids by spec object and scope: the model hands the same objects back for
   * unchanged Services, and at 100k frontends the ids are worth not rebuilding. */
  private readonly fids = new WeakMap<FrontendSpec, string[]>();
  /** Frontend ids by Service, and each one's Service (kept by every sync since a full one). */
  readonly byService = new Map<string, string[]>();
  private readonly serviceOfFid = new Map<string, string>();
  /** How many frontends use each backend id and hold each address's wildcard. */
  readonly backendRefs = new IdTable<number>();
  readonly wildcardRefs = new Map<string, number>();
  /** lb4_services entries the frontends hold (master and slots), kept with the reference counts. */
  private frontendEntries = 0;
  /** A full apply has run since the view was last read from the maps: applyChanged may run. */
  private indexed = false;
  /** The view was just read from the maps and nothing was written since (a reread would read the same). */
  private fresh = false;
  ranges!: SourceRangeSet;
  maglev!: MaglevTables;
  /** The addresses of external frontends and wildcards, as the datapath's filter holds them. */
  readonly addressFilter: ServiceAddressFilter;
  readonly capacity: { services: number; sourceRanges: number };
  /** IPv6 frontends (socket hooks only), when the datapath has lb6_services. */
  private readonly ipv6: Service6Writer | undefined;

  constructor(
    private readonly maps: ServiceMaps,
    private readonly opts: { maglevTableSize?: number } = {},
  ) {
    // Ids index lb4_backends, an array whose slot 0 stays empty (id 0 is no backend).
    this.backendIds = new IdAllocator<number>('backend', maps.lb4_backends.maxEntries - 1, 'mapSizes.backends');
    this.revNatIds = new IdAllocator('reverse-NAT', maps.lb4_reverse_nat.maxEntries, 'mapSizes.reverseNat');
    this.capacity = { services: maps.lb4_services.maxEntries, sourceRanges: maps.lb4_src_ranges.maxEntries };
    this.addressFilter = new ServiceAddressFilter(maps.lb4_addr_filter);
    this.ipv6 = maps.lb6_services && new Service6Writer(maps.lb6_services, maps.lb6_names, maps.lb6_src_ranges);
    this.restore();
  }

  /** How long the last read of the maps took (a restart's restore, in ms). */
  restoreMs = 0;

  /** Rebuild the in-memory view (and the IDs) from what the maps hold. */
  private restore(): void {
    const started = performance.now();
    this.fresh = true;
    this.ranges = new SourceRangeSet(this.maps.lb4_src_ranges);
    this.maglev = new MaglevTables(this.maps.lb4_maglev, this.opts.maglevTableSize ?? 0);
    const table = readServiceTable(this.maps);
    for (const [id, b] of table.backends) {
      this.backends.set(id, b);
      this.backendIds.restore(backendKey(b.address, b.port, b.proto), id);
    }
    this.addressFilter.reset();
    for (const a of table.wildcards) this.addWildcard(a);
    for (const { key, master: v, backendIds, name } of table.frontends) {
      const fid = scopedFid({ address: key.address, port: key.port, proto: protoName(key.proto) }, key.scope);
      const state: FrontendState = { key, revNatId: v.revNatId, flags: v.flags, affinityId: v.affinityId, affinityTimeout: v.affinityTimeout, tableId: v.backendId, backendIds, drainingIds: NONE, wildcard: key.scope === LbScope.LB_SCOPE_EXTERNAL && this.wildcards.has(key.address), name };
      if (!firstBackendsMatch(v, backendIds)) state.firstBackendsStale = true;
      this.frontends.set(fid, state);
      this.account(undefined, state);
      this.revNatIds.restore(fid, v.revNatId);
      // Claimed again by the frontend's Service port on its first sync.
      if (v.affinityId) this.affinityIds.restoreUnclaimed(v.affinityId);
    }
    this.restoreMs = Math.round(performance.now() - started);
  }

  /** Does an IPv6 frontend still hold this backend (tc's IPv6 flows: ct-gc.ts)? */
  servesFlow6(frontend: { address: string; port: number; proto: number }, backend: { address: string; port: number }): boolean {
    return this.ipv6?.servesFlow(frontend, backend) ?? false;
  }

  /** Entries the service maps hold, from the writer's own view (no map walk). */
  entryCounts(): { lb4_services: number; lb4_backends: number; lb4_reverse_nat: number; lb6_services?: number } {
    return { lb4_services: this.serviceEntries(), lb4_backends: this.backends.size, lb4_reverse_nat: this.frontends.size, ...(this.ipv6 ? { lb6_services: this.ipv6.entries } : {}) };
  }

  /** Entries lb4_services holds: every frontend's master and slots, and the wildcards. */
  serviceEntries(): number {
    return this.wildcards.size + this.frontendEntries;
  }

  /** The external frontends the maps hold (flows to any other are orphans: ct-gc.ts). */
  externalFrontends(): Array<{ address: string; port: number; proto: number }> {
    return [...this.frontends.values()].filter((fs) => fs.key.scope === LbScope.LB_SCOPE_EXTERNAL).map(({ key }) => ({ address: key.address, port: key.port, proto: key.proto }));
  }

  /** Frontend keys currently programmed (for tests and the CLI). */
  frontendKeys(): string[] {
    return [...this.frontends.keys()];
  }

  /**
   * Make the maps hold exactly `desired`. On failure (a full map, say) the maps may hold
   * part of the change: the in-memory view is rebuilt from them, so the next apply
   * continues from what is really there. With `reread`, the view is read from the maps
   * first, so whatever changed them behind the writer's back is put right.
   */
  apply(desired: FrontendSpec[], opts: { reread?: boolean } = {}): ApplyStats {
    const [v4, v6] = splitFamilies(desired);
    try {
      if (opts.reread && !this.fresh) this.resync();
      const stats = this.write(planWrites(this, v4));
      this.indexed = true;
      return withIPv6(stats, this.ipv6, (w) => w.apply(v6, opts), v6);
    } catch (e) {
      this.resync();
      throw e;
    }
  }

  /**
   * Make the maps hold `changes` (Service → every frontend it now has) and leave every
   * other Service as it is. Needs a full apply first (the view of which frontends belong to
   * which Service comes from it).
   */
  applyChanged(changes: ReadonlyMap<string, FrontendSpec[]>): ApplyStats {
    if (!this.indexed) throw new FerryError({ code: ErrorCode.Internal, op: 'apply changed Services', cause: 'no full apply since the maps were read', hint: 'apply the whole desired state first' });
    const [v4, v6] = splitChanges(changes);
    try {
      return withIPv6(this.write(planChangedWrites(this, v4)), this.ipv6, (w) => w.applyChanged(v6), [...v6.values()].flat());
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
    this.byService.clear();
    this.serviceOfFid.clear();
    this.backendRefs.clear();
    this.wildcardRefs.clear();
    this.frontendEntries = 0;
    this.indexed = false;
    this.restore();
  }

  /** Reference counts: `old` lets go of its backends and wildcard, `next` takes its own. */
  private account(old: FrontendState | undefined, next: FrontendState | undefined): void {
    const bump = <K>(m: { get(k: K): number | undefined; set(k: K, n: number): unknown; delete(k: K): unknown }, k: K, by: number) => {
      const n = (m.get(k) ?? 0) + by;
      if (n > 0) m.set(k, n);
      else m.delete(k);
    };
    for (const [fs, by] of [[old, -1], [next, +1]] as const) {
      if (!fs) continue;
      this.frontendEntries += by * (1 + fs.backendIds.length);
      for (const id of fs.backendIds) bump(this.backendRefs, id, by);
      for (const id of fs.drainingIds) bump(this.backendRefs, id, by);
      if (fs.wildcard) bump(this.wildcardRefs, fs.key.address, by);
      if (fs.key.scope === LbScope.LB_SCOPE_EXTERNAL) this.addressFilter.holdFrontend(fs.key.address, fs.key.port, by);
    }
  }

  private addWildcard(address: string): void {
    if (this.wildcards.has(address)) return;
    this.wildcards.add(address);
    this.addressFilter.holdWildcard(address, +1);
  }

  private removeWildcard(address: string): void {
    if (this.wildcards.delete(address)) this.addressFilter.holdWildcard(address, -1);
  }

  private own(fid: string, service: string | undefined): void {
    const was = this.serviceOfFid.get(fid);
    if (was === service) return;
    if (was !== undefined) {
      // A short list, not a Set: a Service has a few frontends, and 50k Sets are ~9 MiB.
      const list = this.byService.get(was)!;
      list.splice(list.indexOf(fid), 1);
      if (list.length === 0) this.byService.delete(was);
    }
    if (service === undefined) {
      this.serviceOfFid.delete(fid);
      return;
    }
    this.serviceOfFid.set(fid, service);
    const list = this.byService.get(service);
    if (list) list.push(fid);
    else this.byService.set(service, [fid]);
  }

  private setState(fid: string, state: FrontendState): void {
    this.account(this.frontends.get(fid), state);
    this.frontends.set(fid, state);
  }

  fidOf(f: FrontendSpec, scope: number): string {
    let ids = this.fids.get(f);
    if (!ids) this.fids.set(f, (ids = []));
    return (ids[scope] ??= scopedFid(f, scope));
  }

  /** Make the plan's writes, in make-before-break order. */
  private write(plan: WritePlan): ApplyStats {
    this.fresh = false;
    const stats: ApplyStats = { frontendsWritten: 0, frontendsRemoved: 0, backendsWritten: 0, backendsRemoved: 0, entriesWritten: 0, entriesDeleted: 0, removedBackends: [], removedBackendIds: [], removedFrontends: [], failures: plan.failures };
    const m = this.maps;
    this.addressFilter.admit(plan.masterWrites.filter(([k]) => k.scope === LbScope.LB_SCOPE_EXTERNAL).map(([k]) => k), plan.newWildcards);
    if (plan.backendWrites.length > 0) {
      m.lb4_backends.updateBatch(plan.backendWrites);
      // The index holds local backends only (what tc egress asks it about).
      const localNow = plan.backendWrites.filter(([, b]) => isLocal(b));
      if (localNow.length) m.lb4_backend_ids.updateBatch(localNow.map(([id, b]) => [backendIndexKey(b), id]));
      const localNoMore = plan.backendWrites.filter(([id, b]) => !isLocal(b) && isLocal(this.backends.get(id)));
      if (localNoMore.length) m.lb4_backend_ids.deleteBatch(localNoMore.map(([, b]) => backendIndexKey(b)));
      for (const [id, b] of plan.backendWrites) this.backends.set(id, b);
      stats.backendsWritten += plan.backendWrites.length;
      stats.entriesWritten += plan.backendWrites.length;
    }
    if (plan.reverseNat.length > 0) m.lb4_reverse_nat.updateBatch(plan.reverseNat);
    if (plan.names.length > 0) m.lb4_names.updateBatch(plan.names.map(([id, name]) => [id, { name: Buffer.from(name.slice(0, 95)) }]));
    if (plan.slotWrites.length > 0) {
      const { masters, slots, ids } = plan.slotWrites;
      const key = { ...masters[0]! };
      const value = { ...emptyService };
      const entry: [Lb4Key, Lb4Service] = [key, value];
      m.lb4_services.updateBatchOf(slots.length, (i) => {
        // Every field of the master key (a field added to lb4_key comes along), then the slot.
        Object.assign(key, masters[i]);
        key.slot = slots[i]!;
        value.backendId = ids[i]!;
        return entry;
      });
      stats.entriesWritten += slots.length;
    }
    for (const [owner, b] of plan.maglevBuilds) {
      this.maglev.build(owner, b);
      stats.entriesWritten += 1;
    }
    // Source ranges before the master entries that turn them on.
    stats.entriesWritten += this.ranges.write(plan.newRanges);
    if (plan.masterWrites.length > 0) {
      m.lb4_services.updateBatch(plan.masterWrites.map(([k, v]) => [k, v]));
      for (const [, , fid, state] of plan.masterWrites) this.setState(fid, state);
      stats.entriesWritten += plan.masterWrites.length;
      stats.frontendsWritten += plan.masterWrites.length;
    }
    for (const [fid, state] of plan.states) this.setState(fid, state);
    for (const [fid, f] of plan.specs) this.lastSpecs.set(fid, f);
    for (const [fid, service] of plan.owners) this.own(fid, service);
    if (plan.newWildcards.length > 0) {
      m.lb4_services.updateBatch(plan.newWildcards.map((a) => [wildcardKey(a), { ...emptyService, flags: LbFlags.LB_F_WILDCARD }]));
      for (const a of plan.newWildcards) this.addWildcard(a);
      stats.entriesWritten += plan.newWildcards.length;
    }

    // Removals: stale slots, whole frontends, wildcards, ranges, then what nothing uses.
    const deletes = [...plan.serviceDeletes, ...plan.staleWildcards.map(wildcardKey)];
    if (deletes.length > 0) stats.entriesDeleted += m.lb4_services.deleteBatch(deletes);
    for (const a of plan.staleWildcards) this.removeWildcard(a);
    // A removed frontend's reverse NAT goes after its entries: replies in flight still map.
    if (plan.removedFrontends.length > 0) {
      const ids = plan.removedFrontends.map(([, st]) => st.revNatId);
      m.lb4_reverse_nat.deleteBatch(ids);
      m.lb4_names.deleteBatch(ids);
    }
    for (const [fid, st] of plan.removedFrontends) {
      this.account(st, undefined);
      this.own(fid, undefined);
      this.frontends.delete(fid);
      this.lastSpecs.delete(fid);
      this.revNatIds.release(fid);
      stats.frontendsRemoved++;
      if (st.key.scope === LbScope.LB_SCOPE_EXTERNAL) stats.removedFrontends.push({ address: st.key.address, port: st.key.port, proto: st.key.proto });
    }
    stats.entriesDeleted += this.ranges.remove(plan.staleRanges);
    if (plan.staleBackends.length > 0) {
      stats.entriesDeleted += m.lb4_backends.deleteBatch(plan.staleBackends);
      // An endpoint this plan wrote again under another id keeps its new index entry.
      const rewritten = new Set(plan.backendWrites.map(([, b]) => backendKey(b.address, b.port, b.proto)));
      const unindex = plan.staleBackends.map((id) => this.backends.get(id)!).filter((b) => isLocal(b) && !rewritten.has(backendKey(b.address, b.port, b.proto)));
      if (unindex.length) m.lb4_backend_ids.deleteBatch(unindex.map(backendIndexKey));
      for (const id of plan.staleBackends) {
        const b = this.backends.get(id)!;
        stats.removedBackends.push(b);
        stats.removedBackendIds.push(id);
        this.backends.delete(id);
        this.backendIds.retire(backendKey(b.address, b.port, b.proto));
      }
      stats.backendsRemoved += plan.staleBackends.length;
    }
    // Maglev tables and affinity ids can only fall free when a frontend changed or went.
    if (plan.masterWrites.length + plan.states.length + plan.removedFrontends.length > 0) this.collectIds();
    this.addressFilter.flush();
    return stats;
  }

  /**
   * Backend ids found in flows (conntrack) that no backend owns, after a restart: kept from
   * reuse until those flows are gone, like the ids of removed backends.
   */
  quarantineBackendIds(ids: Iterable<number>): void {
    for (const id of ids) if (!this.backends.has(id)) this.backendIds.quarantine(id);
  }

  /** Backend ids of removed backends, kept from reuse until no flow points at them. */
  get retiredBackendIds(): number {
    return this.backendIds.retiredCount;
  }

  /** Retired backend ids no flow points at (`inFlows`) become free. Returns how many. */
  releaseRetiredBackends(inFlows: ReadonlySet<number>): number {
    return this.backendIds.releaseRetired((id) => inFlows.has(id));
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
