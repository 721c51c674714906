// Differential test of the socket hooks: random Service tables written by the agent's
// writer, real connect() calls in a host whose cgroup carries the hooks, and the reference
// decision (src/datapath/reference/sock.ts, what `ferry explain --from pod|host` reports)
// must agree on every destination. The host's routes make the hooks' decision visible in
// errno: backends (10.244.0.0/16) are "prohibit" (EACCES), everything else "unreachable"
// (EHOSTUNREACH), a refusal by the hooks is ECONNREFUSED, a denial by
// loadBalancerSourceRanges EPERM (the pod's namespace recorded with an address in most
// rounds, not in one; the host's is the node's), and an untouched loopback
// connect reaches the probe's own listener. IPv6 sockets to IPv4-mapped addresses
// (::ffff:a.b.c.d) must get the IPv4 decision, and IPv6 ClusterIPs (lb6_services, backends
// in fd00:244::/32, "prohibit" too) the same decision as IPv4 ones.
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Datapath, defaultObjectsDir } from '../../src/datapath/loader.js';
import { Proto } from '../../src/datapath/layouts.js';
import { sockDecision } from '../../src/datapath/reference/sock.js';
import { ServiceWriter } from '../../src/datapath/writer.js';
import { sockLookup } from '../../src/datapath/explain.js';
import type { FrontendSpec } from '../../src/model/frontend.js';
import { Testbed, type Host } from '../../src/sandbox/netns/testbed.js';
import { WORKLOADS_BIN } from '../../src/sandbox/workloads/spawn.js';
import { netnsCookie } from '../../src/sys/socket.js';
import { describeWith } from '../harness/requirements.js';
import { rng } from '../harness/rng.js';

const SEED = Number(process.env.FERRY_DIFF_SEED ?? Date.now() % 2 ** 31);
const ROUNDS = 4;
const NODE_IP = '10.0.30.21';
/** The address the agent would have recorded for the pod's namespace (lb4_netns_sources). */
const POD_SOURCE = '10.244.7.7';
const RANGES = [`${NODE_IP}/32`, `${POD_SOURCE}/32`, '10.244.0.0/16', '192.0.2.0/24'];

let tb: Testbed;
let host: Host;
let pod: Host;
let dp: Datapath;
let writer: ServiceWriter;
let pinDir: string;

beforeAll(async () => {
  tb = await Testbed.create();
  host = await tb.addHost('node');
  // A pod: its own namespace, its cgroup under the node's, so the node's hooks cover it.
  pod = await tb.addHost('pod', { cgroupParent: host });
  for (const h of [host, pod]) {
    await h.ip('route', 'add', 'unreachable', 'default');
    await h.ip('route', 'add', 'prohibit', '10.244.0.0/16');
    await h.ip('-6', 'route', 'add', 'unreachable', 'default');
    await h.ip('-6', 'route', 'add', 'prohibit', 'fd00:244::/32');
  }
  pinDir = join('/sys/fs/bpf', `${tb.prefix}-sock`);
  mkdirSync(pinDir);
  dp = Datapath.load({ objectsDir: defaultObjectsDir(), pinDir, snatIPv4: NODE_IP, hostNetnsCookie: netnsCookie(host.netns) });
  dp.attachCgroup({ path: host.cgroup, expect: 'subtree' });
  writer = new ServiceWriter(dp.maps);
});
afterAll(async () => {
  dp?.close();
  rmSync(pinDir, { recursive: true, force: true });
  await tb?.destroy();
});

