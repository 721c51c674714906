// Planning one sync of the service maps: the desired frontends against what the maps hold
// (the writer's state), as a list of every write and delete. Frontends are planned a
// Service at a time, and a Service is taken only if all of it fits the maps (entries, IDs,
// source ranges) after what is already there: one Service too big for the maps is reported
// and keeps what it had, and every other Service is programmed. Only IDs are allocated
// here; nothing is written.
import { ErrorCode } from '../errors.js';
import { backendId, frontendId, type BackendSpec, type FrontendKind, type FrontendSpec, type ProtoName } from '../model/frontend.js';
import type { IdAllocator } from './ids.js';
import { BackendFlags, LbFlags, LbScope, Proto, type Lb4Backend, type Lb4Key, type Lb4Service } from './layouts.js';
import type { MaglevBuild, MaglevTables } from './maglev-tables.js';
import { SourceRangeSet } from './source-ranges.js';
import { ipv4FromString } from '../ebpf/codec.js';

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
  failures: WriteFailure[];
}

/** What planning reads of the writer, and the allocators it takes IDs from. */
export interface WriterState {
  frontends: ReadonlyMap<string, FrontendState>;
  backends: ReadonlyMap<number, Lb4Backend>;
  wildcards: ReadonlySet<string>;
  lastSpecs: ReadonlyMap<string, FrontendSpec>;
  backendIds: IdAllocator;
  revNatIds: IdAllocator;
  affinityIds: IdAllocator;
  maglev: MaglevTables;
  ranges: SourceRangeSet;
  fidOf(f: FrontendSpec, scope: number): string;
  /** Entries lb4_services and lb4_src_ranges can hold. */
  capacity: { services: number; sourceRanges: number };
}

interface ScopedFrontend {
  f: FrontendSpec;
  scope: number;
  fid: string;
  backends: BackendSpec[];
  dropWhenEmpty: boolean;
}

const kindFlag: Record<FrontendKind, number> = {
  ClusterIP: LbFlags.LB_F_CLUSTER_IP,
  NodePort: LbFlags.LB_F_NODE_PORT,
  LoadBalancer: LbFlags.LB_F_LOAD_BALANCER,
  ExternalIP: LbFlags.LB_F_EXTERNAL_IP,
};

export const emptyService: Lb4Service = { backendId: 0, count: 0, revNatId: 0, flags: 0, affinityId: 0, affinityTimeout: 0 };

/** The Service a frontend belongs to: "ns/name" of "ns/name:port". */
const serviceOf = (f: FrontendSpec) => (f.service ? f.service.slice(0, f.service.lastIndexOf(':')) : frontendId(f));

/** Backends in one order on every node (address, then port), whatever order the slices had. */
function canonical(backends: BackendSpec[]): BackendSpec[] {
  return [...backends].sort((a, b) => ipv4FromString(a.address) - ipv4FromString(b.address) || a.port - b.port);
}

/** The "known address, unknown port → drop" entry is only for addresses the model says
 * belong to Services alone: a node address also carries the host's own traffic. */
const wantsWildcard = (sf: ScopedFrontend) =>
  sf.scope === LbScope.LB_SCOPE_EXTERNAL && (sf.f.serviceOnlyAddress ?? (sf.f.kind === 'ClusterIP' || sf.f.kind === 'LoadBalancer'));

class Planner {
  readonly plan: WritePlan = {
    backendWrites: [], reverseNat: [], names: [], slotWrites: [], maglevBuilds: new Map(), newRanges: [], masterWrites: [], states: [], specs: [],
    newWildcards: [], serviceDeletes: [], removedFrontends: [], staleWildcards: [], staleRanges: [], staleBackends: [], failures: [],
  };
  private readonly wantBackends = new Map<number, Lb4Backend>();
  private readonly wantFrontends = new Set<string>();
  private readonly wantWildcards = new Set<string>();
  private readonly wantRanges = new Set<string>();
  /** What the maps can still take this sync: removals only free room after the writes. */
  private readonly room: { entries: number; backends: number; revNat: number; affinity: number; tables: number; ranges: number };

