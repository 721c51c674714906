// Conntrack garbage collection from user space: entries carry their expiry (CLOCK_MONOTONIC,
// the clock bpf_ktime_get_ns reads), and the collector deletes the ones past it. LRU
// eviction is only the last resort when the maps fill up.
import type { BpfMap } from '../ebpf/map.js';
import { ErrorCode, FerryError } from '../errors.js';
import { CtFlags, type Ct4Key } from './layouts.js';
import { Ct6Dir } from './layouts6.js';
import type { DatapathMaps } from './loader.js';

export interface GcResult {
  ctScanned: number;
  ctDeleted: number;
  natScanned: number;
  natDeleted: number;
}

export interface OrphanResult {
  /** Flows whose backend is in no map any more (after a restart, say), and their bindings. */
  ctDeleted: number;
  natDeleted: number;
  /** Backend ids the remaining flows point at: not to be given to another backend yet. */
  backendIdsInFlows: Set<number>;
}

/** Nanoseconds on CLOCK_MONOTONIC (Node's hrtime reads the same clock as the kernel's ktime). */
export function monotonicNs(): bigint {
  return process.hrtime.bigint();
}

/** Entries expired at `now`: a snapshot, which the datapath may overtake before they go. */
export function expiredKeys(maps: Pick<DatapathMaps, 'ct4' | 'nat4'>, now: bigint): { ct: Ct4Key[]; nat: Ct4Key[]; ctScanned: number; natScanned: number } {
  const ct = maps.ct4.entries();
  const nat = maps.nat4.entries();
  return {
    ct: ct.filter(([, v]) => v.expiresNs < now).map(([k]) => k),
    nat: nat.filter(([, v]) => v.expiresNs < now).map(([k]) => k),
    ctScanned: ct.length,
    natScanned: nat.length,
  };
}

/**
 * Delete the entries of `keys` that are still expired at `now`, each read again just before
 * its delete. A delete goes by key, and the datapath reuses a key in place: a new flow takes
 * over an expired binding's port, a client reopening its port an expired flow's entry. A
 * key read expired by the walk may so hold a live flow by the time it is deleted, and
 * deleting it loses that flow's reply binding (its replies then reach the host untranslated,
 * and the host resets the backend's end). The second read narrows that window from the
 * walk of both maps to the two syscalls of one key.
 */
export function deleteStillExpired<K, V extends { expiresNs: bigint }>(map: BpfMap<K, V>, keys: K[], now: bigint): number {
  // Only the expiry is read: decoding whole entries tripled a large collection's time.
  const at = map.valueCodec.offsetOf?.('expiresNs');
  if (at === undefined) throw new FerryError({ code: ErrorCode.Codec, op: `collect ${map.name}`, cause: `${map.valueCodec.cName} has no expiresNs field` });
  let deleted = 0;
  for (const k of keys) {
    const v = map.lookupBytes(k);
    if (v && v.readBigUInt64LE(at) < now && map.delete(k)) deleted++;
  }
  return deleted;
}

export function collectConntrack(maps: Pick<DatapathMaps, 'ct4' | 'nat4'>, now: bigint = monotonicNs()): GcResult {
  const e = expiredKeys(maps, now);
  return {
    ctScanned: e.ctScanned,
    ctDeleted: deleteStillExpired(maps.ct4, e.ct, now),
    natScanned: e.natScanned,
    natDeleted: deleteStillExpired(maps.nat4, e.nat, now),
  };
}

type Serves6 = (frontend: { address: string; port: number; proto: number }, backend: { address: string; port: number }) => boolean;

/**
 * IPv6 flows past their expiry (both directions live in ct6, each with its own), and with
 * `serves`, flows whose frontend no longer holds their backend: the backend or the Service
 * went, and a live flow would go on to it (tc does not look the frontend up again), where
 * its address may already be another pod's.
 */
export function collectConntrack6(map: DatapathMaps['ct6'], now: bigint = monotonicNs(), serves?: Serves6): { scanned: number; deleted: number } {
  const all = map.entries();
  const expired = all.filter(([, v]) => v.expiresNs < now).map(([k]) => k);
  let deleted = deleteStillExpired(map, expired, now);
  if (serves) {
    for (const [k, v] of all) {
      if (v.expiresNs < now) continue;
      const client = k.dir === Ct6Dir.CT6_DIR_CLIENT;
      const frontend = client ? { address: k.daddr, port: k.dport, proto: k.proto } : { address: v.addr, port: v.port, proto: k.proto };
      const backend = client ? { address: v.addr, port: v.port } : { address: k.saddr, port: k.sport };
      if (serves(frontend, backend)) continue;
      // Read again before the delete: the datapath may have made the key another flow since.
      const again = map.lookup(k);
      if (again && again.addr === v.addr && again.port === v.port && map.delete(k)) deleted++;
    }
  }
  return { scanned: all.length, deleted };
}

