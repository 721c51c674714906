// IPv6 ClusterIPs at the socket hooks, with real sockets: the agent's writer fills
// lb6_services, and connect()/sendmsg() from the node's host to the IPv6 ClusterIP reach a
// backend pod, getpeername()/recvmsg() report the ClusterIP, unknown ports and empty
// Services are refused, ClientIP affinity holds, and addresses that are no Service's are
// left alone. IPv4 through the same writer call keeps working beside it (dual stack).
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Datapath, defaultObjectsDir } from '../../src/datapath/loader.js';
import { ServiceWriter } from '../../src/datapath/writer.js';
import type { FrontendSpec } from '../../src/model/frontend.js';
import { Testbed, type Host } from '../../src/sandbox/netns/testbed.js';
import { netnsCookie } from '../../src/sys/socket.js';
import { describeWith } from '../harness/requirements.js';

const CLUSTER_IP6 = 'fd00:96::10';
const BACKENDS = ['fd00:244:1::10', 'fd00:244:1::11'];
const CLUSTER_IP4 = '10.96.0.10';
const BACKEND4 = '10.244.1.10';

/** Backends in the pod: per address, a TCP server on 8080 and a UDP one on 5353, each answering with its own address. */
const SERVERS = `
const net = require('node:net'), dgram = require('node:dgram');
for (const a of JSON.parse(process.argv[1])) {
  net.createServer((c) => c.end(a)).listen(8080, a);
  const u = dgram.createSocket(a.includes(':') ? 'udp6' : 'udp4');
  u.on('message', (m, r) => u.send(a, r.port, r.address));
  u.bind(5353, a);
}`;

/** A client: n TCP connections or UDP datagrams to host:port; per try, the peer it reports and the backend that answered, or the error. */
const CLIENT = `
const net = require('node:net'), dgram = require('node:dgram');
const [proto, host, port, n] = JSON.parse(process.argv[1]);
const one = () => new Promise((done) => {
  const t = setTimeout(() => done({ error: 'timeout' }), 3000);
  if (proto === 'udp') {
    const s = dgram.createSocket(host.includes(':') ? 'udp6' : 'udp4');
    s.on('message', (m, r) => { clearTimeout(t); s.close(); done({ peer: r.address + ':' + r.port, backend: String(m) }); });
    s.on('error', (e) => { clearTimeout(t); s.close(); done({ error: e.code }); });
    s.send('x', port, host);
    return;
  }
  const c = net.connect({ host, port });
  let peer = '', data = '';
  c.on('connect', () => { peer = c.remoteAddress + ':' + c.remotePort; });
  c.on('data', (d) => (data += d));
  c.on('end', () => { clearTimeout(t); done({ peer, backend: data }); });
  c.on('error', (e) => { clearTimeout(t); done({ error: e.code }); });
});
(async () => { const out = []; for (let i = 0; i < n; i++) out.push(await one()); console.log(JSON.stringify(out)); })();`;

interface Try {
  peer?: string;
  backend?: string;
  error?: string;
}

let tb: Testbed;
let node: Host;
let pod: Host;
let dp: Datapath;
let writer: ServiceWriter;
let pinDir: string;

async function tries(proto: 'tcp' | 'udp', host: string, port: number, n = 1): Promise<Try[]> {
  const r = await node.exec([process.execPath, '-e', CLIENT, JSON.stringify([proto, host, port, n])], { timeoutMs: 30_000 });
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout.trim()) as Try[];
}

const v6 = (o: Partial<FrontendSpec> = {}): FrontendSpec => ({
  address: CLUSTER_IP6,
  port: 80,
  proto: 'TCP',
  kind: 'ClusterIP',
  backends: BACKENDS.map((address) => ({ address, port: 8080, local: true })),
  service: 'default/web:http',
  ...o,
});
const v4: FrontendSpec = { address: CLUSTER_IP4, port: 80, proto: 'TCP', kind: 'ClusterIP', backends: [{ address: BACKEND4, port: 8080, local: true }], service: 'default/web:http' };

beforeAll(async () => {
  tb = await Testbed.create();
  node = await tb.addHost('node');
  pod = await tb.addHost('pod', { cgroupParent: node });
  await tb.link({ host: node, ifname: 'vpod', address: '10.244.1.1/24' }, { host: pod, ifname: 'eth0', address: `${BACKEND4}/24` });
  // nodad: usable at once, not after duplicate address detection's second or two.
  await node.ip('-6', 'addr', 'add', 'fd00:244:1::1/64', 'dev', 'vpod', 'nodad');
  for (const a of BACKENDS) await pod.ip('-6', 'addr', 'add', `${a}/64`, 'dev', 'eth0', 'nodad');
  pinDir = join('/sys/fs/bpf', `${tb.prefix}-v6`);
  mkdirSync(pinDir);
  dp = Datapath.load({ objectsDir: defaultObjectsDir(), pinDir, snatIPv4: '10.0.30.21', hostNetnsCookie: netnsCookie(node.netns) });
  dp.attachCgroup({ path: node.cgroup, expect: 'subtree' });
  writer = new ServiceWriter(dp.maps);
  pod.spawn([process.execPath, '-e', SERVERS, JSON.stringify([...BACKENDS, BACKEND4])]);
  // The servers are up once a backend answers directly (no Service involved).
  for (let i = 0; i < 100; i++) {
    const [t] = await tries('tcp', BACKENDS[1]!, 8080);
    if (t?.backend === BACKENDS[1]) break;
    await new Promise((r) => setTimeout(r, 100));
  }
});
afterAll(async () => {
  dp?.close();
  if (pinDir) rmSync(pinDir, { recursive: true, force: true });
  await tb?.destroy();
});