  constructor(private readonly st: WriterState) {
    let entries = st.wildcards.size;
    for (const fs of st.frontends.values()) entries += 1 + fs.backendIds.length;
    this.room = {
      entries: st.capacity.services - entries,
      backends: st.backendIds.free(),
      revNat: st.revNatIds.free(),
      affinity: st.affinityIds.free(),
      tables: st.maglev.free(),
      ranges: st.capacity.sourceRanges - st.ranges.size,
    };
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
      if (g.every((sf) => this.unchanged(sf))) for (const sf of g) this.keep(sf.fid, sf.f);
      else changed.push([name, g]);
    }
    changed.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    for (const [name, g] of changed) {
      const short = this.shortfall(g);
      if (!short) {
        for (const sf of g) this.planFrontend(sf);
        continue;
      }
      this.plan.failures.push({ service: name, code: ErrorCode.MapFull, error: short });
      for (const sf of g) if (this.st.frontends.has(sf.fid)) this.keep(sf.fid);
    }
    this.finish();
    return this.plan;
  }

  /**
   * What of the maps a Service needs beyond what it has, against the room left; undefined
   * when it fits (the room is then taken), else why not.
   */
  private shortfall(g: ScopedFrontend[]): string | undefined {
    const need = { entries: 0, backends: 0, revNat: 0, affinity: 0, tables: 0, ranges: 0 };
    const newBackends = new Set<string>();
    const newAddresses = new Set<string>();
    const newTables = new Set<string>();
    for (const sf of g) {
      if (this.wantFrontends.has(sf.fid)) continue;
      const have = this.st.frontends.get(sf.fid);
      need.entries += have ? Math.max(0, sf.backends.length - have.backendIds.length) : 1 + sf.backends.length;
      if (!have) need.revNat++;
      if (wantsWildcard(sf) && !this.st.wildcards.has(sf.f.address) && !this.wantWildcards.has(sf.f.address)) newAddresses.add(sf.f.address);
      for (const b of [...sf.backends, ...(sf.f.drainingBackends ?? [])]) {
        const key = backendId(b, sf.f.proto);
        if (this.st.backendIds.get(key) === undefined) newBackends.add(key);
      }
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

  private wantBackend(b: BackendSpec, proto: ProtoName, terminating: boolean): number {
    const id = this.st.backendIds.allocate(backendId(b, proto));
    const flags = (b.local ? BackendFlags.LB_BACKEND_F_LOCAL : 0) | (terminating ? BackendFlags.LB_BACKEND_F_TERMINATING : 0);
    const value: Lb4Backend = { address: b.address, port: b.port, proto: Proto[proto], flags };
    const prev = this.wantBackends.get(id);
    // Locality and termination belong to the endpoint: frontends sharing it agree.
    this.wantBackends.set(id, prev ? { ...value, flags: prev.flags | value.flags } : value);
    return id;
  }

  /** A frontend keeps what the maps hold for it (unchanged, or its change did not fit). */
  private keep(fid: string, spec?: FrontendSpec): void {
    if (this.wantFrontends.has(fid)) return;
    const known = this.st.frontends.get(fid)!;
    this.wantFrontends.add(fid);
    for (const id of [...known.backendIds, ...known.drainingIds]) {
      const b = this.st.backends.get(id);
      if (b && !this.wantBackends.has(id)) this.wantBackends.set(id, b);
    }
    if (this.st.wildcards.has(known.key.address) && known.key.scope === LbScope.LB_SCOPE_EXTERNAL) this.wantWildcards.add(known.key.address);
    const ranges = spec ? SourceRangeSet.entries(known.revNatId, known.key.scope === LbScope.LB_SCOPE_EXTERNAL ? spec.sourceRanges : undefined) : this.st.ranges.writtenFor(known.revNatId);
    for (const r of ranges) this.wantRanges.add(r);
  }

  private planFrontend(sf: ScopedFrontend): void {
    const { f, scope, fid } = sf;
    if (this.wantFrontends.has(fid)) return; // duplicates are the model's bug; first wins
    if (this.unchanged(sf)) return this.keep(fid, f);
    this.wantFrontends.add(fid);
    if (wantsWildcard(sf)) this.wantWildcards.add(f.address);
    const ids = canonical(sf.backends).map((b) => this.wantBackend(b, f.proto, Boolean(b.terminating)));
    const drainingIds = (f.drainingBackends ?? []).map((b) => this.wantBackend(b, f.proto, true));
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
    if (f.service && (!have || this.st.lastSpecs.get(fid)?.service !== f.service)) this.plan.names.push([revNatId, f.service]);
    const oldIds = have?.backendIds ?? [];
    ids.forEach((id, i) => {
      if (oldIds[i] !== id) this.plan.slotWrites.push([{ ...key, slot: i + 1 }, { ...emptyService, backendId: id }]);
    });
    for (let s = ids.length + 1; s <= oldIds.length; s++) this.plan.serviceDeletes.push({ ...key, slot: s });
    const tableId = external && f.kind !== 'ClusterIP'
      ? this.st.maglev.plan(`${f.service ?? frontendId(f)}#maglev`, have?.tableId ?? 0, ids, () => ids.map((id) => {
        // Positions name backends by address, so every node builds the same table.
        const b = this.wantBackends.get(id)!;
        return `${b.address}:${b.port}/${b.proto}`;
      }), this.plan.maglevBuilds)
      : 0;
    const changed = !have || have.backendIds.length !== ids.length || have.flags !== flags || have.affinityTimeout !== affinityTimeout || have.affinityId !== affinityId || have.revNatId !== revNatId || have.tableId !== tableId;
    const state: FrontendState = { key, revNatId, flags, affinityId, affinityTimeout, tableId, backendIds: ids, drainingIds };
    if (changed) this.plan.masterWrites.push([key, { backendId: tableId, count: ids.length, revNatId, flags, affinityId, affinityTimeout }, fid, state]);
    else this.plan.states.push([fid, state]);
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
