// `ferry explain`: what the datapath would do with one packet, and why. For traffic from
// outside the node, the packet runs through a twin of the loaded tc program (same build,
// same node settings from the pinned .rodata) whose maps hold copies of the live ones, so
// the live datapath is only read. For traffic from pods or the host, the socket hooks'
// decision (reference/sock.ts, held against the real hooks by a differential test) is
// worked out from the live maps: cgroup programs cannot be test-run.
import { join } from 'node:path';
import { isIPv6 } from 'node:net';
import { BackendFlags, LbFlags, LbScope, Stat, DropReason, mapOptions, mapSpecs, type MapName } from './layouts.js';
import type { Codec } from '../ebpf/codec.js';
import { ErrorCode, FerryError, errnoError } from '../errors.js';
import { libbpf } from '../ebpf/libbpf.js';
import { ifindexOf } from '../ebpf/link-tc.js';
import type { BpfMap } from '../ebpf/map.js';
import { BpfObject } from '../ebpf/object.js';
import { readPinnedArrayValue } from '../ebpf/pinned.js';
import { testRun } from '../ebpf/test-run.js';
import { interfaceInfo } from '../sys/interfaces.js';
import { skbContext } from '../ebpf/skb-context.js';
import { buildPacket, eth, ipv4, ipv6, tcp, udp } from '../packet/build.js';
import { decodePacket } from '../packet/decode.js';
import { ipv6Bytes, ipv6Text } from '../packet/addr.js';
import { inNetns } from '../sys/netns.js';
import { RODATA_PIN } from './loader.js';
import { PinnedDatapath, type DatapathReader } from './pinned-view.js';
import { Ct6Dir } from './layouts6.js';
import { readServiceTable, type ServiceTable } from './service-table.js';
import { flowHash4 } from './reference/hash.js';
import { sockDecision, type SockLookup } from './reference/sock.js';
import { sourceLookupKey } from './source-ranges6.js';
import { emptyService } from './write-plan.js';
import { tcObjectFile } from './tc-object.js';

export interface ExplainRequest {
  src: string;
  sport: number;
  dst: string;
  dport: number;
  proto: 'tcp' | 'udp';
  from: 'external' | 'pod' | 'host';
  pinDir: string;
  objectsDir: string;
  /** The device the packet arrives on (external). */
  device: string;
  /** Run inside this network namespace (a sandbox node). */
  netns?: string;
}

export interface Explanation {
  lines: string[];
  verdict: string;
  backend?: string;
}

const TC_VERDICTS: Record<number, string> = { 0: 'TC_ACT_OK (on to the stack)', 2: 'TC_ACT_SHOT (dropped)', 7: 'TC_ACT_REDIRECT (sent out by the program)' };
const STAT_TEXT: Record<string, string> = {
  STAT_FWD_LOCAL: 'forwarded to a backend on this node (DNAT only; the client address is kept)',
  STAT_FWD_LOCAL6: 'forwarded to a backend on this node (IPv6: DNAT only; the client address is kept)',
  STAT_FWD_REMOTE: 'forwarded to a backend on another node with SNAT to this node',
  STAT_FWD_REMOTE6: 'forwarded to a backend on another node with SNAT to this node\'s IPv6 address',
  STAT_REPLY_REMOTE6: 'a reply to an SNATed IPv6 flow, restored and sent back to its client',
  STAT_FWD_DSR: 'forwarded to a backend on another node by DSR (the frontend rides in an IPv4 option)',
  STAT_REPLY_REMOTE: 'a reply to an SNATed flow, restored and sent back to its client',
  STAT_ICMP_REJECT: 'no backend: answered ICMP port unreachable (the client sees ECONNREFUSED)',
  STAT_ICMP_FRAG_NEEDED: 'too big for the path (the DSR option would push it past the MTU, or the device its route leaves by has a smaller one), DF set: answered fragmentation-needed',
  STAT_DSR_RECEIVED: 'a DSR packet for a local backend: frontend recorded, option removed',
  STAT_DSR_CONTESTED: 'a DSR SYN naming another frontend than the live binding of its tuple: passed, the pod\'s answer decides',
  STAT_LOCAL_CONTESTED: 'a SYN naming another frontend than the live flow that holds its local pod\'s tuple (a client port reused at once): passed, the pod\'s answer decides',
  STAT_LOCAL_REMAPPED: 'a new flow on the tuple a live flow of another frontend holds at its local pod (one client port towards two frontends): given another client port at the pod, as netfilter remaps a clashing tuple',
  STAT_ICMP_RELATED: 'an ICMP error of a translated flow, translated',
  STAT_CT_REBALANCED: 'the flow\'s conntrack entry was over (expired, or closed and opened again) or its backend is gone: balanced again',
  STAT_CT_MIDSTREAM: 'a TCP segment (not a SYN) of a flow conntrack does not hold: balanced as a new flow (its state was lost, or it is a stray segment)',
};

