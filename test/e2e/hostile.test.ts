// Hostile and unusual traffic against a sandbox with real agents, from the client (hand-
// built packets through a raw socket: spoofed sources, IP options) and from pods. Each
// numbered case of the hardening issue, with the safe outcome asserted.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { counterTotal } from '../../src/datapath/counters.js';
import { CtFlags } from '../../src/datapath/layouts.js';
import { summarizeHostPorts } from '../../src/datapath/host-ports.js';
import { monotonicNs } from '../../src/datapath/ct-gc.js';
import { PinnedDatapath } from '../../src/datapath/pinned-view.js';
import { buildPacket, ipv4, tcp } from '../../src/packet/build.js';
import { SandboxApi } from '../../src/sandbox/api-client.js';
import { dsrOption } from '../../src/sandbox/fixtures/dsr.js';
import type { Host } from '../../src/sandbox/netns/testbed.js';
import { Sandbox } from '../../src/sandbox/sandbox.js';
import { WORKLOADS_BIN } from '../../src/sandbox/workloads/spawn.js';
import { sendRawIPv4 } from '../../src/sys/raw-socket.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { udpEcho } from '../harness/traffic.js';
import { eventually } from '../harness/wait.js';

const SNAT_PORTS = { min: 20000, max: 21999 }; // small, so that a SYN flood exhausts them
const NODE1 = '10.0.30.21';
const NODE2 = '10.0.30.22';
const CLIENT = '10.0.10.2';

let sb: Sandbox;
let api: SandboxApi;

const put = (kind: string, obj: Record<string, unknown>) => sb.put(kind, obj);
const pod = (name: string, labels: Record<string, string>, node: string, ports: Array<{ containerPort: number; protocol?: string; name?: string }>, image = 'traefik/whoami') =>
  ({ apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'default', labels }, spec: { nodeName: node, containers: [{ name: 'c', image, ports }] } });
const svc = (name: string, spec: Record<string, unknown>) => ({ apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'default' }, spec });
const getSvc = async (name: string) => (await api.call('GET', api.url('Service', 'default', name))).json as { spec: { clusterIP: string }; status?: { loadBalancer?: { ingress?: Array<{ ip: string }> } } };
const podHost = (name: string): Host => sb.kubelet.podInfo('default', name)!.host;
const podIP = (name: string): string => sb.kubelet.podInfo('default', name)!.ip;
const pins = (node: 1 | 2) => sb.pinDir(sb.net.node(node));
const counter = (node: 1 | 2, name: string) => PinnedDatapath.with(pins(node), (dp) => counterTotal(dp.maps, name).packets);

async function curl(from: Host, url: string, extra: string[] = []): Promise<{ code: number; hostname: string; out: string }> {
  const r = await from.exec(['curl', '-sS', '-g', '--max-time', '3', ...extra, url], { timeoutMs: 10_000 });
  return { code: r.code, hostname: /Hostname: (\S+)/.exec(r.stdout)?.[1] ?? '', out: r.stdout + r.stderr };
}

/** A TCP SYN as a raw IPv4 packet. */
const rawSyn = (src: string, sport: number, dst: string, dport: number, options?: Buffer) =>
  buildPacket([ipv4({ src, dst, ttl: 64, id: sport & 0xffff, ...(options ? { options } : {}) }), tcp({ sport, dport, flags: 'S', seq: 1000 })]);