/** IPv6 SNAT bindings past their expiry, and with `serves`, those of a frontend that no
 * longer holds their backend (as collectConntrack6: the port goes back to the range). */
export function collectNat6(map: DatapathMaps['nat6'], now: bigint = monotonicNs(), serves?: Serves6): { scanned: number; deleted: number } {
  const all = map.entries();
  let deleted = deleteStillExpired(map, all.filter(([, v]) => v.expiresNs < now).map(([k]) => k), now);
  for (const [k, v] of serves ? all : []) {
    if (v.expiresNs < now || serves!({ address: v.frontendAddr, port: v.frontendPort, proto: k.proto }, { address: k.saddr, port: k.sport })) continue;
    const again = map.lookup(k);
    if (again && again.clientAddr === v.clientAddr && again.clientPort === v.clientPort && map.delete(k)) deleted++;
  }
  return { scanned: all.length, deleted };
}

/** A backend endpoint as a set key: a nat4 key's source (saddr, sport, proto) or a backend's address, port and protocol. */
const endpointKey = (address: string, port: number, proto: number): string => `${address}:${port}/${proto}`;

type Endpoint = { address: string; port: number; proto: number };

/**
 * Remove flows whose backend is gone (kube-proxy's stale UDP flow flush, done for every
 * protocol: a flow to a removed backend can only fail), and flows to a removed frontend
 * (their packets skip the frontend lookup, so only this ends them; kube-proxy's conntrack
 * would carry a TCP flow on, Cilium's per-packet lookup would not). nat4 keys start with
 * the backend as the reply's source and name the frontend in their value; ct4 entries are
 * matched through their nat4 partner, their backend ID or their key's frontend.
 */
export function flushFlowsTo(maps: Pick<DatapathMaps, 'ct4' | 'nat4'>, backends: Endpoint[], backendIds: Set<number> = new Set(), frontends: Endpoint[] = []): { ct: number; nat: number } {
  if (backends.length === 0 && backendIds.size === 0 && frontends.length === 0) return { ct: 0, nat: 0 };
  const gone = new Set(backends.map((b) => endpointKey(b.address, b.port, b.proto)));
  const goneFrontends = new Set(frontends.map((f) => endpointKey(f.address, f.port, f.proto)));
  const natKeys: Ct4Key[] = [];
  const clients = new Set<string>();
  for (const [k, v] of maps.nat4.entries()) {
    if (!gone.has(endpointKey(k.saddr, k.sport, k.proto)) && !goneFrontends.has(endpointKey(v.frontendAddr, v.frontendPort, k.proto))) continue;
    natKeys.push(k);
    clients.add(`${v.clientAddr}:${v.clientPort}>${v.frontendAddr}:${v.frontendPort}/${k.proto}`);
  }
  const ctKeys = maps.ct4
    .entries()
    .filter(([k, v]) => backendIds.has(v.backendId) || goneFrontends.has(endpointKey(k.daddr, k.dport, k.proto)) || clients.has(`${k.saddr}:${k.sport}>${k.daddr}:${k.dport}/${k.proto}`))
    .map(([k]) => k);
  return { ct: ctKeys.length ? maps.ct4.deleteBatch(ctKeys) : 0, nat: natKeys.length ? maps.nat4.deleteBatch(natKeys) : 0 };
}

/** Flows and bindings whose backend (or frontend) was in no map when the walk read them: a snapshot. */
export interface OrphanKeys {
  ct: Ct4Key[];
  nat: Ct4Key[];
  /** Backend ids the flows pointed at whose backend lives (a flow orphaned by its frontend too). */
  backendIdsInFlows: Set<number>;
  /** The external frontends the walk judged by (none given: frontends were not judged). */
  frontends?: Set<string>;
}

type OrphanMaps = Pick<DatapathMaps, 'ct4' | 'nat4' | 'lb4_backends'>;

/** The backends as lb4_backends holds them now: their ids, and their endpoints. */
function liveBackends(maps: OrphanMaps): { ids: Set<number>; endpoints: Set<string> } {
  const backends = maps.lb4_backends.entries();
  return { ids: new Set(backends.map(([id]) => id)), endpoints: new Set(backends.map(([, b]) => endpointKey(b.address, b.port, b.proto))) };
}

