// Differential test: random service tables and random packets through tc_ingress (and
// through xdp_ingress then tc_ingress, as a device with XDP runs them) and
// through the TypeScript reference model; every difference is a bug. Seeded: the seed is
// printed on failure, and FERRY_DIFF_SEED reproduces a run.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { DropReason, Proto } from '../../src/datapath/layouts.js';
import { DEFAULT_SNAT_PORTS } from '../../src/datapath/loader.js';
import { ReferenceModel, serviceKey, type Decision, type ServiceTables, type Tuple } from '../../src/datapath/reference/model.js';
import type { FrontendSpec } from '../../src/model/frontend.js';
import { buildPacket, eth, ipv4, tcp, udp } from '../../src/packet/build.js';
import { decodePacket } from '../../src/packet/decode.js';
import { TcVerdict, XdpVerdict, checksumProblems } from '../../src/sandbox/packet-fixture.js';
import { NODE_IP, NODE_MAC, ROUTER_MAC, datapathNode, total, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { describeWith } from '../harness/requirements.js';
import { rng } from '../harness/rng.js';

const PACKETS = Number(process.env.FERRY_DIFF_PACKETS ?? 100_000);
const ROUNDS = 10;
const SEED = Number(process.env.FERRY_DIFF_SEED ?? Date.now() % 2 ** 31);
const MAGLEV = 1021;
const SNAT_MIN = DEFAULT_SNAT_PORTS.min;
const SNAT_MAX = DEFAULT_SNAT_PORTS.max;

function randomTable(r: () => number): FrontendSpec[] {
  const int = (n: number) => Math.floor(r() * n);
  const out: FrontendSpec[] = [];
  const nFrontends = 1 + int(12);
  const seen = new Set<string>();
  for (let i = 0; i < nFrontends; i++) {
    const kind = (['NodePort', 'LoadBalancer', 'ExternalIP'] as const)[int(3)]!;
    const address = kind === 'NodePort' ? NODE_IP : kind === 'LoadBalancer' ? `10.0.100.${1 + int(4)}` : `10.0.30.${200 + int(3)}`;
    const port = kind === 'NodePort' ? 30000 + int(8) : 80 + int(3);
    const proto = r() < 0.7 ? 'TCP' : 'UDP';
    const id = `${address}:${port}/${proto}`;
    if (seen.has(id)) continue;
    seen.add(id);
    const nb = r() < 0.15 ? 0 : 1 + int(6);
    const backends = Array.from({ length: nb }, () => {
      const local = r() < 0.5;
      return { address: local ? `10.244.1.${2 + int(20)}` : `10.244.2.${2 + int(20)}`, port: 8000 + int(3), local };
    });
    // A backend address:port appears once per frontend.
    const uniq = [...new Map(backends.map((b) => [`${b.address}:${b.port}`, b])).values()];
    const sourceRanges = kind === 'LoadBalancer' && r() < 0.3 ? [`10.0.10.${int(8) * 2}/${31 - int(3)}`] : undefined;
    out.push({ address, port, proto, kind, backends: uniq, dropWhenEmpty: uniq.length === 0 && r() < 0.5, service: `default/s${i}:p`, ...(sourceRanges ? { sourceRanges } : {}) });
  }
  // Always one NodePort without endpoints (rejected), and one LoadBalancer frontend with
  // source ranges, so those paths are always exercised (seed 1060204645 drew no rejecting
  // frontend in any of its ten tables).
  out.push({ address: NODE_IP, port: 30008, proto: 'TCP', kind: 'NodePort', backends: [], service: 'default/empty:p' });
  // And two frontends of one local backend per protocol, so that a client port meets a
  // tuple another frontend's flow holds (remapped at the pod) in every table.
  for (const [proto, ports, pod] of [['TCP', [30009, 30010], '10.244.1.60'], ['UDP', [30011, 30012], '10.244.1.61']] as const) {
    for (const port of ports) out.push({ address: NODE_IP, port, proto, kind: 'NodePort', backends: [{ address: pod, port: 8080, local: true }], service: `default/shared${port}:p` });
  }
  const n = 1 + int(4);
  out.push({ address: '10.0.100.5', port: 81, proto: 'TCP', kind: 'LoadBalancer', service: 'default/ranged:p', sourceRanges: ['10.0.10.0/30'], backends: Array.from({ length: n }, (_, i) => ({ address: `10.244.${1 + (i % 2)}.${40 + i}`, port: 8080, local: i % 2 === 0 })) });
  return out;
}

/** Read the tables back from the maps: the model sees exactly what the program sees. */
function snapshot(node: DatapathNode): ServiceTables {
  const services = new Map(node.dp.maps.lb4_services.entries().map(([k, v]) => [serviceKey(k.address, k.port, k.proto, k.scope, k.slot), v]));
  const backends = new Map(node.dp.maps.lb4_backends.entries());
  const sourceRanges = new Map<number, string[]>();
  for (const k of node.dp.maps.lb4_src_ranges.keys()) sourceRanges.set(k.revNatId, [...(sourceRanges.get(k.revNatId) ?? []), `${k.source}/${k.prefixlen - 32}`]);
  return { services, backends, sourceRanges };
}

function randomPacket(r: () => number, table: FrontendSpec[]): Tuple {
  const int = (n: number) => Math.floor(r() * n);
  const pick = table.length > 0 && r() < 0.8 ? table[int(table.length)] : undefined;
  const daddr = pick && r() < 0.9 ? pick.address : [NODE_IP, '10.0.100.1', '10.0.100.9', '10.0.30.201', '10.0.30.99'][int(5)]!;
  const dport = pick && r() < 0.85 ? pick.port : [30000 + int(8), 80 + int(3), 22, 443][int(4)]!;
  const proto = pick && r() < 0.9 ? Proto[pick.proto] : r() < 0.5 ? Proto.TCP : Proto.UDP;
  // Few clients and ports, so flows repeat (conntrack hits) and SNAT ports collide.
  return { saddr: `10.0.10.${2 + int(6)}`, daddr, sport: r() < 0.3 ? 1024 + int(4) : 61000 + int(64), dport, proto };
}

function packetOf(t: Tuple): Buffer {
  const l4 = t.proto === Proto.TCP ? tcp({ sport: t.sport, dport: t.dport, flags: 'S' }) : udp({ sport: t.sport, dport: t.dport });
  return buildPacket([eth({ src: ROUTER_MAC, dst: NODE_MAC }), ipv4({ src: t.saddr, dst: t.daddr, ttl: 64 }), l4]);
}

// With Maglev, external frontends choose from their Maglev tables; without, from their
// slots: the master entry's first ones, the rest looked up (the model reads the slots).
const RUNS = [
  { hooks: 'tc', maglev: MAGLEV, packets: PACKETS, title: 'tc_ingress against the reference model' },
  { hooks: 'tc', maglev: 0, packets: PACKETS / 2, title: 'tc_ingress without Maglev (backends by slot) against the reference model' },
  { hooks: 'xdp', maglev: MAGLEV, packets: PACKETS, title: 'xdp_ingress, then tc_ingress, against the reference model' },
] as const;

for (const run of RUNS) {
  describeWith(['root', 'bpffs', 'netns'], run.title, () => {
    let node: DatapathNode;
    beforeAll(async () => {
      // ICMP errors without a rate limit: the model decides, it does not count.
      node = await datapathNode({ hashSeed: SEED & 0xffff, maglevTableSize: run.maglev, icmpRatePerSec: 1_000_000, icmpBurst: 1_000_000, acceleration: run.hooks === 'xdp' ? 'native' : 'none' });
    });
    afterAll(async () => {
      await node?.close();
    });
    it(`agrees on ${run.packets} random packets over ${ROUNDS} random service tables (seed ${SEED})`, () => agree(node, run.maglev, run.packets));
  });
}

/** Random tables and packets through the node's hooks; every difference from the model is a bug. */
function agree(node: DatapathNode, maglev: number, packets: number): void {
  const r = rng(SEED);
  const problems: string[] = [];
  let n = 0;
  const perRound = Math.ceil(packets / ROUNDS);
  const verdicts = new Map<string, number>();
  for (let round = 0; round < ROUNDS && problems.length === 0; round++) {
    const table = randomTable(r);
    node.writer.apply(table);
    node.flushState();
    const model = new ReferenceModel(snapshot(node), { seed: SEED & 0xffff, maglevTableSize: maglev, snatIPv4: NODE_IP, snatPortMin: SNAT_MIN, snatPortMax: SNAT_MAX });
    let unknownPortDrops = 0;
    for (let i = 0; i < perRound && problems.length < 5; i++, n++) {
      const t = randomPacket(r, table);
      const want = model.decide(t);
      verdicts.set(want.verdict, (verdicts.get(want.verdict) ?? 0) + 1);
      if (want.verdict === 'drop') verdicts.set(`drop:${want.reason}`, (verdicts.get(`drop:${want.reason}`) ?? 0) + 1);
      if (want.verdict === 'local' && want.podPort !== t.sport) verdicts.set('local:remapped', (verdicts.get('local:remapped') ?? 0) + 1);
      const got = node.run('tc_ingress', packetOf(t));
      const byXdp = node.lastXdpVerdict();
      if (byXdp !== undefined) verdicts.set(`xdp:${byXdp}`, (verdicts.get(`xdp:${byXdp}`) ?? 0) + 1);
      const why = compare(t, want, got.retval, got.data, model);
      if (why) problems.push(`packet ${n} ${t.saddr}:${t.sport} → ${t.daddr}:${t.dport}/${t.proto}: ${why}`);
      if (want.verdict === 'drop' && want.reason === 'unknown-port') unknownPortDrops++;
    }
    if (problems.length === 0) {
      const counted = total(node.dp, 'ferry_drops', DropReason.DROP_UNKNOWN_PORT);
      if (counted !== BigInt(unknownPortDrops)) problems.push(`round ${round}: ${counted} unknown-port drops counted, model expected ${unknownPortDrops}`);
    }
  }
  expect(problems, `seed ${SEED} (rerun with FERRY_DIFF_SEED=${SEED})`).toEqual([]);
  expect(n).toBeGreaterThanOrEqual(packets);
  // The random tables must exercise every path, or the comparison proves little.
  for (const v of ['pass', 'drop', 'reject', 'local', 'local:remapped', 'remote', 'drop:source-range', 'drop:unknown-port']) expect(verdicts.get(v) ?? 0, `packets the model sent down the ${v} path`).toBeGreaterThan(100);
  // With XDP, it must have decided much itself (sent back out, dropped) and passed the rest.
  if (node.lastXdpVerdict() !== undefined) for (const v of [XdpVerdict.TX, XdpVerdict.DROP, XdpVerdict.PASS]) expect(verdicts.get(`xdp:${v}`) ?? 0, `packets xdp_ingress gave verdict ${v}`).toBeGreaterThan(100);
}

function compare(t: Tuple, want: Decision, retval: number, out: Buffer, model: ReferenceModel): string | undefined {
  const layers = decodePacket(out);
  const ip = layers.find((l) => l.name === 'ipv4')?.fields;
  const l4 = layers.find((l) => l.name === 'tcp' || l.name === 'udp')?.fields;
  // A translated packet's checksums (the in-place updates and the helpers alike).
  const badSum = want.verdict === 'local' || want.verdict === 'remote' ? checksumProblems(out)[0] : undefined;
  if (badSum) return `${want.verdict}: ${badSum}`;
  switch (want.verdict) {
    case 'pass':
      return retval === TcVerdict.UNSPEC && ip?.dst === t.daddr && l4?.dport === t.dport ? undefined : `expected pass, got verdict ${retval} dst ${ip?.dst}:${l4?.dport}`;
    case 'drop':
      return retval === TcVerdict.SHOT ? undefined : `expected drop (${want.reason}), got verdict ${retval}`;
    case 'reject': {
      const ic = layers.find((l) => l.name === 'icmp')?.fields;
      return retval === TcVerdict.REDIRECT && ic?.type === 3 && ic.code === 3 && ip?.src === t.daddr && ip.dst === t.saddr ? undefined : `expected ICMP port unreachable, got verdict ${retval} ${JSON.stringify(ic)}`;
    }
    case 'local': {
      if (retval !== TcVerdict.OK) return `expected local DNAT (OK), got verdict ${retval}`;
      if (ip?.dst !== want.backend.address || l4?.dport !== want.backend.port || ip.src !== t.saddr) {
        return `expected DNAT to ${want.backend.address}:${want.backend.port}, got ${ip?.src}:${l4?.sport} → ${ip?.dst}:${l4?.dport}`;
      }
      return l4.sport === want.podPort ? undefined : `expected client port ${want.podPort} at the pod, got ${l4.sport}`;
    }
    case 'remote': {
      if (retval !== TcVerdict.REDIRECT) return `expected remote (REDIRECT), got verdict ${retval}`;
      if (ip?.dst !== want.backend.address || l4?.dport !== want.backend.port || ip.src !== want.snatAddr) {
        return `expected ${want.snatAddr} → ${want.backend.address}:${want.backend.port}, got ${ip?.src}:${l4?.sport} → ${ip?.dst}:${l4?.dport}`;
      }
      const port = l4.sport as number;
      if (want.snatPortCandidates === 'client' && want.snatPort !== 0 && port !== want.snatPort) return `expected SNAT port ${want.snatPort}, got ${port}`;
      if (want.snatPortCandidates === 'any' && !model.natPortAcceptable(want.backend, port, t.proto)) return `SNAT port ${port} is taken or out of range`;
      model.commitRemote(t, want, port);
      return undefined;
    }
    case 'reply-remote':
      return `unexpected reply-remote for a client packet`;
  }
}
