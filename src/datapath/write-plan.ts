// Planning one sync of the service maps: the desired frontends against what the maps hold
// (the writer's state), as a list of every write and delete. Frontends are planned a
// Service at a time, and a Service is taken only if all of it fits the maps (entries, IDs,
// source ranges) after what is already there: one Service too big for the maps is reported
// and keeps what it had, and every other Service is programmed. Only IDs are allocated
// here; nothing is written.
import { ErrorCode } from '../errors.js';
import { NONE, frontendId, orNone, type BackendSpec, type FrontendKind, type FrontendSpec, type ProtoName } from '../model/frontend.js';
import type { IdAllocator } from './ids.js';
import { BackendFlags, FirstSlots, LbFlags, LbScope, Proto, type Lb4Backend, type Lb4Key, type Lb4Service } from './layouts.js';
import type { MaglevBuild, MaglevTables } from './maglev-tables.js';
import { SourceRangeSet } from './source-ranges.js';
import { backendKeys, canonical, wantsWildcard, type ScopedFrontend } from './scoped-frontend.js';
import { SlotWrites } from './slot-writes.js';

export interface FrontendState {
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
  /** It holds its address's "unknown port → drop" entry (with every other frontend there that does). */
  wildcard: boolean;
  /** The name lb4_names holds for it (`namespace/name:port`), as written or read back. */
  name: string | undefined;
  /** Read back with a master entry whose first_backends are not its first slots' backends
   * (a map migrated from an older layout, or a writer stopped between the two writes): the
   * next sync writes the master entry again. */
  firstBackendsStale?: boolean;
}

/** A Service the maps could not take this sync, and why. */
export interface WriteFailure {
  /** namespace/name (or the frontend, for a spec without a Service). */
  service: string;
  code: string;
  error: string;
}

/** Every write and delete one sync makes, in the order the writer makes them. */
export interface WritePlan {
  backendWrites: Array<[number, Lb4Backend]>;
  reverseNat: Array<[number, { address: string; port: number }]>;
  names: Array<[number, string]>;
  slotWrites: SlotWrites;
  maglevBuilds: Map<string, MaglevBuild>;
  newRanges: string[];
  masterWrites: Array<[Lb4Key, Lb4Service, string, FrontendState]>;
  /** Frontends whose state changed without a new master entry. */
  states: Array<[string, FrontendState]>;
  specs: Array<[string, FrontendSpec]>;
  /** The Service of every frontend this sync planned or kept (incremental syncs: of the changed Services). */
  owners: Array<[string, string]>;
  newWildcards: string[];
  /** Slots of shrunk frontends, then removed frontends (master first). */
  serviceDeletes: Lb4Key[];
  removedFrontends: Array<[string, FrontendState]>;
  staleWildcards: string[];
  staleRanges: string[];
  staleBackends: number[];
  failures: WriteFailure[];
}

/** What planning reads of the writer, and the allocators it takes IDs from. */
export interface WriterState {
  frontends: ReadonlyMap<string, FrontendState>;
  backends: ReadonlyMap<number, Lb4Backend>;
  wildcards: ReadonlySet<string>;
  lastSpecs: ReadonlyMap<string, FrontendSpec>;
  backendIds: IdAllocator<number>;
  revNatIds: IdAllocator;
  affinityIds: IdAllocator;
  maglev: MaglevTables;
  ranges: SourceRangeSet;
  fidOf(f: FrontendSpec, scope: number): string;
  /** Entries lb4_services and lb4_src_ranges can hold, and lb4_services holds now. */
  capacity: { services: number; sourceRanges: number };
  serviceEntries(): number;
  /** Frontend ids by Service, as the last syncs left them. */
  byService: ReadonlyMap<string, readonly string[]>;
  /** How many frontends use each backend id, and hold each address's wildcard entry. */
  backendRefs: ReadonlyMap<number, number>;
  wildcardRefs: ReadonlyMap<string, number>;
}