type AnyMap = BpfMap<unknown, unknown>;

function copyAll(from: DatapathReader[MapName], to: AnyMap): number {
  const entries = from.entries();
  if (entries.length) to.updateBatch(entries as Array<[unknown, unknown]>);
  return entries.length;
}

function flagText(flags: number): string {
  return Object.entries(LbFlags).filter(([, v]) => flags & v).map(([k]) => k.slice(5).toLowerCase()).join(',') || '-';
}

/** A frontend's backends as its slots name them, from the service table. */
function backendList(table: ServiceTable, address: string, port: number, proto: number, scope: number): string[] {
  const f = table.frontends.find(({ key: k }) => k.address === address && k.port === port && k.proto === proto && k.scope === scope);
  return (f?.backendIds ?? []).map((id) => {
    const b = table.backends.get(id);
    return b ? `${b.address}:${b.port}${b.flags & BackendFlags.LB_BACKEND_F_LOCAL ? ' (local)' : ''}${b.flags & BackendFlags.LB_BACKEND_F_TERMINATING ? ' (terminating)' : ''}` : `(missing backend ${id})`;
  });
}

/** The maps as the reference decision reads them: an IPv6 master entry (lb6_services) as
 * an IPv4 one, whose count, flags and affinity are all the reference uses of it. */
export function sockLookup(maps: Pick<DatapathReader, 'lb4_services' | 'lb6_services' | 'lb4_src_ranges'> & Partial<Pick<DatapathReader, 'lb6_src_ranges'>>): SockLookup {
  return {
    master: (address, port, p, scope) => {
      if (!address.includes(':')) return maps.lb4_services.lookup({ address, port, proto: p, scope, slot: 0 });
      const v = maps.lb6_services.lookup({ address, port, proto: p, scope, slot: 0 });
      return v && { ...emptyService, count: v.count, flags: v.flags, affinityTimeout: v.affinityTimeout };
    },
    sourceAllowed: (f, source) => f.address.includes(':')
      ? maps.lb6_src_ranges?.lookup(sourceLookupKey(f.address, f.port, f.proto, source)) !== undefined
      : maps.lb4_src_ranges.lookup({ prefixlen: 64, revNatId: f.revNatId, source }) !== undefined,
  };
}

/** An IPv6 frontend's backends (lb6_services holds them in its slots, by value). */
function backendList6(maps: Pick<DatapathReader, 'lb6_services'>, address: string, port: number, proto: number, scope: number): string[] {
  const master = maps.lb6_services.lookup({ address, port, proto, scope, slot: 0 });
  return Array.from({ length: master?.count ?? 0 }, (_, i) => {
    const b = maps.lb6_services.lookup({ address, port, proto, scope, slot: i + 1 });
    return b ? `[${b.address}]:${b.port}${b.flags & BackendFlags.LB_BACKEND_F_LOCAL ? ' (local)' : ''}` : `(missing slot ${i + 1})`;
  });
}

