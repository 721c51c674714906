// The writer of lb6_services: IPv6 frontends (a dual-stack or IPv6 Service's ClusterIP,
// NodePorts, LoadBalancer IPs and externalIPs) for the socket hooks and tc's IPv6 path.
// Each frontend is a master entry (slot 0: count, flags, affinity) per scope, one entry
// per backend slot holding the backend itself, and, where the address is the Service's alone, its address's wildcard
// entry (unknown ports refused; a node's address keeps its other ports). Services are
// taken whole if they fit, as in write-plan.ts: one Service too big for the map is
// reported and keeps what it had. Slots are written before
// the master that counts them, and a master is deleted before its slots, so the hooks
// never read a count past the slots that exist.
import { isIPv6 } from 'node:net';
import { ErrorCode, FerryError } from '../errors.js';
import { ipv6Bytes, ipv6Text } from '../packet/addr.js';
import { NONE, type BackendSpec, type FrontendSpec } from '../model/frontend.js';
import type { BpfMap } from '../ebpf/map.js';
import { BackendFlags, LbFlags, LbScope, Proto } from './layouts.js';
import type { Lb6Key, Lb6Service } from './layouts6.js';
import { kindFlag, serviceOf, type WriteFailure } from './write-plan.js';
import { ownsItsAddress } from './scoped-frontend.js';
import { decodeName } from './service-table.js';
import { Range6Table, frontendOfId, rangeFrontend, rangeId, type Lb6SrcRanges } from './source-ranges6.js';
import type { ApplyStats } from './writer.js';

interface Entry {
  key: Lb6Key;
  value: Lb6Service;
  /** A master's `namespace/name:port` (lb6_names, for the CLI). */
  name?: string | undefined;
}

/** lb6_names: a master's key → its Service port's name. */
export type Lb6Names = BpfMap<Lb6Key, { name: Buffer }>;

export interface Apply6Stats {
  entriesWritten: number;
  entriesDeleted: number;
  /** UDP backend slots deleted or given another backend: connected sockets may be stale. */
  udpSlotsReplaced: number;
  failures: WriteFailure[];
}

/** Is this frontend one for lb6_services (an IPv6 address)? */
export const isIPv6Frontend = (f: FrontendSpec): boolean => f.address.includes(':');

/** The IPv4 and the IPv6 frontends of a list (the list itself when it has no IPv6 one). */
export function splitFamilies(list: FrontendSpec[]): [FrontendSpec[], FrontendSpec[]] {
  if (!list.some(isIPv6Frontend)) return [list, NONE];
  return [list.filter((f) => !isIPv6Frontend(f)), list.filter(isIPv6Frontend)];
}

/** Changed Services split by family; each family's map names every changed Service. */
export function splitChanges(changes: ReadonlyMap<string, FrontendSpec[]>): [ReadonlyMap<string, FrontendSpec[]>, Map<string, FrontendSpec[]>] {
  const v4 = new Map<string, FrontendSpec[]>();
  const v6 = new Map<string, FrontendSpec[]>();
  for (const [name, list] of changes) {
    const [a, b] = splitFamilies(list);
    v4.set(name, a);
    v6.set(name, b);
  }
  return [v4, v6];
}

/**
 * The IPv4 writer's stats with the IPv6 writer's apply added. Without lb6_services (a
 * datapath built before it), the Services with IPv6 frontends are failures, not dropped
 * in silence.
 */
export function withIPv6(stats: ApplyStats, writer: Service6Writer | undefined, run: (w: Service6Writer) => Apply6Stats, v6: FrontendSpec[]): ApplyStats {
  if (!writer) {
    const names = new Set(v6.map(serviceOf));
    return names.size === 0 ? stats : { ...stats, failures: [...stats.failures, ...[...names].map((service) => ({ service, code: ErrorCode.MapOp, error: 'IPv6 frontends: this datapath has no lb6_services map' }))] };
  }
  const s6 = run(writer);
  if (s6.entriesWritten === 0 && s6.entriesDeleted === 0 && s6.failures.length === 0) return stats;
  return { ...stats, entriesWritten: stats.entriesWritten + s6.entriesWritten, entriesDeleted: stats.entriesDeleted + s6.entriesDeleted, failures: [...stats.failures, ...s6.failures], ipv6UdpSlotsReplaced: s6.udpSlotsReplaced };
}

