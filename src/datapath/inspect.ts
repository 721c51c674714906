// The datapath as its pinned maps hold it, decoded into plain records for the CLI: maps
// and their fill, any map's entries, conntrack flows, frontends with their backends,
// counters. Works without the agent running. Only ct flush writes, through ct-gc.
import { BackendFlags, CtFlags, DropReason, FilterSlot, LbFlags, LbScope, Stat, mapSpecs, protoName, type MapName } from './layouts.js';
import { clearConntrack, monotonicNs } from './ct-gc.js';
import { PinnedDatapath } from './pinned-view.js';
import { Ct6Dir, type Lb6Key, type Lb6Service } from './layouts6.js';
import { interfaceName } from '../sys/interfaces.js';
import { macText } from '../packet/addr.js';
import { decodeName, readServiceTable } from './service-table.js';
import { firstBackendsMatch } from './write-plan.js';
import { hopEpochParts } from './hop-epoch.js';
import { summarizeHostPorts, type HostPortsSummary } from './host-ports.js';

/** The names of the datapath's maps. */
export const MAP_NAMES = Object.keys(mapSpecs) as MapName[];

export function isMapName(name: string): name is MapName {
  return name in mapSpecs;
}

export interface MapRow {
  name: string;
  type: number;
  entries: number;
  capacity: number;
}

/** The pinned maps of a pin directory, with their fill. */
export function listMaps(pinDir: string): MapRow[] {
  return PinnedDatapath.with(pinDir, (dp) =>
    dp.pinned().map((name) => {
      const m = dp.map(name);
      return { name, type: m.info.type, entries: m.perCpu ? m.info.maxEntries : [...m.keys()].length, capacity: m.info.maxEntries };
    }));
}

export const flagNames = (flags: number, names: Record<string, number>, prefix: string): string =>
  Object.entries(names).filter(([, v]) => flags & v).map(([k]) => k.slice(prefix.length).toLowerCase()).join(',') || '-';

export function ageText(expiresNs: bigint, now = monotonicNs()): string {
  const s = Number(expiresNs - now) / 1e9;
  return s < 0 ? `expired ${(-s).toFixed(0)}s ago` : `${s.toFixed(0)}s`;
}

/** How long ago a moment on CLOCK_MONOTONIC was, in whole seconds. */
const agoText = (atNs: bigint, now = monotonicNs()): string => `${(Number(now - atNs) / 1e9).toFixed(0)}s ago`;

export type Row = Record<string, string | number>;

/** Any datapath map decoded into rows: what `ferry map dump` prints. */
export function dumpMap(pinDir: string, name: MapName): Row[] {
  return PinnedDatapath.with(pinDir, (dp) => {
    const m = dp.map(name);
    if (m.perCpu) {
      const names = name === 'ferry_drops' ? DropReason : Stat;
      return (m.entriesPerCpu() as Array<[number, Array<{ packets: bigint; bytes: bigint }>]>).map(([k, perCpu]) => {
        const total = perCpu.reduce((a, v) => ({ packets: a.packets + v.packets, bytes: a.bytes + v.bytes }), { packets: 0n, bytes: 0n });
        const label = Object.entries(names).find(([, v]) => v === k)?.[0] ?? String(k);
        return { key: label, packets: Number(total.packets), bytes: Number(total.bytes) };
      }).filter((r) => r.packets > 0 || !/^\d+$/.test(r.key));
    }
    return m.entries().map(([k, v]) => flatten(name, k as Record<string, unknown> | number, v as Record<string, unknown> | number));
  });
}

/** The raw key bytes of every entry (`ferry map dump -o hex`). */
export function dumpKeysHex(pinDir: string, name: MapName): string[] {
  return PinnedDatapath.with(pinDir, (dp) => {
    const m = dp.map(name);
    const codec = mapSpecs[name].key as { encode(v: unknown): Buffer };
    return [...m.keys()].map((k) => codec.encode(k).toString('hex'));
  });
}

function setBits(b: Buffer): number {
  let n = 0;
  for (const byte of b) for (let v = byte; v; v &= v - 1) n++;
  return n;
}

/** lb4_addr_filter's slot by name: addresses, wildcards, ports. */
const filterSlotName = (slot: number): string => Object.entries(FilterSlot).find(([, v]) => v === slot)?.[0].replace('LB4_FILTER_', '').toLowerCase() ?? String(slot);