export const kindFlag: Record<FrontendKind, number> = {
  ClusterIP: LbFlags.LB_F_CLUSTER_IP,
  NodePort: LbFlags.LB_F_NODE_PORT,
  LoadBalancer: LbFlags.LB_F_LOAD_BALANCER,
  ExternalIP: LbFlags.LB_F_EXTERNAL_IP,
};

export const emptyService: Lb4Service = { backendId: 0, count: 0, revNatId: 0, flags: 0, affinityId: 0, affinityTimeout: 0, firstBackends: [] };

/** The backends a master entry carries: those of its first slots (struct lb4_service). */
export function firstBackendsOf(ids: readonly number[]): number[] {
  return ids.slice(0, FirstSlots.LB4_FIRST_SLOTS);
}

/** Do two frontends' first slots hold the same backends? */
function sameFirstBackends(a: readonly number[], b: readonly number[]): boolean {
  for (let i = 0; i < FirstSlots.LB4_FIRST_SLOTS; i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return false;
  return true;
}

/** Does a master entry read back carry its first slots' backends, and nothing beyond them? */
export function firstBackendsMatch(master: Lb4Service, backendIds: readonly number[]): boolean {
  return sameFirstBackends(master.firstBackends, backendIds);
}

/** The Service a frontend belongs to: "ns/name" of "ns/name:port". */
export const serviceOf = (f: FrontendSpec) => (f.service ? f.service.slice(0, f.service.lastIndexOf(':')) : frontendId(f));

class Planner {
  readonly plan: WritePlan = {
    backendWrites: [], reverseNat: [], names: [], slotWrites: new SlotWrites(), maglevBuilds: new Map(), newRanges: [], masterWrites: [], states: [], specs: [], owners: [],
    newWildcards: [], serviceDeletes: [], removedFrontends: [], staleWildcards: [], staleRanges: [], staleBackends: [], failures: [],
  };
  private readonly wantBackends = new Map<number, Lb4Backend>();
  private readonly wantFrontends = new Set<string>();
  private readonly wantWildcards = new Set<string>();
  private readonly wantRanges = new Set<string>();
  /** What the maps can still take this sync (removals only free room after the writes); counted when first needed. */
  private roomLeft: { entries: number; backends: number; revNat: number; affinity: number; tables: number; ranges: number } | undefined;

  constructor(private readonly st: WriterState) {}

  private get room(): NonNullable<Planner['roomLeft']> {
    if (this.roomLeft) return this.roomLeft;
    const st = this.st;
    return (this.roomLeft = {
      entries: st.capacity.services - st.serviceEntries(),
      backends: st.backendIds.free(),
      revNat: st.revNatIds.free(),
      affinity: st.affinityIds.free(),
      tables: st.maglev.free(),
      ranges: st.capacity.sourceRanges - st.ranges.size,
    });
  }

  /** One entry per lookup scope: external always, internal where its backends differ. */
  private scoped(f: FrontendSpec): ScopedFrontend[] {
    const ext: ScopedFrontend = { f, scope: LbScope.LB_SCOPE_EXTERNAL, fid: this.st.fidOf(f, LbScope.LB_SCOPE_EXTERNAL), backends: f.backends, dropWhenEmpty: Boolean(f.dropWhenEmpty) };
    if (!f.internalBackends) return [ext];
    return [ext, { f, scope: LbScope.LB_SCOPE_INTERNAL, fid: this.st.fidOf(f, LbScope.LB_SCOPE_INTERNAL), backends: f.internalBackends, dropWhenEmpty: false }];
  }

  private unchanged(sf: ScopedFrontend): boolean {
    return this.st.frontends.has(sf.fid) && this.st.lastSpecs.get(sf.fid) === sf.f;
  }

  run(specs: FrontendSpec[]): WritePlan {
    const groups = new Map<string, ScopedFrontend[]>();
    for (const f of specs) {
      const name = serviceOf(f);
      let g = groups.get(name);
      if (!g) groups.set(name, (g = []));
      g.push(...this.scoped(f));
    }
    // Services that did not change keep what they have; the others, in name order, are
    // taken whole if they fit.
    const changed: Array<[string, ScopedFrontend[]]> = [];
    for (const [name, g] of groups) {
      if (g.every((sf) => this.unchanged(sf))) for (const sf of g) this.keep(sf.fid, name, sf.f);
      else changed.push([name, g]);
    }
    changed.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    for (const [name, g] of changed) this.planService(name, g);
    this.finish();
    return this.plan;
  }

  /**
   * Only the Services named (each with every frontend it now has; none: it is gone): the
   * rest of the maps stays as it is, so a sync costs what changed, not what exists.
   */
  runChanged(changes: ReadonlyMap<string, FrontendSpec[]>): WritePlan {
    const names = [...changes.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    for (const name of names) {
      const g = changes.get(name)!.flatMap((f) => this.scoped(f));
      const had = this.st.byService.get(name);
      const same = g.length === (had?.length ?? 0) && g.every((sf) => had!.includes(sf.fid) && this.unchanged(sf));
      if (same) for (const sf of g) this.keep(sf.fid, name, sf.f);
      else this.planService(name, g);
    }
    this.finishChanged(names);
    return this.plan;
  }

  /** A Service's frontends, taken whole if they fit. */
  private planService(name: string, g: ScopedFrontend[]): void {
    const short = this.shortfall(g);
    if (!short) {
      for (const sf of g) this.planFrontend(sf, name);
      return;
    }
    this.plan.failures.push({ service: name, code: ErrorCode.MapFull, error: short });
    for (const sf of g) if (this.st.frontends.has(sf.fid)) this.keep(sf.fid, name);
  }

  /**
   * What of the maps a Service needs beyond what it has, against the room left; undefined
   * when it fits (the room is then taken), else why not.
   */
  private shortfall(g: ScopedFrontend[]): string | undefined {
    const need = { entries: 0, backends: 0, revNat: 0, affinity: 0, tables: 0, ranges: 0 };
    const newBackends = new Set<number>();
    const newAddresses = new Set<string>();
    const newTables = new Set<string>();
    for (const sf of g) {
      if (this.wantFrontends.has(sf.fid)) continue;
      const have = this.st.frontends.get(sf.fid);
      need.entries += have ? Math.max(0, sf.backends.length - have.backendIds.length) : 1 + sf.backends.length;
      if (!have) need.revNat++;
      if (wantsWildcard(sf) && !this.st.wildcards.has(sf.f.address) && !this.wantWildcards.has(sf.f.address)) newAddresses.add(sf.f.address);
      for (const key of backendKeys(sf)) if (this.st.backendIds.get(key) === undefined) newBackends.add(key);
      if ((sf.f.affinityTimeout ?? 0) > 0 && this.st.affinityIds.get(sf.f.service ?? frontendId(sf.f)) === undefined) need.affinity++;
      if (sf.scope === LbScope.LB_SCOPE_EXTERNAL && sf.f.kind !== 'ClusterIP' && sf.backends.length > 0 && this.st.maglev.size > 0 && !have?.tableId) newTables.add(`${sf.f.service ?? frontendId(sf.f)}#maglev`);
      if (sf.scope === LbScope.LB_SCOPE_EXTERNAL) need.ranges += sf.f.sourceRanges?.length ?? 0;
    }
    need.entries += newAddresses.size;
    need.backends = newBackends.size;
    need.tables = newTables.size;
    const short = (Object.keys(need) as Array<keyof typeof need>).filter((k) => need[k] > this.room[k]);
    if (short.length > 0) {
      const settings: Record<keyof typeof need, string> = { entries: 'mapSizes.services', backends: 'mapSizes.backends', revNat: 'mapSizes.reverseNat', affinity: 'fewer Services with sessionAffinity', tables: 'mapSizes.maglevTables', ranges: 'mapSizes.sourceRanges' };
      const what: Record<keyof typeof need, string> = { entries: 'service map entries', backends: 'backend ids', revNat: 'reverse-NAT ids', affinity: 'affinity ids', tables: 'Maglev table ids', ranges: 'source-range entries' };
      return short.map((k) => `needs ${need[k]} more ${what[k]}, ${Math.max(0, this.room[k])} left (raise ${settings[k]})`).join('; ');
    }
    for (const k of Object.keys(need) as Array<keyof typeof need>) this.room[k] -= need[k];
    return undefined;
  }

  private wantBackend(b: BackendSpec, key: number, proto: ProtoName, terminating: boolean): number {
    const id = this.st.backendIds.allocate(key);
    const flags = (b.local ? BackendFlags.LB_BACKEND_F_LOCAL : 0) | (terminating ? BackendFlags.LB_BACKEND_F_TERMINATING : 0);
    const prev = this.wantBackends.get(id);
    if (prev && (prev.flags | flags) === prev.flags) return id; // another frontend's: nothing to add
    const value: Lb4Backend = { address: b.address, port: b.port, proto: Proto[proto], flags };
    // Locality and termination belong to the endpoint: frontends sharing it agree.
    this.wantBackends.set(id, prev ? { ...value, flags: prev.flags | value.flags } : value);
    return id;
  }

  /** A frontend keeps what the maps hold for it (unchanged, or its change did not fit). */
  private keep(fid: string, service: string, spec?: FrontendSpec): void {
    if (this.wantFrontends.has(fid)) return;
    const known = this.st.frontends.get(fid)!;
    this.wantFrontends.add(fid);
    this.plan.owners.push([fid, service]);
    for (const id of [...known.backendIds, ...known.drainingIds]) {
      const b = this.st.backends.get(id);
      if (!b) continue;
      // Its view of the backend is what the map holds, merged as wantBackend() merges.
      const prev = this.wantBackends.get(id);
      this.wantBackends.set(id, prev ? { ...prev, flags: prev.flags | b.flags } : b);
    }
    if (this.st.wildcards.has(known.key.address) && known.key.scope === LbScope.LB_SCOPE_EXTERNAL) this.wantWildcards.add(known.key.address);
    const ranges = spec ? SourceRangeSet.entries(known.revNatId, known.key.scope === LbScope.LB_SCOPE_EXTERNAL ? spec.sourceRanges : undefined) : this.st.ranges.writtenFor(known.revNatId);
    for (const r of ranges) this.wantRanges.add(r);
  }

  private planFrontend(sf: ScopedFrontend, service: string): void {
    const { f, scope, fid } = sf;
    if (this.wantFrontends.has(fid)) return; // duplicates are the model's bug; first wins
    if (this.unchanged(sf)) return this.keep(fid, service, f);
    this.wantFrontends.add(fid);
    this.plan.owners.push([fid, service]);
    const wildcard = wantsWildcard(sf);
    if (wildcard) this.wantWildcards.add(f.address);
    const keys = backendKeys(sf);
    const ids = canonical(sf).map((i) => this.wantBackend(sf.backends[i]!, keys[i]!, f.proto, Boolean(sf.backends[i]!.terminating)));
    const drainingIds = orNone((f.drainingBackends ?? NONE).map((b, i) => this.wantBackend(b, keys[sf.backends.length + i]!, f.proto, true)));
    this.plan.specs.push([fid, f]);
    const key: Lb4Key = { address: f.address, port: f.port, proto: Proto[f.proto], scope, slot: 0 };
    const external = scope === LbScope.LB_SCOPE_EXTERNAL;
    const ranged = external && (f.sourceRanges?.length ?? 0) > 0;
    const flags = kindFlag[f.kind] | (f.nodePortAny ? LbFlags.LB_F_NODE_PORT_ANY : 0) | (sf.dropWhenEmpty ? LbFlags.LB_F_DROP_WHEN_EMPTY : 0) | (ranged ? LbFlags.LB_F_SOURCE_RANGES : 0) | (f.forwarding === 'dsr' ? LbFlags.LB_F_FWD_DSR : f.forwarding === 'snat' ? LbFlags.LB_F_FWD_SNAT : 0);
    const affinityTimeout = f.affinityTimeout ?? 0;
    const have = this.st.frontends.get(fid);
    // The Service port's affinity id: every frontend of a port shares it, and keeps the one
    // its master entry carried before a restart, so clients keep their backends.
    const affinityId = affinityTimeout > 0 ? this.st.affinityIds.claimOrAllocate(f.service ?? frontendId(f), have?.affinityId || undefined) : 0;
    const revNatId = this.st.revNatIds.allocate(fid);
    if (external) for (const r of SourceRangeSet.entries(revNatId, f.sourceRanges)) this.wantRanges.add(r);
    if (!have) this.plan.reverseNat.push([revNatId, { address: f.address, port: f.port }]);
    // A restarted writer read the names back: the same one is not written again.
    if (f.service && (!have || have.revNatId !== revNatId || have.name !== f.service)) this.plan.names.push([revNatId, f.service]);
    const oldIds = have?.backendIds ?? [];
    ids.forEach((id, i) => {
      if (oldIds[i] !== id) this.plan.slotWrites.push(key, i + 1, id);
    });
    for (let s = ids.length + 1; s <= oldIds.length; s++) this.plan.serviceDeletes.push({ ...key, slot: s });
    const tableId = external && f.kind !== 'ClusterIP'
      ? this.st.maglev.plan(`${f.service ?? frontendId(f)}#maglev`, have?.tableId ?? 0, ids, () => ids.map((id) => {
        // Positions name backends by address, so every node builds the same table.
        const b = this.wantBackends.get(id)!;
        return `${b.address}:${b.port}/${b.proto}`;
      }), this.plan.maglevBuilds)
      : 0;
    const changed = !have || have.wildcard !== wildcard || have.backendIds.length !== ids.length || have.flags !== flags || have.affinityTimeout !== affinityTimeout || have.affinityId !== affinityId || have.revNatId !== revNatId || have.tableId !== tableId ||
      have.firstBackendsStale === true || !sameFirstBackends(have.backendIds, ids);
    const state: FrontendState = { key, revNatId, flags, affinityId, affinityTimeout, tableId, backendIds: ids, drainingIds, wildcard, name: f.service ?? have?.name };
    if (changed) this.plan.masterWrites.push([key, { backendId: tableId, count: ids.length, revNatId, flags, affinityId, affinityTimeout, firstBackends: firstBackendsOf(ids) }, fid, state]);
    else this.plan.states.push([fid, state]);
  }

  /**
   * finish() for the changed Services only: what they no longer have goes, and a backend
   * or wildcard goes when the last frontend using it lets go (reference counts).
   */
  private finishChanged(names: readonly string[]): void {
    const { st, plan } = this;
    plan.newRanges = st.ranges.added(this.wantRanges);
    for (const a of this.wantWildcards) if (!st.wildcards.has(a)) plan.newWildcards.push(a);
    const next = new Map<string, FrontendState>();
    for (const [, , fid, state] of plan.masterWrites) next.set(fid, state);
    for (const [fid, state] of plan.states) next.set(fid, state);
    const dBackends = new Map<number, number>();
    const dWildcards = new Map<string, number>();
    /** References this sync's frontends let go of (what stays is held by Services not in it). */
    const released = new Map<number, number>();
    const count = (fs: FrontendState, by: number) => {
      for (const id of [...fs.backendIds, ...fs.drainingIds]) {
        dBackends.set(id, (dBackends.get(id) ?? 0) + by);
        if (by < 0) released.set(id, (released.get(id) ?? 0) + 1);
      }
      if (fs.wildcard) dWildcards.set(fs.key.address, (dWildcards.get(fs.key.address) ?? 0) + by);
    };
    const rangesOf = (fs: FrontendState) => (fs.flags & LbFlags.LB_F_SOURCE_RANGES ? st.ranges.writtenFor(fs.revNatId) : []);
    const staleRanges = new Set<string>();
    const seen = new Set<string>();
    const replace = (fid: string, old: FrontendState) => {
      seen.add(fid);
      for (const r of rangesOf(old)) staleRanges.add(r);
      const now = next.get(fid);
      if (now) {
        count(old, -1);
        count(now, +1);
      } else if (!this.wantFrontends.has(fid)) {
        count(old, -1);
        plan.serviceDeletes.push(old.key, ...old.backendIds.map((_, i) => ({ ...old.key, slot: i + 1 })));
        plan.removedFrontends.push([fid, old]);
      }
    };
    for (const name of names) for (const fid of st.byService.get(name) ?? []) replace(fid, st.frontends.get(fid)!);
    // A frontend that moved here from a Service not in this sync.
    for (const [fid, now] of next) {
      if (seen.has(fid)) continue;
      const old = st.frontends.get(fid);
      if (old) replace(fid, old);
      else count(now, +1);
    }
    // A backend other Services' frontends still use keeps their view of it too (as finish() does).
    for (const [id, b] of this.wantBackends) {
      const have = st.backends.get(id);
      const value = have && (st.backendRefs.get(id) ?? 0) - (released.get(id) ?? 0) > 0 ? { ...b, flags: b.flags | have.flags } : b;
      if (!have || have.address !== value.address || have.port !== value.port || have.proto !== value.proto || have.flags !== value.flags) plan.backendWrites.push([id, value]);
    }
    plan.staleRanges = [...staleRanges].filter((r) => !this.wantRanges.has(r));
    for (const [a, d] of dWildcards) if (d < 0 && (st.wildcardRefs.get(a) ?? 0) + d <= 0 && !this.wantWildcards.has(a)) plan.staleWildcards.push(a);
    for (const [id, d] of dBackends) if (d < 0 && (st.backendRefs.get(id) ?? 0) + d <= 0 && !this.wantBackends.has(id)) plan.staleBackends.push(id);
  }

  /** Backend writes, new wildcards and ranges, then everything nothing wants any more. */
  private finish(): void {
    const { st, plan } = this;
    for (const [id, b] of this.wantBackends) {
      const have = st.backends.get(id);
      if (!have || have.address !== b.address || have.port !== b.port || have.proto !== b.proto || have.flags !== b.flags) plan.backendWrites.push([id, b]);
    }
    plan.newRanges = st.ranges.added(this.wantRanges);
    for (const a of this.wantWildcards) if (!st.wildcards.has(a)) plan.newWildcards.push(a);
    for (const [fid, fs] of st.frontends) {
      if (this.wantFrontends.has(fid)) continue;
      plan.serviceDeletes.push(fs.key, ...fs.backendIds.map((_, i) => ({ ...fs.key, slot: i + 1 })));
      plan.removedFrontends.push([fid, fs]);
    }
    for (const a of st.wildcards) if (!this.wantWildcards.has(a)) plan.staleWildcards.push(a);
    plan.staleRanges = st.ranges.stale(this.wantRanges);
    for (const id of st.backends.keys()) if (!this.wantBackends.has(id)) plan.staleBackends.push(id);
  }
}

/** Plan one sync: see the top of this file. */
export function planWrites(st: WriterState, specs: FrontendSpec[]): WritePlan {
  return new Planner(st).run(specs);
}

/** Plan a sync of the named Services only (the writer has seen a full sync before). */
export function planChangedWrites(st: WriterState, changes: ReadonlyMap<string, FrontendSpec[]>): WritePlan {
  return new Planner(st).runChanged(changes);
}