/** The most slots a master entry can count (`count` is a __u16). */
const MAX_SLOTS = 0xffff;

const keyId = (k: Lb6Key): string => `${k.address}|${k.port}|${k.proto}|${k.scope}|${k.slot}`;
/** The key id of the master entry of the frontend a key id belongs to. */
const masterOf = (id: string): string => id.slice(0, id.lastIndexOf('|') + 1) + '0';
const valueId = (v: Lb6Service): string => `${v.address}|${v.port}|${v.count}|${v.flags}|${v.draining}|${v.affinityTimeout}`;

const EMPTY: Omit<Lb6Service, 'address'> = { port: 0, count: 0, flags: 0, draining: 0, affinityTimeout: 0 };

const canonical = (a: string): string => ipv6Text(ipv6Bytes(a));

/** The entries one frontend needs, by key id, and its source-range entries (lb6_src_ranges);
 * or why it cannot have them. */
function frontendEntries(f: FrontendSpec, into: Map<string, Entry>, ranges: Set<string>, rangesMap: boolean): string | undefined {
  const proto = Proto[f.proto];
  if (!isIPv6(f.address) || (f.proto !== 'TCP' && f.proto !== 'UDP') || !Number.isInteger(f.port) || f.port < 1 || f.port > 65535) {
    return `${f.address} port ${f.port}/${f.proto} is not an IPv6 TCP or UDP frontend`;
  }
  const draining = f.drainingBackends ?? [];
  const internal = f.internalBackends;
  const most = Math.max(f.backends.length, internal?.length ?? 0) + draining.length;
  if (most > MAX_SLOTS) return `${most} backends, at most ${MAX_SLOTS} per frontend`;
  for (const b of [...f.backends, ...(internal ?? []), ...draining]) if (!isIPv6(b.address) || !Number.isInteger(b.port) || b.port < 1 || b.port > 65535) return `backend ${b.address} port ${b.port} is not an IPv6 endpoint`;
  // Addresses in their one text form (what reading the map back gives), and a stable slot
  // order whatever order the slices listed the endpoints in.
  const address = canonical(f.address);
  // A slot's flags say whether its backend is on this node (tc's IPv6 path DNATs only to
  // such) and what the CLI shows of it.
  const slotFlags = (b: BackendSpec) => (b.local ? BackendFlags.LB_BACKEND_F_LOCAL : 0) | (b.terminating ? BackendFlags.LB_BACKEND_F_TERMINATING : 0);
  const sorted = (list: BackendSpec[]) => list.map((b) => ({ address: canonical(b.address), port: b.port, flags: slotFlags(b) })).sort((a, b) => (a.address === b.address ? a.port - b.port : a.address < b.address ? -1 : 1));
  const drainingSlots = sorted(draining);
  // loadBalancerSourceRanges: LB IPs only (model/service6.ts gives them no other kind).
  const ranged = f.kind === 'LoadBalancer' && (f.sourceRanges?.length ?? 0) > 0;
  if (ranged && !rangesMap) return 'loadBalancerSourceRanges: this datapath has no lb6_src_ranges map';
  for (const cidr of ranged ? f.sourceRanges! : []) {
    const id = rangeId(rangeFrontend(address, f.port, proto), cidr);
    if (!id) return `loadBalancerSourceRanges entry "${cidr}" is not an IPv6 CIDR`;
    ranges.add(id);
  }
  const put = (e: Entry) => into.set(keyId(e.key), e);
  // The external scope serves packets from outside (tc) and, where no internal entry
  // exists, this node's pods and host; the internal one (ETP=Local: the cluster
  // endpoints) only the latter, as IPv4's.
  const scope = (scopeId: number, list: BackendSpec[], dropWhenEmpty: boolean) => {
    const key = (slot: number, port = f.port, p = proto): Lb6Key => ({ address, port, proto: p, scope: scopeId, slot });
    const backends = sorted(list);
    const external = scopeId === LbScope.LB_SCOPE_EXTERNAL;
    if (external && ownsItsAddress(f)) put({ key: key(0, 0, 0), value: { ...EMPTY, address: '::', flags: LbFlags.LB_F_WILDCARD } });
    // tc takes a frontend from outside only while every backend it may choose is on this node.
    const localOnly = external && backends.every((b) => b.flags & BackendFlags.LB_BACKEND_F_LOCAL);
    const flags = kindFlag[f.kind] | (dropWhenEmpty ? LbFlags.LB_F_DROP_WHEN_EMPTY : 0) | (localOnly ? LbFlags.LB_F_LOCAL_ONLY : 0) | (external && ranged ? LbFlags.LB_F_SOURCE_RANGES : 0);
    put({ key: key(0), value: { ...EMPTY, address: '::', count: backends.length, flags, draining: drainingSlots.length, affinityTimeout: f.affinityTimeout ?? 0 }, name: f.service });
    // The draining after the backends, never counted among them: kept for their UDP sockets.
    [...backends, ...drainingSlots].forEach((b, i) => put({ key: key(i + 1), value: { ...EMPTY, address: b.address, port: b.port, flags: b.flags } }));
  };
  scope(LbScope.LB_SCOPE_EXTERNAL, f.backends, Boolean(f.dropWhenEmpty));
  if (internal) scope(LbScope.LB_SCOPE_INTERNAL, internal, false);
  return undefined;
}