function flatten(name: MapName, k: Record<string, unknown> | number, v: Record<string, unknown> | number): Row {
  const key = typeof k !== 'number' ? k : name === 'lb4_backend_hops' ? { backendId: k } : name === 'lb4_addr_filter' ? { slot: filterSlotName(k) } : { id: k };
  const val = typeof v === 'number' ? { value: v } : v;
  const row: Row = {};
  for (const [f, x] of [...Object.entries(key), ...Object.entries(val)]) {
    if (f === 'proto') row[f] = protoName(x as number);
    else if (f === 'expiresNs') row.expires = ageText(x as bigint);
    else if (f === 'lookedUpNs') row.lookedUp = agoText(x as bigint);
    else if (f === 'sinceNs') {
      // ferry_hop_epoch: the time, and in its lowest bits whether new flows share hops and
      // whether their SNAT address follows the device their route leaves by.
      const { sinceNs, perFlow, snatByDevice } = hopEpochParts(x as bigint);
      row.routesChanged = sinceNs === 0n ? 'never' : agoText(sinceNs);
      row.newFlowHops = perFlow ? 'per flow' : 'shared';
      row.snatAddress = snatByDevice ? 'by device (snat4_devices)' : 'the node\'s';
    }
    else if (typeof x === 'bigint') row[f] = Number(x);
    else if (f === 'hopMacs' && Buffer.isBuffer(x)) row[f] = `${macText(x)} (from ${macText(x.subarray(6))})`;
    else if (f === 'bits' && Buffer.isBuffer(x)) row[f] = `${setBits(x)} of ${x.length * 8} set`; // lb4_addr_filter
    else if (f === 'firstBackends' && Array.isArray(x)) row[f] = x.filter((id) => id !== 0).join(',') || '-'; // lb4_services: the slots a master carries
    else if (Buffer.isBuffer(x)) row[f] = x.toString('utf8').replace(/\0.*$/s, '');
    else row[f] = x as string | number;
  }
  if ((name === 'ct4' || name === 'nat4' || name === 'ct6' || name === 'nat6') && typeof row.flags === 'number') row.flags = flagNames(row.flags, CtFlags, 'CT_F_');
  return row;
}

export interface FlowRow {
  flow: string;
  backend: string;
  nat: string;
  /** The device the flow arrived on ('-': unknown, a flow from before layout 2). */
  device: string;
  /** Where its packets to a remote backend go next (the kept hop: device, MAC); '-': none kept. */
  nextHop: string;
  flags: string;
  expires: string;
  /** null: not counted (IPv6 flows). */
  packets: number | null;
  bytes: number | null;
}

/** Conntrack flows with their backend, decoded; filter by Service frontend or backend address. */
export function listFlows(pinDir: string, filter: { service?: string; backend?: string } = {}): FlowRow[] {
  return PinnedDatapath.with(pinDir, (dp) => {
    const backends = new Map(dp.map('lb4_backends').entries());
    // IPv6 flows: the client's direction of each (an older agent has no ct6).
    const flows6 = dp.pinned().includes('ct6') ? dp.map('ct6').entries().filter(([k]) => k.dir === Ct6Dir.CT6_DIR_CLIENT) : [];
    const rows6 = flows6.map(([k, v]) => ({
      flow: `[${k.saddr}]:${k.sport} → [${k.daddr}]:${k.dport}/${protoName(k.proto)}`,
      frontend: `[${k.daddr}]:${k.dport}`,
      backend: `[${v.addr}]:${v.port}`,
      // SNAT: the port it leaves from, on the node's IPv6 address (snatIPv6).
      nat: v.flags & CtFlags.CT_F_SNAT ? `[node]:${v.natPort}` : '-',
      device: '-',
      nextHop: '-',
      flags: flagNames(v.flags, CtFlags, 'CT_F_'),
      expires: ageText(v.expiresNs),
      packets: null,
      bytes: null,
    }));
    return [...dp.map('ct4').entries()
      .map(([k, v]) => {
        const b = backends.get(v.backendId);
        return {
          flow: `${k.saddr}:${k.sport} → ${k.daddr}:${k.dport}/${protoName(k.proto)}`,
          frontend: `${k.daddr}:${k.dport}`,
          backend: b ? `${b.address}:${b.port}` : `(gone: ${v.backendId})`,
          // SNAT: where the flow leaves from; a remapped local flow: the client port its pod sees.
          nat: v.flags & CtFlags.CT_F_SNAT || (v.flags & CtFlags.CT_F_LOCAL && v.natPort) ? `${v.natAddr}:${v.natPort}` : '-',
          device: v.ifindex ? (interfaceName(v.ifindex) ?? `if${v.ifindex}`) : '-',
          nextHop: v.hopIfindex ? `${interfaceName(v.hopIfindex) ?? `if${v.hopIfindex}`} ${macText(v.hopMacs)}` : '-',
          flags: flagNames(v.flags, CtFlags, 'CT_F_'),
          expires: ageText(v.expiresNs),
          packets: Number(v.packets),
          bytes: Number(v.bytes),
        } as FlowRow & { frontend: string };
      }), ...rows6]
      .filter((r) => (!filter.service || r.frontend === filter.service || r.frontend.startsWith(`${filter.service}:`)) && (!filter.backend || r.backend === filter.backend || r.backend.startsWith(`${filter.backend}:`) || r.backend.startsWith(`[${filter.backend}]:`)))
      .map(({ frontend: _f, ...r }) => r);
  });
}