/** The socket hooks' decision on the live maps, in words. */
function explainSocket(r: ExplainRequest, maps: DatapathReader, pinned: readonly MapName[]): Explanation {
  const proto = r.proto === 'tcp' ? 6 : 17;
  const lines = [`connect()/sendmsg() from a ${r.from === 'pod' ? 'pod' : 'host process'} to ${r.dst}:${r.dport}/${r.proto} (cgroup socket hooks)`];
  // The source is --src: the node's address for the host; for a pod, only if the agent recorded a namespace with it.
  const sources = r.dst.includes(':') ? 'lb6_netns_sources' : 'lb4_netns_sources';
  const src = r.src.includes(':') && isIPv6(r.src) ? ipv6Text(ipv6Bytes(r.src)) : r.src;
  const recorded = r.from === 'host' || !pinned.includes(sources) || maps[sources].entries().some(([, v]) => v.address === src);
  const d = sockDecision(sockLookup(maps), { address: r.dst, port: r.dport, proto, fromHost: r.from === 'host', source: recorded ? r.src : undefined });
  if (d.verdict === 'unchanged') {
    lines.push(r.from === 'pod' && r.dst.startsWith('127.') ? 'a pod\'s loopback is its own (NodePorts answer on loopback in the host\'s namespace only): the socket connects unchanged' : 'not a Service address: the socket connects unchanged');
    return { lines, verdict: 'unchanged' };
  }
  if (d.verdict === 'refused' && d.reason === 'unknown-port') {
    lines.push(`${r.dst} is a Service address, but no Service has port ${r.dport}/${r.proto}: the call fails with ECONNREFUSED`);
    return { lines, verdict: 'refused' };
  }
  const f = d.frontend!;
  if (f.loopback) lines.push('loopback: the NodePort on any local address (0.0.0.0) applies');
  lines.push(`frontend ${f.address}:${r.dport}/${r.proto}, ${f.scope === LbScope.LB_SCOPE_INTERNAL ? 'internal scope (this node\'s pods and host: the cluster endpoints)' : 'scope external'}, flags ${flagText(f.service.flags)}, rev-NAT ${f.service.revNatId}`);
  if (d.verdict === 'refused') {
    lines.push('no backend: the call fails with ECONNREFUSED');
    return { lines, verdict: 'refused' };
  }
  if (d.verdict === 'denied') {
    lines.push(d.reason === 'source-range'
      ? `${r.src} is not in its loadBalancerSourceRanges: the call fails with EPERM`
      : `loadBalancerSourceRanges apply, and no network namespace with address ${r.src} is recorded (${sources}, filled by the agent): a pod's call fails with EPERM`);
    return { lines, verdict: 'denied' };
  }
  lines.push(`backends: ${(f.address.includes(':') ? backendList6(maps, f.address, r.dport, proto, f.scope) : backendList(readServiceTable(maps), f.address, r.dport, proto, f.scope)).join(', ')}`);
  lines.push(f.service.affinityTimeout
    ? `sessionAffinity ClientIP (${f.service.affinityTimeout}s): this network namespace keeps the backend it got first`
    : 'the socket cookie picks one of them, once per connect() (per datagram for unconnected UDP); replies are mapped back to the frontend');
  return { lines, verdict: 'rewritten to a backend' };
}

export function explain(r: ExplainRequest): Explanation {
  const live = PinnedDatapath.open(r.pinDir);
  try {
    if (r.from === 'external' && r.dst.includes(':')) {
      if (!live.pinned().includes('ct6')) throw new FerryError({ code: ErrorCode.Config, op: `explain ${r.dst}`, cause: 'this datapath handles no IPv6 packets from outside (no ct6 map: an older agent)', hint: '--from pod or --from host for the socket hooks' });
      return explainPacket6(r, live.maps, live.pinned());
    }
    return r.from === 'external' ? explainPacket(r, live.maps, live.pinned()) : explainSocket(r, live.maps, live.pinned());
  } finally {
    live.close();
  }
}