describeWith(['root', 'netns', 'bpffs', 'cgroup2'], 'IPv6 ClusterIPs at the socket hooks (lb6_services)', () => {
  it('TCP to the IPv6 ClusterIP reaches both backends, and getpeername() names the ClusterIP', async () => {
    const stats = writer.apply([v4, v6()]);
    expect(stats.failures).toEqual([]);
    const got = await tries('tcp', CLUSTER_IP6, 80, 24);
    expect(got.filter((t) => t.error)).toEqual([]);
    expect(new Set(got.map((t) => t.peer))).toEqual(new Set([`${CLUSTER_IP6}:80`]));
    // Spread by socket: 24 sockets over two slots all on one has odds 2^-23.
    expect(new Set(got.map((t) => t.backend))).toEqual(new Set(BACKENDS));
    // The IPv4 family of the same Service, written by the same call.
    expect(await tries('tcp', CLUSTER_IP4, 80)).toEqual([{ peer: `${CLUSTER_IP4}:80`, backend: BACKEND4 }]);
  });

  it('UDP datagrams to the ClusterIP come back from the ClusterIP (recvmsg)', async () => {
    writer.apply([v6(), v6({ port: 53, proto: 'UDP', backends: [{ address: BACKENDS[0]!, port: 5353, local: true }], service: 'default/dns:dns' })]);
    expect(await tries('udp', CLUSTER_IP6, 53, 3)).toEqual(Array(3).fill({ peer: `${CLUSTER_IP6}:53`, backend: BACKENDS[0] }));
  });

  it('refuses an unknown port and a Service without endpoints; leaves other addresses alone', async () => {
    writer.apply([v6(), v6({ port: 81, backends: [], service: 'default/empty:http' })]);
    expect(await tries('tcp', CLUSTER_IP6, 82)).toEqual([{ error: 'ECONNREFUSED' }]);
    expect(await tries('tcp', CLUSTER_IP6, 81)).toEqual([{ error: 'ECONNREFUSED' }]);
    expect(await tries('tcp', BACKENDS[0]!, 8080)).toEqual([{ peer: `${BACKENDS[0]}:8080`, backend: BACKENDS[0] }]);
    // Once the Service is gone, its address is nobody's: connect() goes on untranslated
    // (and finds no route here).
    writer.apply([]);
    expect(dp.maps.lb6_services.entries()).toEqual([]);
    expect((await tries('tcp', CLUSTER_IP6, 80))[0]?.error).not.toBe('ECONNREFUSED');
  });

  it('an ETP=Local frontend with no endpoint on this node: its pods and host reach it through the cluster endpoints (the internal entry)', async () => {
    const lb = v6({ address: 'fd00:100::10', kind: 'LoadBalancer', backends: [], dropWhenEmpty: true, internalBackends: [{ address: BACKENDS[0]!, port: 8080, local: false }], service: 'default/lb:http' });
    expect(writer.apply([lb]).failures).toEqual([]);
    expect(await tries('tcp', 'fd00:100::10', 80)).toEqual([{ peer: 'fd00:100::10:80', backend: BACKENDS[0] }]);
  });

  it('ClientIP affinity keeps a namespace on one backend', async () => {
    writer.apply([v6({ affinityTimeout: 60 })]);
    const got = await tries('tcp', CLUSTER_IP6, 80, 12);
    expect(got.filter((t) => t.error)).toEqual([]);
    expect(new Set(got.map((t) => t.backend)).size).toBe(1);
    // The backend it stuck to leaves: the next connection takes the one left.
    const left = BACKENDS.find((b) => b !== got[0]!.backend)!;
    writer.apply([v6({ affinityTimeout: 60, backends: [{ address: left, port: 8080, local: true }] })]);
    expect((await tries('tcp', CLUSTER_IP6, 80, 3)).map((t) => t.backend)).toEqual([left, left, left]);
  });

  it('a restarted writer reads the map back: the same Services write nothing, a changed one only its difference', () => {
    const services = [v6(), v6({ port: 53, proto: 'UDP', backends: [{ address: 'FD00:244:1:0::10', port: 5353, local: true }], service: 'default/dns:dns' })];
    writer.apply(services);
    const held = dp.maps.lb6_services.entries().length;
    expect(held).toBe(1 + 3 + 2); // the address's wildcard (both Services'), web's master and two slots, dns's master and slot
    const again = new ServiceWriter(dp.maps);
    const same = again.apply(services);
    expect(same.entriesWritten + same.entriesDeleted).toBe(0);
    const one = again.applyChanged(new Map([['default/web', [v6({ backends: [{ address: BACKENDS[0]!, port: 8080, local: true }] })]]]));
    // The master (count 1) and the slot that went; the remaining slot keeps its place.
    expect([one.entriesWritten, one.entriesDeleted]).toEqual([1, 1]);
    expect(again.entryCounts().lb6_services).toBe(held - 1);
  });
});