/** Delete every conntrack and NAT entry (what `ferry ct flush --yes` does). */
export function flushConntrack(pinDir: string): { ct: number; nat: number } {
  // An agent from before lb4_backend_hops has no such pin.
  return PinnedDatapath.with(pinDir, (dp) => clearConntrack({ ct4: dp.writable('ct4'), nat4: dp.writable('nat4'), ...(dp.pinned().includes('lb4_backend_hops') ? { lb4_backend_hops: dp.writable('lb4_backend_hops') } : {}), ...(dp.pinned().includes('ct6') ? { ct6: dp.writable('ct6') } : {}), ...(dp.pinned().includes('nat6') ? { nat6: dp.writable('nat6') } : {}) }));
}

export interface FrontendRow {
  id: number; // reverse-NAT id
  service: string; // namespace/name:port, as the agent published it
  frontend: string;
  type: string;
  flags: string[];
  backends: Array<{ id: number; address: string; state: string; local: boolean }>;
}

export function frontendKind(flags: number): string {
  if (flags & LbFlags.LB_F_NODE_PORT) return 'NodePort';
  if (flags & LbFlags.LB_F_LOAD_BALANCER) return 'LoadBalancer';
  if (flags & LbFlags.LB_F_EXTERNAL_IP) return 'ExternalIP';
  if (flags & LbFlags.LB_F_CLUSTER_IP) return 'ClusterIP';
  return '?';
}

/** Every frontend the datapath holds, with its backends (`ferry service list`). */
export function listFrontends(pinDir: string): FrontendRow[] {
  return PinnedDatapath.with(pinDir, (dp) => {
    const table = readServiceTable(dp.maps);
    const rows = table.frontends.map(({ key: k, master: v, backendIds, name }): FrontendRow => {
      const flags: string[] = [];
      if (k.scope === LbScope.LB_SCOPE_INTERNAL) flags.push('internal');
      if (v.affinityTimeout) flags.push(`affinity=${v.affinityTimeout}s`);
      if (v.flags & LbFlags.LB_F_NODE_PORT_ANY) flags.push('any-address');
      if (v.flags & LbFlags.LB_F_DROP_WHEN_EMPTY) flags.push('local-policy');
      if (v.flags & LbFlags.LB_F_SOURCE_RANGES) flags.push('source-ranges');
      if (v.flags & LbFlags.LB_F_FWD_DSR) flags.push('dsr');
      if (v.flags & LbFlags.LB_F_FWD_SNAT) flags.push('snat');
      if (v.backendId) flags.push(`maglev=${v.backendId}`);
      // Its first slots' backends not carried as its slots say (a map migrated from layout 4,
      // until the agent's next sync): still balanced right, by a second lookup.
      if (!firstBackendsMatch(v, backendIds)) flags.push('first-slots-stale');
      return {
        id: v.revNatId,
        service: name ?? '-',
        frontend: `${k.address}:${k.port}/${protoName(k.proto)}`,
        type: frontendKind(v.flags),
        flags,
        backends: backendIds.map((id) => {
          const b = table.backends.get(id);
          return { id, address: b ? `${b.address}:${b.port}` : '(missing)', state: b && b.flags & BackendFlags.LB_BACKEND_F_TERMINATING ? 'terminating' : 'active', local: Boolean(b && b.flags & BackendFlags.LB_BACKEND_F_LOCAL) };
        }),
      };
    }).sort((a, b) => a.id - b.id);
    const pinned = dp.pinned();
    if (!pinned.includes('lb6_services')) return rows;
    const names = new Map((pinned.includes('lb6_names') ? dp.map('lb6_names').entries() : []).map(([k, v]) => [`${k.address}|${k.port}|${k.proto}`, decodeName(v.name)]));
    return [...rows, ...ipv6Frontends(dp.map('lb6_services').entries(), names)];
  });
}