/** Run the packet through a twin of the loaded tc program, on copies of the live maps. */
function explainPacket(r: ExplainRequest, live: DatapathReader, pinned: readonly MapName[]): Explanation {
  const lb = libbpf();
  const { twin, rodata, copy } = openTwin(r, live, pinned);
  try {
    for (const n of ['lb4_services', 'lb4_backends', 'lb4_reverse_nat', 'lb4_src_ranges'] as const) copyAll(live[n], copy(n));
    // Which ports a new SNAT binding asks the host about (an older agent has no such map).
    if (pinned.includes('host_ports')) copyAll(live.host_ports, copy('host_ports'));
    // The devices SNAT flows take their address from, and the slot whose flag says any is.
    if (pinned.includes('snat4_devices') && copyAll(live.snat4_devices, copy('snat4_devices'))) copy('ferry_hop_epoch').update(0, live.ferry_hop_epoch.lookup(0) ?? { sinceNs: 0n });
    // The node's address SNAT flows leave from, and replies come back to.
    if (pinned.includes('snat4_address')) copyAll(live.snat4_address, copy('snat4_address'));
    // Maglev tables: the twin points at the live inner maps (read only).
    for (const [id, innerId] of live.lb4_maglev.entries()) {
      const fd = lb.mapGetFdById(innerId);
      if (fd < 0) throw errnoError(`open Maglev table ${id}`, fd, ErrorCode.MapOp);
      try {
        copy('lb4_maglev').update(id, fd);
      } finally {
        lb.close(fd);
      }
    }
    const proto = r.proto === 'tcp' ? 6 : 17;
    const tuple = { saddr: r.src, daddr: r.dst, sport: r.sport, dport: r.dport, proto };
    const ct = live.ct4.lookup(tuple);
    if (ct) copy('ct4').update(tuple, ct);
    const nat = live.nat4.lookup(tuple);
    if (nat) copy('nat4').update(tuple, nat);
    for (const [k, v] of live.lb4_affinity.entries()) if (k.client === r.src) copy('lb4_affinity').update(k, v);

    const lines = [`packet ${r.src}:${r.sport} → ${r.dst}:${r.dport}/${r.proto} arriving from outside on ${r.device}${r.netns ? ` (netns ${r.netns})` : ''}`];
    if (ct) lines.push(`conntrack: an established flow (backend id ${ct.backendId}): it keeps its backend`);
    if (nat) lines.push('this is a reply of a translated flow');
    const table = readServiceTable(live);
    const fe = table.frontends.find(({ key: k }) => k.address === r.dst && k.port === r.dport && k.proto === proto && k.scope === LbScope.LB_SCOPE_EXTERNAL);
    const svc = fe?.master;
    if (svc) {
      const name = fe.name;
      lines.push(`frontend ${r.dst}:${r.dport}/${r.proto}${name ? ` of ${name}` : ''}, flags ${flagText(svc.flags)}, rev-NAT ${svc.revNatId}, ${svc.count} backend(s)`);
      if (svc.count) lines.push(`backends: ${backendList(table, r.dst, r.dport, proto, LbScope.LB_SCOPE_EXTERNAL).join(', ')}`);
      if (svc.flags & LbFlags.LB_F_DROP_WHEN_EMPTY) lines.push('policy: externalTrafficPolicy=Local (only this node\'s endpoints; none means drop)');
      if (svc.flags & LbFlags.LB_F_SOURCE_RANGES) lines.push('policy: loadBalancerSourceRanges apply');
      // Why this backend: affinity first, then Maglev or the flow hash.
      const seed = rodataNumber(twin, rodata, 'hash_seed');
      const hash = flowHash4(r.src, r.dst, r.sport, r.dport, proto, seed);
      if (svc.affinityTimeout) {
        const aff = live.lb4_affinity.entries().find(([k]) => k.client === r.src && k.affinityId === svc.affinityId);
        lines.push(aff ? `selection: ClientIP affinity (${svc.affinityTimeout}s): this client used backend id ${aff[1].backendId} before` : `selection: ClientIP affinity (${svc.affinityTimeout}s), no entry for this client yet`);
      }
      const maglevSize = rodataNumber(twin, rodata, 'maglev_table_size');
      if (!ct && svc.backendId && maglevSize) lines.push(`selection: Maglev table ${svc.backendId}, position ${hash % maglevSize} of ${maglevSize} (flow hash ${hash})`);
      else if (!ct && svc.count) lines.push(`selection: flow hash ${hash} → slot ${(hash % svc.count) + 1} of ${svc.count}${svc.firstBackends[hash % svc.count] ? ' (carried by the master entry: no second lookup)' : ''}`);
    }

    const run = () => {
      const ifindex = ifindexOf(r.device);
      const l4 = proto === 6 ? tcp({ sport: r.sport, dport: r.dport, flags: ct ? 'A' : 'S' }) : udp({ sport: r.sport, dport: r.dport });
      // Addressed to the device, as a packet from outside would be (the program leaves frames for other hosts alone).
      const data = buildPacket([eth({ dst: interfaceInfo(r.device).mac }), ipv4({ src: r.src, dst: r.dst, ttl: 64 }), l4]);
      return testRun(twin.program('tc_ingress'), { data, ctx: skbContext({ ifindex }) });
    };
    const res = r.netns ? inNetns(r.netns, run) : run();
    decisionLines(copy, lines, Boolean(svc));
    let backend: string | undefined;
    const made = copy('ct4').lookup(tuple) as { backendId: number } | undefined;
    if (made) {
      const b = copy('lb4_backends').lookup(made.backendId) as { address: string; port: number } | undefined;
      backend = b ? `${b.address}:${b.port}` : undefined;
      lines.push(`backend: ${backend ?? '(gone)'} (id ${made.backendId})`);
    }
    const out = decodePacket(res.data);
    const ip = out.find((l) => l.name === 'ipv4')?.fields;
    const l4out = out.find((l) => l.name === 'tcp' || l.name === 'udp' || l.name === 'icmp')?.fields;
    if (ip) lines.push(`packet out: ${ip.src}${l4out?.sport !== undefined ? `:${l4out.sport}` : ''} → ${ip.dst}${l4out?.dport !== undefined ? `:${l4out.dport}` : ''}, ttl ${ip.ttl}${ip.options ? `, IPv4 option ${ip.options}` : ''}${out.some((l) => l.name === 'icmp') ? ` (ICMP type ${l4out?.type} code ${l4out?.code})` : ''}`);
    const verdict = TC_VERDICTS[res.retval] ?? String(res.retval);
    lines.push(`verdict: ${verdict}`);
    return { lines, verdict, backend };
  } finally {
    twin.close();
  }
}