export class Service6Writer {
  /** What the map holds, as last written or read back. */
  private held = new Map<string, Entry>();
  /** The entries each Service's frontends need. */
  private byService = new Map<string, Map<string, Entry>>();
  /** How many Services need each entry (Services at one address share its wildcard). */
  private refs = new Map<string, number>();
  /** Every needed entry, by key id (Services sharing one want the same value). */
  private wanted = new Map<string, Entry>();

  /** The names lb6_names holds, by master key id. */
  private heldNames = new Map<string, Entry>();
  /** lb6_src_ranges: who needs each entry, what the map holds. */
  private readonly ranges: Range6Table | undefined;

  constructor(
    private readonly map: BpfMap<Lb6Key, Lb6Service>,
    private readonly names?: Lb6Names,
    rangesMap?: Lb6SrcRanges,
  ) {
    this.ranges = rangesMap && new Range6Table(rangesMap);
    this.restore();
  }

  private restore(): void {
    this.held.clear();
    for (const [key, value] of this.map.entries()) this.held.set(keyId(key), { key, value });
    this.heldNames.clear();
    for (const [key, { name }] of this.names?.entries() ?? []) this.heldNames.set(keyId(key), { key, value: { ...EMPTY, address: '::' }, name: decodeName(name) });
    this.ranges?.restore();
  }

  /** Does the frontend's external entry still hold this backend, chosen or draining (the
   * writer's own view: no map walk)? An IPv6 flow to anything else can only fail. */
  servesFlow(frontend: { address: string; port: number; proto: number }, backend: { address: string; port: number }): boolean {
    const at = `${frontend.address}|${frontend.port}|${frontend.proto}|${LbScope.LB_SCOPE_EXTERNAL}|`;
    const master = this.held.get(`${at}0`)?.value;
    if (!master) return false;
    for (let slot = 1; slot <= master.count + master.draining; slot++) {
      const b = this.held.get(`${at}${slot}`)?.value;
      if (b && b.address === backend.address && b.port === backend.port) return true;
    }
    return false;
  }

  /** Entries lb6_services holds (the writer's own count: no map walk). */
  get entries(): number {
    return this.held.size;
  }