/** The IPv6 frontends (lb6_services: no id; their names from lb6_names), after the IPv4 ones. */
function ipv6Frontends(entries: Array<[Lb6Key, Lb6Service]>, names: ReadonlyMap<string, string>): FrontendRow[] {
  const slots = new Map(entries.filter(([k]) => k.slot > 0).map(([k, v]) => [`${k.address}|${k.port}|${k.proto}|${k.scope}|${k.slot}`, v]));
  return entries
    .filter(([k, v]) => k.slot === 0 && !(v.flags & LbFlags.LB_F_WILDCARD))
    .map(([k, v]): FrontendRow => ({
      id: 0,
      service: names.get(`${k.address}|${k.port}|${k.proto}`) ?? '-',
      frontend: `[${k.address}]:${k.port}/${protoName(k.proto)}`,
      type: frontendKind(v.flags),
      flags: [
        ...(k.scope === LbScope.LB_SCOPE_INTERNAL ? ['internal'] : []),
        ...(v.affinityTimeout ? [`affinity=${v.affinityTimeout}s`] : []),
        ...(v.flags & LbFlags.LB_F_DROP_WHEN_EMPTY ? ['local-policy'] : []),
        ...(v.flags & LbFlags.LB_F_SOURCE_RANGES ? ['source-ranges'] : []),
        // tc DNATs it from outside (every backend on this node); else only the socket hooks balance it.
        ...(v.flags & LbFlags.LB_F_LOCAL_ONLY ? ['local-only'] : []),
      ],
      backends: Array.from({ length: v.count }, (_, i) => {
        const b = slots.get(`${k.address}|${k.port}|${k.proto}|${k.scope}|${i + 1}`);
        return { id: 0, address: b ? `[${b.address}]:${b.port}` : '(missing)', state: b && b.flags & BackendFlags.LB_BACKEND_F_TERMINATING ? 'terminating' : 'active', local: Boolean(b && b.flags & BackendFlags.LB_BACKEND_F_LOCAL) };
      }),
    }))
    .sort((a, b) => (a.frontend < b.frontend ? -1 : 1));
}

export interface CounterRow {
  /** STAT_… or DROP_…, as in bpf/shared/metrics.h. */
  key: string;
  /** The key in lower case without its prefix (fwd_remote, unknown_port…). */
  name: string;
  packets: number;
  bytes: number;
}

/** The ports the host has bound, as new SNAT bindings see them (host_ports); undefined before the map exists. */
export function readHostPorts(pinDir: string): HostPortsSummary | undefined {
  return PinnedDatapath.with(pinDir, (dp) => (dp.pinned().includes('host_ports') ? summarizeHostPorts(dp.map('host_ports')) : undefined));
}

/** The node's address remote flows of a family leave from (snat4_address, snat6_address): null for none, undefined for an older agent's datapath. */
export function readSnatAddress(pinDir: string, map: 'snat4_address' | 'snat6_address'): string | null | undefined {
  return PinnedDatapath.with(pinDir, (dp) => {
    if (!dp.pinned().includes(map)) return undefined;
    const a = dp.map(map).lookup(0)?.address;
    return a && a !== '::' && a !== '0.0.0.0' ? a : null;
  });
}

/** The ifindexes XDP may redirect frames to besides their own device (xdp_tx_devices). */
export function readXdpTargets(pinDir: string): number[] {
  return PinnedDatapath.with(pinDir, (dp) => (dp.pinned().includes('xdp_tx_devices') ? [...dp.map('xdp_tx_devices').keys()] : []));
}

/** Forwarded traffic by path and drops by reason (non-zero only). */
export function readCounters(pinDir: string): { forwarded: CounterRow[]; drops: CounterRow[] } {
  const rows = (name: 'ferry_stats' | 'ferry_drops', prefix: string) => dumpMap(pinDir, name)
    .filter((r) => Number(r.packets) > 0)
    .map((r) => ({ key: String(r.key), name: String(r.key).startsWith(prefix) ? String(r.key).slice(prefix.length).toLowerCase() : String(r.key), packets: Number(r.packets), bytes: Number(r.bytes) }));
  return { forwarded: rows('ferry_stats', 'STAT_'), drops: rows('ferry_drops', 'DROP_') };
}