beforeAll(async () => {
  sb = await Sandbox.up({
    name: 'hostile', nodes: 2, mode: 'snat', log: pino({ level: 'silent' }),
    // Room for 256 backends: a Service with 300 endpoints cannot fit.
    agentEnv: { FERRY_MIN_SYNC_PERIOD_MS: '20', FERRY_SNAT_PORT_MIN: String(SNAT_PORTS.min), FERRY_SNAT_PORT_MAX: String(SNAT_PORTS.max), FERRY_MAP_SIZES: JSON.stringify({ backends: 256 }) },
  });
  api = new SandboxApi(sb.api.alsoUrl!);
  await put('Pod', pod('web-a', { app: 'web' }, 'node-1', [{ name: 'http', containerPort: 8080 }]));
  await put('Pod', pod('echo-a', { app: 'echo' }, 'node-1', [{ name: 'dns', containerPort: 5353, protocol: 'UDP' }], 'udp-echo'));
  await put('Pod', pod('evil', { app: 'evil' }, 'node-2', [{ name: 'http', containerPort: 8080 }]));
  await put('Pod', pod('tool-1', { role: 'tool' }, 'node-1', [{ containerPort: 8080 }]));
  await put('Pod', pod('tool-2', { role: 'tool' }, 'node-2', [{ containerPort: 8080 }]));
  await put('Service', svc('web', { type: 'NodePort', selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort: 30180 }] }));
  await put('Service', svc('echo', { type: 'LoadBalancer', selector: { app: 'echo' }, ports: [{ name: 'dns', port: 53, targetPort: 5353, protocol: 'UDP', nodePort: 30153 }] }));
  // Wait until both nodes serve the NodePort.
  for (const n of [NODE1, NODE2]) expect((await eventually(() => curl(sb.net.client, `http://${n}:30180/`), (x) => x.code === 0)).hostname).toBe('web-a');
}, 180_000);
afterAll(async () => {
  await sb?.down();
}, 60_000);

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'hostile traffic against a sandbox', () => {
  it('1. a DSR option from a stranger is dropped and counted, never recorded; ferry monitor shows why', async () => {
    const before = await counter(1, 'DROP_DSR_INVALID');
    const monitor = spawn(process.execPath, [join(REPO_ROOT, 'bin', 'ferry.js'), 'monitor', '--type', 'drop', '--count', '1', '-o', 'json', '--pin-dir', pins(1)], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    monitor.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const done = new Promise<void>((r) => monitor.once('exit', () => r()));
    // Events flow once the monitor has turned them on (a fixed wait lost the race on a busy machine).
    await eventually(async () => PinnedDatapath.with(pins(1), (dp) => dp.map('ferry_monitor').lookup(0)?.flags ?? 0), (f) => f !== 0, 10_000);
    // Naming an address that is no frontend (a spoofing relay), a real NodePort of the other
    // node while this one is in snat mode, and sent to the NodePort itself.
    sendRawIPv4(sb.net.client.netns, [
      rawSyn(CLIENT, 41001, podIP('web-a'), 8080, dsrOption(53, '8.8.8.8')),
      rawSyn(CLIENT, 41002, podIP('web-a'), 8080, dsrOption(30180, NODE2)),
      rawSyn(CLIENT, 41003, NODE1, 30180, dsrOption(30180, NODE2)),
    ]);
    await eventually(async () => (await counter(1, 'DROP_DSR_INVALID')) - before, (n) => n >= 3n, 5000);
    expect((await counter(1, 'DROP_DSR_INVALID')) - before).toBe(3n);
    const bindings = PinnedDatapath.with(pins(1), (dp) => dp.map('nat4').entries().map(([, v]) => v));
    expect(bindings.filter((b) => b.clientPort >= 41001 && b.clientPort <= 41003)).toEqual([]);
    const timeout = setTimeout(() => monitor.kill(), 10_000); // report, not hang, if no event comes
    await done;
    clearTimeout(timeout);
    expect(JSON.parse(out.trim().split('\n')[0]!)).toMatchObject({ type: 'drop', reasonName: 'dsr_invalid' });
  });

  it('2. a SYN never acknowledged keeps its flow for the SYN lifetime only; a real connection is established', async () => {
    // From an address nobody has: the SYN-ACK goes nowhere, the handshake never completes.
    sendRawIPv4(sb.net.client.netns, [rawSyn('10.0.10.77', 42001, NODE2, 30180)]);
    const flow = await eventually(async () => PinnedDatapath.with(pins(2), (dp) => dp.map('ct4').entries().find(([k]) => k.saddr === '10.0.10.77' && k.sport === 42001)?.[1]), (v) => Boolean(v && v.flags & CtFlags.CT_F_SEEN_REPLY), 5000);
    expect(flow).toBeDefined();
    expect(flow!.flags & CtFlags.CT_F_ESTABLISHED).toBe(0);
    expect(Number(flow!.expiresNs - monotonicNs()) / 1e9).toBeLessThanOrEqual(60);
    // A real, slow download (the server spreads it over 4 s): established, with the long
    // lifetime, while it runs.
    const slow = sb.net.client.exec(['curl', '-sS', '--max-time', '10', '-o', '/dev/null', '-w', '%{size_download} bytes in %{time_total} s', `http://${NODE2}:30180/bytes?n=80000&over=4000`], { timeoutMs: 20_000 });
    const clientFlows = () => PinnedDatapath.with(pins(2), (dp) => dp.map('ct4').entries().filter(([k]) => k.saddr === CLIENT && k.dport === 30180));
    const live = await eventually(async () => clientFlows().find(([, v]) => v.flags & CtFlags.CT_F_ESTABLISHED && !(v.flags & CtFlags.CT_F_CLOSING))?.[1], (v) => Boolean(v), 15_000);
    // On failure, say what node-2 held for the client and how the download ended.
    if (!live) expect.fail(`no live flow; node-2 held ${JSON.stringify(clientFlows(), (_, x) => (typeof x === 'bigint' ? String(x) : x))}; curl: ${JSON.stringify(await slow)}`);
    expect(Number(live!.expiresNs - monotonicNs()) / 1e9).toBeGreaterThan(3600);
    expect(await slow).toMatchObject({ code: 0, stdout: expect.stringMatching(/^80000 bytes/) });
  });

  it('2b. a port a process of the node listens on is never an SNAT port, though the hooks spare most flows the host lookup', async () => {
    // A flow takes its client's own port when it is in the SNAT range and free.
    const natPortOf = (sport: number) => PinnedDatapath.with(pins(2), (dp) => dp.map('ct4').entries().find(([k]) => k.saddr === CLIENT && k.sport === sport)?.[1].natPort);
    const free = SNAT_PORTS.min + 7;
    const held = SNAT_PORTS.min + 8;
    expect((await curl(sb.net.client, `http://${NODE2}:30180/`, ['--local-port', String(free)])).hostname).toBe('web-a');
    expect(natPortOf(free)).toBe(free);
    expect(PinnedDatapath.with(pins(2), (dp) => summarizeHostPorts(dp.map('host_ports')).trusted)).toBe(true);
    // Bound after node-2's agent attached its socket hooks: marked by post_bind.
    const listener = sb.net.node(2).host.spawn([process.execPath, '-e', `require('net').createServer((c) => c.end('mine')).listen(${held}, () => console.log('bound'))`]);
    try {
      await eventually(async () => listener.output(), (o) => o.includes('bound'), 5000);
      expect((await curl(sb.net.client, `http://${NODE2}:30180/`, ['--local-port', String(held)])).hostname).toBe('web-a');
      const port = natPortOf(held);
      expect(port).toBeGreaterThanOrEqual(SNAT_PORTS.min);
      expect(port).not.toBe(held);
      // and the listener still has its port.
      expect(await sb.net.node(2).host.execOk([process.execPath, '-e', `require('net').connect(${held}, '127.0.0.1').on('data', (d) => process.stdout.write(d))`], { timeoutMs: 5000 })).toBe('mine');
    } finally {
      await listener.stop();
    }
  });

  it('3. 6000 unanswered SYNs through one node do not lock real clients out (early drop)', async () => {
    const packets: Buffer[] = [];
    for (let i = 0; i < 6000; i++) packets.push(rawSyn(`10.0.10.${100 + (i % 100)}`, 10_000 + Math.floor(i / 100) * 100 + (i % 100), NODE2, 30180));
    expect(sendRawIPv4(sb.net.client.netns, packets)).toBe(6000);
    // Every port of the range went to a SYN; later ones took the ports of flows that never
    // became established.
    expect(await eventually(async () => counter(2, 'STAT_NAT_EARLY_DROP'), (n) => n > 0n, 5000)).toBeGreaterThan(0n);
    for (let i = 0; i < 5; i++) expect((await curl(sb.net.client, `http://${NODE2}:30180/`)).hostname).toBe('web-a');
  });

  it('4. UDP datagrams larger than the MTU arrive whole: NodePort (local and remote backend), LB IP, ClusterIP', async () => {
    const lb = (await eventually(() => getSvc('echo'), (s) => Boolean(s.status?.loadBalancer?.ingress?.[0]?.ip))).status!.loadBalancer!.ingress![0]!.ip;
    const clusterIP = (await getSvc('echo')).spec.clusterIP;
    // The router learns the address by BGP from every node: wait until all of them announce it.
    await eventually(async () => (await sb.net.router.exec(['ip', 'route', 'show', lb])).stdout.match(/via 10\.0\.30\.2\d/g)?.length ?? 0, (n) => n === sb.net.nodes.length, 20_000);
    for (const size of [3000, 9000]) {
      for (const to of [`${NODE1}:30153`, `${NODE2}:30153`, `${lb}:53`]) {
        expect((await udpEcho(sb.net.client, to, size)).map((r) => [r.ok, r.bytes]), `${size} bytes to ${to}`).toEqual([[true, size], [true, size]]);
      }
      expect((await udpEcho(podHost('tool-2'), `${clusterIP}:53`, size)).map((r) => [r.ok, r.bytes]), `${size} bytes to the ClusterIP`).toEqual([[true, size], [true, size]]);
    }
    expect(await counter(2, 'STAT_FRAGMENT')).toBeGreaterThan(0n);
  });

  it('4b. a ping to an LB IP is dropped where it arrives, not routed back and forth until its TTL runs out', async () => {
    const lb = (await eventually(() => getSvc('echo'), (s) => Boolean(s.status?.loadBalancer?.ingress?.[0]?.ip))).status!.loadBalancer!.ingress![0]!.ip;
    await eventually(async () => (await sb.net.router.exec(['ip', 'route', 'show', lb])).stdout.match(/via 10\.0\.30\.2\d/g)?.length ?? 0, (n) => n === sb.net.nodes.length, 20_000);
    const dropped = async () => (await counter(1, 'DROP_NOT_SERVED')) + (await counter(2, 'DROP_NOT_SERVED'));
    const before = await dropped();
    // The nodes route everything else to the router, which routes the LB IP to the nodes:
    // left to a node's kernel, each request would cross that link until its TTL ran out
    // and come back as "Time to live exceeded".
    const r = await sb.net.client.exec(['ping', '-n', '-c', '3', '-i', '0.2', '-W', '1', lb], { timeoutMs: 10_000 });
    expect(r.code).not.toBe(0);
    expect(r.stdout).not.toMatch(/exceeded/i);
    expect(await dropped()).toBe(before + 3n);
  });

  it('5. inside a pod, 127.0.0.1:NODEPORT is the pod\'s own; on the node it is the NodePort', async () => {
    const sidecar = podHost('tool-1').spawn([process.execPath, WORKLOADS_BIN, 'whoami', '--port', '30180', '--name', 'sidecar']);
    await eventually(async () => sidecar.output(), (o) => o.includes('listening'), 5000);
    expect((await curl(podHost('tool-1'), 'http://127.0.0.1:30180/')).hostname).toBe('sidecar');
    expect((await curl(sb.net.node(1).host, 'http://127.0.0.1:30180/')).hostname).toBe('web-a');
    await sidecar.stop();
  });

  it('6. a Service cannot take another\'s ClusterIP with an externalIP; a node IP as externalIP leaves the node\'s other ports alone', async () => {
    const webIP = (await getSvc('web')).spec.clusterIP;
    await put('Service', svc('a-hijack', { selector: { app: 'evil' }, externalIPs: [webIP], ports: [{ name: 'http', port: 80, targetPort: 8080 }] }));
    await put('Service', svc('on-node', { selector: { app: 'web' }, externalIPs: [NODE1], ports: [{ name: 'alt', port: 8080, targetPort: 8080 }] }));
    await new Promise((r) => setTimeout(r, 300));
    for (let i = 0; i < 10; i++) expect((await curl(podHost('tool-2'), `http://${webIP}/`)).hostname).toBe('web-a');
    // The node's own port (the agent's health server) answers from outside and from a pod.
    for (const from of [sb.net.client, podHost('tool-2')]) expect((await curl(from, `http://${NODE1}:10256/healthz`)).code).toBe(0);
    // The conflict is logged, evented and counted.
    const events = (await api.call('GET', '/api/v1/namespaces/default/events')).json.items as Array<{ reason: string; involvedObject: { name: string }; message: string }>;
    expect(events.some((e) => e.reason === 'FerryFrontendConflict' && e.involvedObject.name === 'a-hijack')).toBe(true);
    expect(events.some((e) => e.reason === 'FerryNodeAddress' && e.involvedObject.name === 'on-node')).toBe(true);
    const metrics = await sb.net.node(1).host.execOk(['curl', '-sS', 'http://127.0.0.1:10249/metrics']);
    expect(metrics).toMatch(/ferry_frontend_conflicts\{kind="service"\} [1-9]/);
    expect(metrics).toMatch(/ferry_frontend_conflicts\{kind="node-address"\} [1-9]/);
  });

  it('a Service with more endpoints than the maps hold is reported, and every other Service keeps working', async () => {
    const endpoints = Array.from({ length: 300 }, (_, i) => ({ addresses: [`10.244.${8 + (i >> 8)}.${i & 255}`], conditions: { ready: true }, nodeName: 'node-2' }));
    await put('Service', svc('huge', { ports: [{ name: 'http', port: 80, targetPort: 8080 }] }));
    await put('EndpointSlice', { apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 'huge-1', namespace: 'default', labels: { 'kubernetes.io/service-name': 'huge' } }, addressType: 'IPv4', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints });
    await put('Service', svc('after-huge', { selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 8080 }] }));
    const ip = (await getSvc('after-huge')).spec.clusterIP;
    expect((await eventually(() => curl(podHost('tool-1'), `http://${ip}/`), (x) => x.code === 0)).hostname).toBe('web-a');
    const status = await eventually(() => sb.net.node(1).host.exec([process.execPath, join(REPO_ROOT, 'bin', 'ferry.js'), 'status', '--pin-dir', pins(1)]), (r) => r.stdout.includes('not programmed'), 5000);
    expect(status.stdout).toMatch(/default\/huge +needs 300 more backend ids, \d+ left \(raise mapSizes\.backends\)/);
    const events = (await api.call('GET', '/api/v1/namespaces/default/events')).json.items as Array<{ reason: string; involvedObject: { name: string } }>;
    expect(events.some((e) => e.reason === 'FerryNotProgrammed' && e.involvedObject.name === 'huge')).toBe(true);
    expect(await sb.net.node(1).host.execOk(['curl', '-sS', 'http://127.0.0.1:10249/metrics'])).toMatch(/ferry_services_unprogrammed 1/);
    // The agent did not restart over it.
    expect(sb.agents.get('node-1')!.child.exitCode).toBeNull();
  });

  it('7. a pod\'s IPv6 socket reaches a ClusterIP through its IPv4-mapped address', async () => {
    const webIP = (await getSvc('web')).spec.clusterIP;
    const r = await curl(podHost('tool-2'), `http://[::ffff:${webIP}]/`);
    expect(r.out).toContain('Hostname: web-a');
  });
});