function randomTable(r: () => number): FrontendSpec[] {
  const int = (n: number) => Math.floor(r() * n);
  const out: FrontendSpec[] = [];
  const seen = new Set<string>();
  const backends = (n: number) => Array.from({ length: n }, (_, i) => ({ address: `10.244.${1 + int(2)}.${10 + i}`, port: 8080 + int(2), local: r() < 0.5 }));
  const add = (f: FrontendSpec) => {
    const id = `${f.address}:${f.port}/${f.proto}`;
    if (seen.has(id)) return;
    seen.add(id);
    out.push(f);
  };
  for (let i = 0; i < 8 + int(8); i++) {
    const kind = (['ClusterIP', 'ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalIP'] as const)[int(5)]!;
    const proto = r() < 0.6 ? 'TCP' : 'UDP';
    const n = r() < 0.2 ? 0 : 1 + int(3);
    const address = kind === 'ClusterIP' ? `10.96.0.${1 + int(5)}` : kind === 'NodePort' ? NODE_IP : kind === 'LoadBalancer' ? `10.0.100.${1 + int(3)}` : '10.0.30.200';
    const port = kind === 'NodePort' ? 30000 + int(6) : 80 + int(3);
    const f: FrontendSpec = { address, port, proto, kind, backends: backends(n), service: `default/s${i}:p` };
    // loadBalancerSourceRanges that take in or leave out the host's and the pod's sources.
    if (kind === 'LoadBalancer' && r() < 0.6) f.sourceRanges = RANGES.filter(() => r() < 0.5);
    if (f.sourceRanges?.length === 0) f.sourceRanges = ['192.0.2.0/24'];
    // Some frontends let this node's pods and host reach other backends (ETP=Local's short-circuit).
    if (r() < 0.25) f.internalBackends = backends(int(3));
    add(f);
    if (kind === 'NodePort' && r() < 0.7) add({ ...f, address: '0.0.0.0', nodePortAny: true });
  }
  // IPv6 ClusterIPs (the socket hooks' lb6_services), some without backends.
  for (let i = 0; i < 1 + int(4); i++) {
    const n = r() < 0.2 ? 0 : 1 + int(3);
    const bs = Array.from({ length: n }, (_, j) => ({ address: `fd00:244:${1 + int(2)}::${10 + j}`, port: 8080 + int(2), local: false }));
    add({ address: `fd00:96::${1 + int(3)}`, port: 80 + int(3), proto: r() < 0.6 ? 'TCP' : 'UDP', kind: 'ClusterIP', backends: bs, service: `default/v6-${i}:p`, ...(r() < 0.3 ? { affinityTimeout: 60 } : {}) });
  }
  // Every table has one NodePort with backends on every address, so the host's loopback
  // rewrite is always put to the test (a seed once drew four tables without one).
  const proto = r() < 0.5 ? 'TCP' : 'UDP';
  const always: FrontendSpec = { address: NODE_IP, port: 30009, proto, kind: 'NodePort', backends: backends(1 + int(3)), service: 'default/always:p' };
  add(always);
  add({ ...always, address: '0.0.0.0', nodePortAny: true });
  // And LB IPs whose ranges leave out every source here: one found in the external scope,
  // one in the internal scope (ETP=Local's short-circuit: its ranges are on the external entry).
  const ranged: FrontendSpec = { address: '10.0.100.9', port: 80, proto, kind: 'LoadBalancer', backends: backends(1), sourceRanges: ['192.0.2.0/24'], service: 'default/ranged:p' };
  add(ranged);
  add({ ...ranged, address: '10.0.100.10', internalBackends: backends(1), service: 'default/ranged-local:p' });
  return out;
}

/** Destinations worth asking about for a table. */
function targets(table: FrontendSpec[], r: () => number): Array<{ address: string; port: number; proto: 'tcp' | 'udp' }> {
  const out: Array<{ address: string; port: number; proto: 'tcp' | 'udp' }> = [];
  const flip = (p: string) => (p === 'TCP' ? 'udp' : 'tcp') as 'tcp' | 'udp';
  for (const f of table) {
    const address = f.address === '0.0.0.0' ? '127.0.0.1' : f.address;
    out.push({ address, port: f.port, proto: f.proto.toLowerCase() as 'tcp' | 'udp' });
    out.push({ address, port: f.port, proto: flip(f.proto) });
    out.push({ address, port: f.port + 1000, proto: 'tcp' });
    if (f.nodePortAny) out.push({ address: '127.0.0.9', port: f.port, proto: f.proto.toLowerCase() as 'tcp' | 'udp' });
  }
  out.push({ address: '127.0.0.1', port: 30000 + Math.floor(r() * 6), proto: 'tcp' }, { address: '10.1.2.3', port: 80, proto: 'tcp' }, { address: '10.96.0.99', port: 80, proto: 'udp' });
  // IPv6 sockets reaching the same destinations through IPv4-mapped addresses.
  for (const t of [...out]) if (r() < 0.4 && !t.address.includes(':')) out.push({ ...t, address: `::ffff:${t.address}` });
  out.push({ address: 'fd00:1::3', port: 80, proto: 'tcp' });
  const unique = new Map(out.map((t) => [`${t.address}:${t.port}/${t.proto}`, t]));
  return [...unique.values()];
}

/** What errno says the hooks did. */
function observed(result: string): string {
  switch (result) {
    case 'EACCES':
      return 'rewritten';
    case 'ECONNREFUSED':
      return 'refused';
    case 'EPERM':
      return 'denied';
    case 'EHOSTUNREACH':
    case 'ok':
      return 'unchanged';
    default:
      return `unexpected ${result}`;
  }
}