type TwinMap = (n: MapName) => BpfMap<unknown, unknown>;

/** A twin of the loaded tc program (same build, the live .rodata, maps as large as the
 * live ones: a map an older agent did not make keeps its default size, as the CLI may be
 * newer than the agent). Its maps start empty: the caller copies what the packet reads. */
function openTwin(r: ExplainRequest, live: DatapathReader, pinned: readonly MapName[]): { twin: BpfObject; rodata: Buffer; copy: TwinMap } {
  const rodata = readPinnedArrayValue(join(r.pinDir, RODATA_PIN));
  const twin = BpfObject.open(join(r.objectsDir, tcObjectFile()));
  try {
    twin.setRodataBytes(rodata);
    for (const n of pinned) twin.setMaxEntries(n, live[n].maxEntries);
    twin.load();
  } catch (e) {
    twin.close();
    throw e;
  }
  const copy: TwinMap = (n) => twin.map(n, mapSpecs[n].key as Codec<unknown>, mapSpecs[n].value as Codec<unknown>, mapOptions(n));
  return { twin, rodata, copy };
}

/** What the twin's counters say the program did with the packet. */
function decisionLines(copy: TwinMap, lines: string[], known: boolean): void {
  const counters = (n: 'ferry_stats' | 'ferry_drops', names: Record<string, number>) =>
    Object.entries(names).filter(([, i]) => (copy(n).lookupPerCpu(i) ?? []).some((v) => (v as { packets: bigint }).packets > 0n)).map(([k]) => k);
  const stats = counters('ferry_stats', Stat);
  const drops = counters('ferry_drops', DropReason);
  for (const s of stats) lines.push(`decision: ${STAT_TEXT[s] ?? s}`);
  for (const d of drops) lines.push(`decision: dropped, reason ${d.slice(5).toLowerCase()}`);
  if (!stats.length && !drops.length) lines.push(known ? 'decision: nothing to do' : 'decision: not a Service address: passed on untouched');
}