/** A flow to a frontend no longer held (a ct4 key names one of this node's frontends). */
const ctFrontendGone = (frontends: Set<string> | undefined, k: Ct4Key): boolean => frontends !== undefined && !frontends.has(endpointKey(k.daddr, k.dport, k.proto));
/** A binding to a frontend no longer held; a DSR binding names another node's frontend (it is the backend's end), so only its backend judges it. */
const natFrontendGone = (frontends: Set<string> | undefined, k: Ct4Key, v: { flags: number; frontendAddr: string; frontendPort: number }): boolean =>
  frontends !== undefined && !(v.flags & CtFlags.CT_F_DSR) && !frontends.has(endpointKey(v.frontendAddr, v.frontendPort, k.proto));

/**
 * Conntrack entries whose backend id is not in lb4_backends, and reply bindings whose
 * backend (their key's source) is no backend; with `liveFrontends` (the external
 * frontends the service writer holds), also flows and bindings of any other frontend: a
 * removed frontend's flows are flushed when it goes, but not when the agent stopped in
 * between, and a live flow's packets never look its frontend up.
 */
export function orphanKeys(maps: OrphanMaps, liveFrontends?: Iterable<Endpoint>): OrphanKeys {
  const { ids, endpoints } = liveBackends(maps);
  const frontends = liveFrontends ? new Set([...liveFrontends].map((f) => endpointKey(f.address, f.port, f.proto))) : undefined;
  const inFlows = new Set<number>();
  const ct: Ct4Key[] = [];
  for (const [k, v] of maps.ct4.entries()) {
    if (ids.has(v.backendId)) inFlows.add(v.backendId);
    if (!ids.has(v.backendId) || ctFrontendGone(frontends, k)) ct.push(k);
  }
  const nat = maps.nat4
    .entries()
    .filter(([k, v]) => !endpoints.has(endpointKey(k.saddr, k.sport, k.proto)) || natFrontendGone(frontends, k, v))
    .map(([k]) => k);
  return { ct, nat, backendIdsInFlows: inFlows, ...(frontends ? { frontends } : {}) };
}

/**
 * Delete the keys of `found` that are still orphans, against lb4_backends read again and
 * each entry read again just before its delete (as deleteStillExpired): between the walk
 * and the delete, the datapath may balance a flow afresh under the same key (its backend
 * was gone: it picks a live one), and the agent may add a backend again whose endpoint a
 * new flow's binding then uses. Deleting those would cut live flows.
 */
export function deleteStillOrphaned(maps: OrphanMaps, found: OrphanKeys): { ctDeleted: number; natDeleted: number } {
  if (found.ct.length === 0 && found.nat.length === 0) return { ctDeleted: 0, natDeleted: 0 };
  const { ids, endpoints } = liveBackends(maps);
  let ctDeleted = 0;
  for (const k of found.ct) {
    const v = maps.ct4.lookup(k);
    if (v && (!ids.has(v.backendId) || ctFrontendGone(found.frontends, k)) && maps.ct4.delete(k)) ctDeleted++;
  }
  let natDeleted = 0;
  for (const k of found.nat) {
    if (endpoints.has(endpointKey(k.saddr, k.sport, k.proto))) {
      const v = maps.nat4.lookup(k);
      if (!v || !natFrontendGone(found.frontends, k, v)) continue;
    }
    if (maps.nat4.delete(k)) natDeleted++;
  }
  return { ctDeleted, natDeleted };
}

/**
 * Remove what points at backends (or, given the live ones, frontends) that are gone
 * (orphanKeys, then deleteStillOrphaned). Both can only fail; a flush at removal time misses them when the agent was not running.
 * Returns the backend ids live flows still use.
 */
export function collectOrphans(maps: OrphanMaps, liveFrontends?: Iterable<Endpoint>): OrphanResult {
  const found = orphanKeys(maps, liveFrontends);
  return { ...deleteStillOrphaned(maps, found), backendIdsInFlows: found.backendIdsInFlows };
}

/**
 * Empty conntrack and NAT (an operator's `ferry ct flush`): every flow is balanced and
 * routed anew (the backends' shared hops are cleared too).
 */
export function clearConntrack(maps: Pick<DatapathMaps, 'ct4' | 'nat4'> & Partial<Pick<DatapathMaps, 'lb4_backend_hops' | 'ct6' | 'nat6'>>): { ct: number; nat: number } {
  maps.lb4_backend_hops?.deleteBatch([...maps.lb4_backend_hops.keys()]);
  // IPv6 flows and bindings count as conntrack and NAT entries.
  const ct6 = maps.ct6?.deleteBatch([...maps.ct6.keys()]) ?? 0;
  const nat6 = maps.nat6?.deleteBatch([...maps.nat6.keys()]) ?? 0;
  return { ct: maps.ct4.deleteBatch([...maps.ct4.keys()]) + ct6, nat: maps.nat4.deleteBatch([...maps.nat4.keys()]) + nat6 };
}