describeWith(['root', 'netns', 'bpffs', 'cgroup2'], 'socket hooks against the reference decision', () => {
  it(`agree on every destination of ${ROUNDS} random tables, from the host and from a pod (seed ${SEED})`, async () => {
    const r = rng(SEED);
    // What `ferry explain --from pod|host` reads (IPv6 master entries as the IPv4 ones the reference reads).
    const lookup = sockLookup(dp.maps);
    const podCookie = netnsCookie(pod.netns);
    const seen = new Map<string, number>();
    let loopbackNodePorts = 0;
    let v6Mapped = 0;
    let v6Rewrites = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const table = randomTable(r);
      writer.apply(table);
      dp.maps.lb4_sock_rev.deleteBatch([...dp.maps.lb4_sock_rev.keys()]);
      dp.maps.lb6_sock_rev.deleteBatch([...dp.maps.lb6_sock_rev.keys()]);
      // The pod's namespace recorded by the agent in most rounds, not in one (the first).
      const podSource = round === 0 ? undefined : POD_SOURCE;
      if (podSource) dp.maps.lb4_netns_sources.update(podCookie, { address: podSource });
      else dp.maps.lb4_netns_sources.delete(podCookie);
      const dests = targets(table, r);
      const list = dests.map((t) => `[${t.address}]:${t.port}/${t.proto}`).join(',');
      const diffs: string[] = [];
      for (const [where, fromHost] of [[host, true], [pod, false]] as const) {
        const res = await where.exec([process.execPath, WORKLOADS_BIN, 'connect-probe', '--listen-loopback', '--targets', list], { timeoutMs: 60_000 });
        expect(res.code, res.stderr).toBe(0);
        const lines = res.stdout.trim().split('\n').map((l) => JSON.parse(l) as { target: string; result: string });
        expect(lines).toHaveLength(dests.length);
        lines.forEach((l, i) => {
          const t = dests[i]!;
          const mapped = t.address.startsWith('::ffff:');
          if (mapped) v6Mapped++;
          const want = sockDecision(lookup, { address: t.address.replace(/^::ffff:/, ''), port: t.port, proto: t.proto === 'tcp' ? Proto.TCP : Proto.UDP, fromHost, source: fromHost ? NODE_IP : podSource }).verdict;
          const got = observed(l.result);
          if (got !== want) diffs.push(`${where.name}: ${l.target}: hooks ${got} (${l.result}), reference ${want}`);
          if (t.address.replace(/^::ffff:/, '').startsWith('127.') && want !== 'unchanged') {
            expect(fromHost, `${l.target}: a pod's loopback is its own`).toBe(true);
            loopbackNodePorts++;
          }
          seen.set(`${want}${fromHost ? '' : ' (pod)'}`, (seen.get(`${want}${fromHost ? '' : ' (pod)'}`) ?? 0) + 1);
        });
      }
      expect(diffs, `seed ${SEED}, round ${round}`).toEqual([]);
      // Every rewrite went to one of its frontend's backends.
      const backendsOf = new Map<number, Set<string>>();
      for (const [k, v] of dp.maps.lb4_services.entries()) {
        if (k.slot === 0) continue;
        const master = dp.maps.lb4_services.lookup({ ...k, slot: 0 });
        const b = dp.maps.lb4_backends.lookup(v.backendId);
        if (!master || !b) continue;
        if (!backendsOf.has(master.revNatId)) backendsOf.set(master.revNatId, new Set());
        backendsOf.get(master.revNatId)!.add(`${b.address}:${b.port}`);
      }
      for (const [k, v] of dp.maps.lb4_sock_rev.entries()) expect(backendsOf.get(v.revNatId)?.has(`${k.address}:${k.port}`), `${k.address}:${k.port} for ${v.address}:${v.port}`).toBe(true);
      const slots6 = new Set(dp.maps.lb6_services.entries().filter(([k]) => k.slot > 0).map(([k, v]) => `${k.address}:${k.port}/${k.proto} ${v.address}:${v.port}`));
      const rev6 = dp.maps.lb6_sock_rev.entries();
      v6Rewrites += rev6.length;
      // A socket's reverse entry says which frontend it asked for: the backend must be one of that frontend's, by TCP or UDP.
      for (const [k, v] of rev6) expect([6, 17].some((p) => slots6.has(`${v.address}:${v.port}/${p} ${k.address}:${k.port}`)), `[${k.address}]:${k.port} for [${v.address}]:${v.port}`).toBe(true);
    }
    expect(v6Rewrites).toBeGreaterThan(0);
    // NodePorts answered on the host's loopback, and the same ports were left alone in the pod.
    expect(loopbackNodePorts).toBeGreaterThan(0);
    expect(v6Mapped).toBeGreaterThan(20);
    // Every kind of decision was put to the test.
    expect([...seen.keys()].sort(), JSON.stringify([...seen])).toEqual(['denied', 'denied (pod)', 'refused', 'refused (pod)', 'rewritten', 'rewritten (pod)', 'unchanged', 'unchanged (pod)']);
    expect([...seen.values()].reduce((a, b) => a + b)).toBeGreaterThan(100);
  });
});