/** An IPv6 packet from outside through the twin (bpf/lib/nodeport6.h, snat6.h): DNAT to a
 * local backend, DNAT + SNAT to a remote one, or why not. */
function explainPacket6(r: ExplainRequest, live: DatapathReader, pinned: readonly MapName[]): Explanation {
  const { twin, copy } = openTwin(r, live, pinned);
  try {
    copyAll(live.lb6_services, copy('lb6_services'));
    if (pinned.includes('lb6_src_ranges')) copyAll(live.lb6_src_ranges, copy('lb6_src_ranges'));
    // The node's IPv6 address remote flows leave from (none: such flows are dropped).
    if (pinned.includes('snat6_address')) copyAll(live.snat6_address, copy('snat6_address'));
    const proto = r.proto === 'tcp' ? 6 : 17;
    const client = { saddr: r.src, daddr: r.dst, sport: r.sport, dport: r.dport, proto, dir: Ct6Dir.CT6_DIR_CLIENT };
    const held = live.ct6.lookup(client);
    if (held) copy('ct6').update(client, held);
    const lines = [`packet [${r.src}]:${r.sport} → [${r.dst}]:${r.dport}/${r.proto} arriving from outside on ${r.device}${r.netns ? ` (netns ${r.netns})` : ''}`];
    if (held) lines.push(`conntrack: a flow to [${held.addr}]:${held.port}: it keeps its backend`);
    const svc = live.lb6_services.lookup({ address: r.dst, port: r.dport, proto, scope: LbScope.LB_SCOPE_EXTERNAL, slot: 0 });
    if (svc) {
      lines.push(`frontend [${r.dst}]:${r.dport}/${r.proto}, flags ${flagText(svc.flags)}, ${svc.count} backend(s)`);
      if (svc.count) lines.push(`backends: ${backendList6(live, r.dst, r.dport, proto, LbScope.LB_SCOPE_EXTERNAL).join(', ')}`);
      if (svc.flags & LbFlags.LB_F_DROP_WHEN_EMPTY) lines.push('policy: externalTrafficPolicy=Local (only this node\'s endpoints; none means drop)');
      if (svc.flags & LbFlags.LB_F_SOURCE_RANGES) lines.push('policy: loadBalancerSourceRanges apply');
    }
    const run = () => {
      const l4 = proto === 6 ? tcp({ sport: r.sport, dport: r.dport, flags: held ? 'A' : 'S' }) : udp({ sport: r.sport, dport: r.dport });
      const data = buildPacket([eth({ dst: interfaceInfo(r.device).mac }), ipv6({ src: r.src, dst: r.dst, hopLimit: 64 }), l4]);
      return testRun(twin.program('tc_ingress'), { data, ctx: skbContext({ ifindex: ifindexOf(r.device) }) });
    };
    const res = r.netns ? inNetns(r.netns, run) : run();
    decisionLines(copy, lines, Boolean(svc));
    const made = copy('ct6').lookup(client) as { addr: string; port: number } | undefined;
    const backend = made && (res.retval === 0 || res.retval === 7) ? `[${made.addr}]:${made.port}` : undefined;
    if (backend) lines.push(`backend: ${backend}`);
    const ip = decodePacket(res.data).find((l) => l.name === 'ipv6')?.fields;
    if (ip) lines.push(`packet out: [${ip.src}] → [${ip.dst}]`);
    const verdict = res.retval === -1 ? 'TC_ACT_UNSPEC (on to the stack, untouched)' : TC_VERDICTS[res.retval] ?? String(res.retval);
    lines.push(`verdict: ${verdict}`);
    return { lines, verdict, backend };
  } finally {
    twin.close();
  }
}

/** A `.rodata` constant of the live program, read from its pinned bytes by the object's BTF. */
function rodataNumber(obj: BpfObject, bytes: Buffer, name: string): number {
  const v = obj.rodataVariables().get(name);
  if (!v) return 0;
  return v.size === 1 ? bytes.readUInt8(v.offset) : v.size === 2 ? bytes.readUInt16LE(v.offset) : bytes.readUInt32LE(v.offset);
}