  /** Make the map hold exactly the IPv6 frontends of `desired` (every Service's); with
   * `reread`, what the map holds is read first (a change behind the writer's back is undone). */
  apply(desired: FrontendSpec[], opts: { reread?: boolean } = {}): Apply6Stats {
    if (opts.reread) this.restore();
    const groups = new Map<string, FrontendSpec[]>();
    for (const f of desired) {
      const name = serviceOf(f);
      const g = groups.get(name);
      if (g) g.push(f);
      else groups.set(name, [f]);
    }
    return this.write(groups, true);
  }

  /** Make the map hold `changes` (Service → all its IPv6 frontends now); others stay. */
  applyChanged(changes: ReadonlyMap<string, FrontendSpec[]>): Apply6Stats {
    return this.write(changes, false);
  }

  private write(groups: ReadonlyMap<string, FrontendSpec[]>, whole: boolean): Apply6Stats {
    const failures: WriteFailure[] = [];
    const touched = new Set<string>();
    const take = (name: string, wanted: Map<string, Entry> | undefined, ranges?: ReadonlySet<string>) => {
      this.ranges?.take(name, ranges);
      for (const id of this.byService.get(name)?.keys() ?? []) {
        this.refs.set(id, this.refs.get(id)! - 1);
        touched.add(id);
      }
      if (wanted && wanted.size > 0) this.byService.set(name, wanted);
      else this.byService.delete(name);
      for (const [id, e] of wanted ?? []) {
        this.refs.set(id, (this.refs.get(id) ?? 0) + 1);
        this.wanted.set(id, e);
        touched.add(id);
      }
    };
    // Services that go first: their entries are deleted before anything is written, so
    // they make room for the rest of this sync.
    for (const name of [...this.byService.keys()]) if (whole ? !groups.has(name) : groups.get(name)?.length === 0) take(name, undefined);
    const live = (id: string) => (this.refs.get(id) ?? 0) > 0;
    const gone = (id: string) => !live(id) && !live(masterOf(id));
    // Room: what the map holds and what is needed, less what the Services that go free. An
    // entry held for no known Service (read back after a restart) counts as used until the
    // end of the sync, where it goes: the next sync has its room.
    const freed = new Set([...touched].filter((id) => this.held.has(id) && gone(id)));
    const used = whole ? new Set([...this.held.keys(), ...[...this.refs.keys()].filter(live)]).size : this.held.size;
    let room = this.map.maxEntries - used + freed.size;
    // lb6_src_ranges: the entries of frontends gone with their Services go first (their
    // masters are deleted first), the rest that no Service needs at the end.
    const stays = (frontend: string) => live(`${frontend}|${LbScope.LB_SCOPE_EXTERNAL}|0`);
    const rangesFreed = new Set(this.ranges?.orphaned(stays));
    let rangeRoom = this.ranges ? this.ranges.capacity - this.ranges.size + rangesFreed.size : 0;
    // A Service this writer has not written since it read the map (a restart) keeps the
    // entries the map holds of its frontends when it cannot have new ones.
    const keepHeld = (name: string, wanted: Map<string, Entry>) => {
      if (this.byService.has(name)) return;
      const masters = new Set([...wanted.keys()].map(masterOf));
      const kept = new Map([...this.held].filter(([id]) => masters.has(masterOf(id))).map(([id, e]) => [id, { ...e, name: this.heldNames.get(id)?.name }]));
      const frontends = new Set([...masters].map(frontendOfId));
      if (kept.size > 0) take(name, kept, this.ranges?.heldFor(frontends));
    };
    for (const [name, frontends] of groups) {
      const wanted = new Map<string, Entry>();
      const ranges = new Set<string>();
      let why: string | undefined;
      for (const f of frontends) why ??= frontendEntries(f, wanted, ranges, this.ranges !== undefined);
      if (why) {
        failures.push({ service: name, code: ErrorCode.Codec, error: why });
        keepHeld(name, wanted); // it keeps what it had
        continue;
      }
      // What takes a place in the map: neither needed already nor held (or held but freed above).
      const fresh = [...wanted.keys()].filter((id) => !live(id) && (!this.held.has(id) || freed.has(id))).length;
      if (fresh > room) {
        failures.push({ service: name, code: ErrorCode.MapFull, error: `needs ${fresh} entries in lb6_services, ${room} left (raise mapSizes.services)` });
        keepHeld(name, wanted);
        continue;
      }
      const freshRanges = [...ranges].filter((id) => !this.ranges!.live(id) && (!this.ranges!.holds(id) || rangesFreed.has(id))).length;
      if (freshRanges > rangeRoom) {
        failures.push({ service: name, code: ErrorCode.MapFull, error: `needs ${freshRanges} entries in lb6_src_ranges, ${rangeRoom} left (raise mapSizes.sourceRanges)` });
        keepHeld(name, wanted);
        continue;
      }
      room -= fresh;
      rangeRoom -= freshRanges;
      take(name, wanted, ranges);
    }
    // A full apply: what the map holds that no Service needs (a previous agent's) goes too.
    const candidates = whole ? new Set([...this.held.keys(), ...this.refs.keys()]) : touched;
    const writes: Entry[] = [];
    const deletes: Entry[] = [];
    const replaced = new Set<string>();
    for (const id of candidates) {
      const need = (this.refs.get(id) ?? 0) > 0;
      if (!need) {
        this.refs.delete(id);
        this.wanted.delete(id);
        const e = this.held.get(id);
        if (e) deletes.push(e);
        continue;
      }
      const e = this.wanted.get(id)!;
      const h = this.held.get(id);
      if (h && valueId(h.value) !== valueId(e.value)) replaced.add(id);
      if (!h || valueId(h.value) !== valueId(e.value)) writes.push(e);
    }
    // Frontends that go, masters before their slots; then slots before the masters that
    // count them; then the slots a shrunk frontend's new master no longer counts.
    const goneFirst = deletes.filter((e) => gone(keyId(e.key))).sort((a, b) => a.key.slot - b.key.slot);
    writes.sort((a, b) => b.key.slot - a.key.slot);
    const shrunk = deletes.filter((e) => !gone(keyId(e.key)));
    const remove = (e: Entry) => {
      this.map.delete(e.key);
      this.held.delete(keyId(e.key));
    };
    try {
      goneFirst.forEach(remove);
      this.ranges?.remove([...rangesFreed].filter((id) => !this.ranges!.live(id)));
      this.ranges?.write(this.ranges.missing());
      for (const e of writes) {
        this.map.update(e.key, e.value);
        this.held.set(keyId(e.key), e);
      }
      shrunk.forEach(remove);
      this.ranges?.remove(this.ranges.stale());
      this.writeNames(whole ? new Set([...candidates, ...this.heldNames.keys()]) : candidates);
    } catch (err) {
      // The map holds part of the change: start the next apply from what it holds.
      this.restore();
      throw err instanceof FerryError ? err : new FerryError({ code: ErrorCode.Internal, op: 'write lb6_services', cause: (err as Error).message });
    }
    const udpSlot = (e: Entry) => e.key.slot > 0 && e.key.proto === Proto.UDP;
    const udpSlotsReplaced = deletes.filter(udpSlot).length + writes.filter((e) => udpSlot(e) && replaced.has(keyId(e.key))).length;
    return { entriesWritten: writes.length, entriesDeleted: deletes.length, udpSlotsReplaced, failures };
  }

  /** Each master's name as its Service port says, after its entries: the names of masters gone go. */
  private writeNames(ids: Iterable<string>): void {
    if (!this.names) return;
    for (const id of ids) {
      const want = (this.refs.get(id) ?? 0) > 0 ? this.wanted.get(id)?.name : undefined;
      const have = this.heldNames.get(id);
      if (want !== undefined && want !== have?.name) {
        const e = this.wanted.get(id)!;
        this.names.update(e.key, { name: Buffer.from(want.slice(0, 95)) });
        this.heldNames.set(id, e);
      } else if (want === undefined && have) {
        this.names.delete(have.key);
        this.heldNames.delete(id);
      }
    }
  }
}
