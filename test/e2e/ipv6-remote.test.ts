// IPv6 from outside to a backend on another node, through the real agents (lib/snat6.h): a
// client behind the router reaches an IPv6 LoadBalancer IP and NodePort on node 1 whose
// only endpoint runs on node 2; node 1 sends the flow there from its own IPv6 address
// (the backend sees the node, as kube-proxy's SNAT shows it) and the answers back to the
// client as the frontend. The agents take the node's IPv6 InternalIP for it as the Node
// gains one (they run before it has one); `ferry explain` and `ferry monitor` tell the same.
import type { V1Service } from '@kubernetes/client-node';
import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { PodInfo } from '../../src/sandbox/network.js';
import type { Sandbox } from '../../src/sandbox/sandbox.js';
import { agentCluster, applyObject, podWith } from '../harness/agent-cluster.js';
import { WHOAMI6, addIPv6, ip6, linkIPv6, nodeLink6 } from '../harness/ipv6-pods.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { eventually } from '../harness/wait.js';

const LB6 = 'fd00:100::5';
const NODE_PORT = 30650;
let c: Sandbox;
let web: PodInfo;

const ferry = (...args: string[]) => spawnSync(process.execPath, [join(REPO_ROOT, 'bin/ferry.js'), ...args], { encoding: 'utf8' });

const remote6: V1Service = {
  metadata: { name: 'remote6', namespace: 'default' },
  spec: {
    type: 'LoadBalancer', loadBalancerClass: 'example.com/other', externalTrafficPolicy: 'Cluster', clusterIP: 'fd00:96::65', clusterIPs: ['fd00:96::65'], ipFamilies: ['IPv6'],
    ports: [{ name: 'http', port: 80, nodePort: NODE_PORT, targetPort: 8080 as never, protocol: 'TCP' }],
  },
  status: { loadBalancer: { ingress: [{ ip: LB6 }] } },
};

beforeAll(async () => {
  c = await agentCluster({ nodes: 2, name: 'v6remote' });
  const nodes = [c.net.node(1), c.net.node(2)];
  await linkIPv6({ router: c.net.router, client: c.net.client, nodes: nodes.map((n) => n.host) });
  for (const n of nodes) await n.host.execOk(['sysctl', '-qw', 'net.ipv6.conf.all.forwarding=1']);
  web = await podWith(c, 'web-2', 2);
  await addIPv6(web);
  web.host.spawn([process.execPath, '-e', WHOAMI6, JSON.stringify([ip6(web), 'web-2-v6'])]);
  // Node 1 reaches node 2's pods through node 2; the router sends the frontend to node 1.
  await nodes[0]!.host.ip('-6', 'route', 'replace', 'fd00:10:244:2::/64', 'via', nodeLink6(2));
  await c.net.router.ip('-6', 'route', 'replace', `${LB6}/128`, 'via', nodeLink6(1));
  // The Nodes list their IPv6 addresses only now, long after the agents started (an
  // address a node gains later, as by router advertisement): the agents follow them.
  for (const [i, n] of nodes.entries()) {
    const obj = c.store.get('nodes', undefined, n.name)!;
    const status = obj.status as { addresses: Array<{ type: string; address: string }> };
    c.store.update('nodes', { ...obj, status: { ...status, addresses: [...status.addresses, { type: 'InternalIP', address: nodeLink6(i + 1) }] } }, { status: true });
  }
  applyObject(c, 'services', remote6);
  const s = { metadata: { name: 'remote6-v6', namespace: 'default', labels: { 'kubernetes.io/service-name': 'remote6' } }, addressType: 'IPv6', endpoints: [{ addresses: [ip6(web)], conditions: { ready: true }, nodeName: web.node.name }], ports: [{ name: 'http', port: 8080, protocol: 'TCP' }] };
  applyObject(c, 'endpointslices', s as never);
});
afterAll(async () => {
  await c?.down();
});

async function ask(url: string): Promise<string> {
  const r = await c.net.client.exec(['curl', '-gsS', '--max-time', '3', url], { timeoutMs: 8000 });
  return r.code === 0 ? r.stdout : `error ${r.code}: ${r.stderr}`;
}

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'IPv6 to a backend on another node', () => {
  it('the LB IP and the NodePort on node 1 reach the pod on node 2, which sees node 1\'s IPv6 address', async () => {
    for (const url of [`http://[${LB6}]/`, `http://[${nodeLink6(1)}]:${NODE_PORT}/`]) {
      const said = await eventually(() => ask(url), (o) => o.includes('Hostname: web-2-v6'));
      expect(said, url).toContain('Hostname: web-2-v6');
      expect(said, url).toContain(`RemoteAddr: ${nodeLink6(1)}`);
    }
    // Many connections, each its own flow and port: none lost.
    const results = await Promise.all(Array.from({ length: 20 }, () => ask(`http://[${LB6}]/`)));
    expect(results.filter((r) => !r.includes('Hostname: web-2-v6'))).toEqual([]);
    const pins = c.pinDir(c.net.node(1));
    expect(JSON.parse(ferry('map', 'dump', 'snat6_address', '--pin-dir', pins, '-o', 'json').stdout)).toEqual([{ id: 0, address: nodeLink6(1) }]);
    expect(ferry('status', '--pin-dir', pins).stdout).toContain(`snat6:     flows to other nodes' IPv6 backends leave from ${nodeLink6(1)}\n`);
    const nat = JSON.parse(ferry('map', 'dump', 'nat6', '--pin-dir', pins, '-o', 'json').stdout) as Array<{ saddr: string; daddr: string; clientAddr: string; frontendAddr: string }>;
    expect(nat.length).toBeGreaterThan(0);
    expect(nat.every((e) => e.saddr === ip6(web) && e.daddr === nodeLink6(1) && e.clientAddr === 'fd00:10::2')).toBe(true);
    const flows = JSON.parse(ferry('ct', 'list', '--pin-dir', pins, '-o', 'json').stdout) as Array<{ flow: string; backend: string; nat: string; flags: string }>;
    const mine = flows.filter((f) => f.flow.includes(`[${LB6}]:80/tcp`));
    expect(mine.length).toBeGreaterThan(0);
    expect(mine.filter((f) => f.backend !== `[${ip6(web)}]:8080` || !/^\[node\]:\d+$/.test(f.nat) || !f.flags.split(',').includes('snat'))).toEqual([]);
  });

  it('ferry explain from outside and ferry monitor tell the SNAT to node 1\'s IPv6 address', async () => {
    const pins = c.pinDir(c.net.node(1));
    const x = JSON.parse(ferry('explain', '[fd00:10::2]:40000', `[${LB6}]:80/tcp`, '--pin-dir', pins, '--netns', c.net.node(1).host.netns, '-o', 'json').stdout) as { verdict: string; backend?: string; lines: string[] };
    expect(x).toMatchObject({ verdict: 'TC_ACT_REDIRECT (sent out by the program)', backend: `[${ip6(web)}]:8080` });
    expect(x.lines).toContain('decision: forwarded to a backend on another node with SNAT to this node\'s IPv6 address');
    expect(x.lines).toContain(`packet out: [${nodeLink6(1)}] → [${ip6(web)}]`);

    const monitor = spawn(process.execPath, [join(REPO_ROOT, 'bin/ferry.js'), 'monitor', '--type', 'trace', '--pin-dir', pins, '-o', 'json', '--count', '2'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    monitor.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const done = new Promise((r) => monitor.on('exit', r));
    await new Promise((r) => setTimeout(r, 500));
    const said = await eventually(() => ask(`http://[${LB6}]/`), (o) => o.includes('Hostname: web-2-v6'));
    expect(said).toContain('Hostname: web-2-v6');
    await Promise.race([done, new Promise((r) => setTimeout(r, 5000))]);
    monitor.kill();
    const events = out.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as { family: number; reasonName: string; daddr: string; outSaddr: string; outDaddr: string });
    expect(events.find((e) => e.reasonName === 'fwd_remote6')).toMatchObject({ family: 6, daddr: LB6, outSaddr: nodeLink6(1), outDaddr: ip6(web) });
    expect(events.find((e) => e.reasonName === 'reply_remote6')).toMatchObject({ family: 6, outSaddr: LB6, outDaddr: 'fd00:10::2' });
  });

  it('UDP datagrams larger than a link\'s MTU, fragmented both ways, reach the pod on the other node and come back whole', async () => {
    // The client's 4000-byte datagram leaves it in three fragments, and so does the pod's
    // echo: node 1 sends the later fragments of each the way it sent the first (frag6).
    web.host.spawn([process.execPath, '-e', `const s = require('dgram').createSocket('udp6'); s.on('message', (m, r) => s.send(m, r.port, r.address)); s.bind(5353, '${ip6(web)}')`]);
    const echoLb = 'fd00:100::7';
    applyObject(c, 'services', { ...remote6, metadata: { name: 'echo6', namespace: 'default' }, spec: { ...remote6.spec, clusterIP: 'fd00:96::67', clusterIPs: ['fd00:96::67'], ports: [{ name: 'echo', port: 53, nodePort: NODE_PORT + 2, protocol: 'UDP' }] }, status: { loadBalancer: { ingress: [{ ip: echoLb }] } } });
    const s = { metadata: { name: 'echo6-v6', namespace: 'default', labels: { 'kubernetes.io/service-name': 'echo6' } }, addressType: 'IPv6', endpoints: [{ addresses: [ip6(web)], conditions: { ready: true }, nodeName: web.node.name }], ports: [{ name: 'echo', port: 5353, protocol: 'UDP' }] };
    applyObject(c, 'endpointslices', s as never);
    await c.net.router.ip('-6', 'route', 'replace', `${echoLb}/128`, 'via', nodeLink6(1));
    const client = `const s = require('dgram').createSocket('udp6'); const m = Buffer.alloc(4000).map((_, i) => i * 13);
      s.on('message', (r) => { console.log(r.equals(m) ? 'echo whole' : 'echo of ' + r.length); process.exit(0); });
      s.send(m, 53, '${echoLb}'); setTimeout(() => { console.log('no echo'); process.exit(0); }, 1500);`;
    const echo = async () => (await c.net.client.exec([process.execPath, '-e', client], { timeoutMs: 5000 })).stdout.trim();
    expect(await eventually(echo, (o) => o === 'echo whole')).toBe('echo whole');
    const stats = JSON.parse(ferry('map', 'dump', 'ferry_stats', '--pin-dir', c.pinDir(c.net.node(1)), '-o', 'json').stdout) as Array<{ key: string; packets: number }>;
    expect(stats.find((x) => x.key === 'STAT_FRAGMENT')?.packets).toBeGreaterThanOrEqual(4); // two later fragments each way
  });

  it('path MTU: a Packet Too Big about a reply reaches the pod on the other node, so a large response arrives over a 1280-byte hop', async () => {
    // The router's link to the client carries 1280 bytes, the client's own 1500 (so its MSS
    // asks for full segments). The router answers the pod's first full segment with a
    // Packet Too Big sent to the LB IP; node 1 hands it on to the pod quoting the pod's own
    // tuple (pod → node 1:port), or the response would never arrive.
    web.host.spawn([process.execPath, '-e', `require('node:http').createServer((q, s) => s.end('x'.repeat(30000))).listen(8083, '${ip6(web)}')`]);
    applyObject(c, 'services', { ...remote6, metadata: { name: 'big6', namespace: 'default' }, spec: { ...remote6.spec, clusterIP: 'fd00:96::66', clusterIPs: ['fd00:96::66'], ports: [{ name: 'http', port: 80, nodePort: NODE_PORT + 1, protocol: 'TCP' }] }, status: { loadBalancer: { ingress: [{ ip: 'fd00:100::6' }] } } });
    const s = { metadata: { name: 'big6-v6', namespace: 'default', labels: { 'kubernetes.io/service-name': 'big6' } }, addressType: 'IPv6', endpoints: [{ addresses: [ip6(web)], conditions: { ready: true }, nodeName: web.node.name }], ports: [{ name: 'http', port: 8083, protocol: 'TCP' }] };
    applyObject(c, 'endpointslices', s as never);
    await c.net.router.ip('-6', 'route', 'replace', 'fd00:100::6/128', 'via', nodeLink6(1));
    await c.net.router.ip('link', 'set', 'clients', 'mtu', '1280');
    const size = async () => {
      const r = await c.net.client.exec(['curl', '-gsS', '--max-time', '5', '-o', '/dev/null', '-w', '%{size_download}', 'http://[fd00:100::6]/'], { timeoutMs: 10_000 });
      return r.code === 0 ? Number(r.stdout) : -r.code;
    };
    expect(await eventually(size, (n) => n === 30000)).toBe(30000);
    const stats = JSON.parse(ferry('map', 'dump', 'ferry_stats', '--pin-dir', c.pinDir(c.net.node(1)), '-o', 'json').stdout) as Array<{ key: string; packets: number }>;
    expect(stats.find((x) => x.key === 'STAT_ICMP_RELATED')?.packets).toBeGreaterThan(0);
  });
});
