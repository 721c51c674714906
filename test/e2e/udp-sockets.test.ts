// Connected UDP sockets balanced at connect() by the socket hooks keep their backend's
// address; when the backend leaves the Service the terminator destroys them (the
// application's pending receive fails; IPv4 sockets, dual-stack IPv6 ones and IPv6 ones
// to an IPv6 ClusterIP alike), and
// leaves alone sockets whose backend is still the Service's (or terminating but serving)
// and sockets that connected to a pod address themselves.
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Datapath, defaultObjectsDir } from '../../src/datapath/loader.js';
import { SocketTerminator, parseTerminated } from '../../src/datapath/socket-terminator.js';
import { ServiceWriter } from '../../src/datapath/writer.js';
import type { FrontendSpec } from '../../src/model/frontend.js';
import { Testbed, type Host, type Proc } from '../../src/sandbox/netns/testbed.js';
import { listNetns } from '../../src/sys/netns-list.js';
import { netnsCookie } from '../../src/sys/socket.js';
import { describeWith } from '../harness/requirements.js';
import { eventually } from '../harness/wait.js';

const NODE_IP = '10.0.40.21';

let tb: Testbed;
let host: Host;
let pod: Host;
let dp: Datapath;
let writer: ServiceWriter;
let term: SocketTerminator;
let pinDir: string;
const procs: Proc[] = [];

beforeAll(async () => {
  tb = await Testbed.create();
  host = await tb.addHost('node');
  pod = await tb.addHost('pod', { cgroupParent: host });
  const gw = await tb.addHost('gw');
  await tb.link({ host: pod, ifname: 'eth0', address: '10.0.41.2/24' }, { host: gw, ifname: 'eth0', address: '10.0.41.1/24' });
  // A UDP connect() needs a route to its (translated) destination; nothing is sent.
  await tb.route(pod, '10.244.0.0/16', '10.0.41.1');
  await tb.route(pod, '10.96.0.0/16', '10.0.41.1');
  await pod.ip('-6', 'addr', 'add', 'fd00:41::2/64', 'dev', 'eth0', 'nodad');
  await gw.ip('-6', 'addr', 'add', 'fd00:41::1/64', 'dev', 'eth0', 'nodad');
  await pod.ip('-6', 'route', 'add', 'fd00:244::/32', 'via', 'fd00:41::1');
  pinDir = join('/sys/fs/bpf', `${tb.prefix}-term`);
  mkdirSync(pinDir);
  dp = Datapath.load({ objectsDir: defaultObjectsDir(), pinDir, snatIPv4: NODE_IP, hostNetnsCookie: netnsCookie(host.netns) });
  dp.attachCgroup({ path: host.cgroup, expect: 'subtree' });
  writer = new ServiceWriter(dp.maps);
  term = SocketTerminator.load(dp.config, dp.sizes);
});
afterAll(async () => {
  for (const p of procs) p.child.kill();
  term?.close();
  dp?.close();
  rmSync(pinDir, { recursive: true, force: true });
  await tb?.destroy();
});

const udp = (address: string, backends: string[]): FrontendSpec => ({
  address, port: 53, proto: 'UDP', kind: 'ClusterIP', service: `default/${address}:dns`,
  backends: backends.map((b) => ({ address: b, port: 5353, local: false })),
});

/** A client in the pod with a connected UDP socket, waiting for datagrams; it prints its
 * peer as getpeername() reports it, and the error its socket gets. */
async function connectedClient(address: string, port: number): Promise<Proc> {
  const script = `const s = require('dgram').createSocket('${address.includes(':') ? 'udp6' : 'udp4'}');
s.on('error', (e) => { console.log('error ' + e.code); process.exit(0); });
s.on('message', () => {});
s.connect(${port}, '${address}', () => { const r = s.remoteAddress(); console.log('connected ' + r.address + ':' + r.port); });
setInterval(() => {}, 1000);`;
  const p = pod.spawn([process.execPath, '-e', script]);
  procs.push(p);
  const out = await eventually(async () => p.output(), (o) => o.includes('connected'), 10_000, 25);
  expect(out, `client of ${address}:${port}`).toContain('connected');
  return p;
}

describeWith(['root', 'netns', 'bpffs', 'cgroup2'], 'UDP socket termination', () => {
  it('parses the iterator output and nothing else', () => {
    expect(parseTerminated('12 10.244.1.10 5353 0\ngarbage\n7 10.0.0.1 53 -2\n9 fd00:0244:0001:0000:0000:0000:0000:0010 5353 0\n', 'ns')).toEqual([
      { netns: 'ns', cookie: 12n, backend: '10.244.1.10', port: 5353, rc: 0 },
      { netns: 'ns', cookie: 7n, backend: '10.0.0.1', port: 53, rc: -2 },
      { netns: 'ns', cookie: 9n, backend: 'fd00:244:1::10', port: 5353, rc: 0 },
    ]);
  });

  it('IPv6 ClusterIPs: destroys sockets whose backend left, keeps those of a draining one and of the backend itself', async () => {
    writer.apply([]);
    writer.apply([udp('fd00:96::10', ['fd00:244:1::10']), udp('fd00:96::11', ['fd00:244:1::20'])]);
    const moved = await connectedClient('fd00:96::10', 53);
    const kept = await connectedClient('fd00:96::11', 53);
    const direct = await connectedClient('fd00:244:1::10', 5353);
    expect(moved.output()).toContain('connected fd00:96::10:53');
    expect(term.terminate(listNetns()).terminated).toEqual([]);
    // The IPv6 frontend's backend goes; the other's terminates but serves.
    const stats = writer.apply([udp('fd00:96::10', ['fd00:244:1::11']), { ...udp('fd00:96::11', ['fd00:244:1::21']), drainingBackends: [{ address: 'fd00:244:1::20', port: 5353, local: false }] }]);
    expect(stats.ipv6UdpSlotsReplaced).toBeGreaterThan(0); // what has the agent sweep at once
    expect(term.terminate(listNetns()).terminated.map((t) => ({ backend: t.backend, port: t.port, rc: t.rc }))).toEqual([{ backend: 'fd00:244:1::10', port: 5353, rc: 0 }]);
    expect(await eventually(async () => moved.output(), (o) => o.includes('error'), 5000, 25)).toMatch(/error ECONNABORTED/);
    // The draining backend gone too: its socket follows.
    writer.apply([udp('fd00:96::10', ['fd00:244:1::11'])]);
    expect(term.terminate(listNetns()).terminated.map((t) => t.backend)).toEqual(['fd00:244:1::20']);
    expect(await eventually(async () => kept.output(), (o) => o.includes('error'), 5000, 25)).toMatch(/error ECONNABORTED/);
    expect(direct.output()).not.toContain('error');
    writer.apply([]);
  });

  it('destroys sockets whose backend left their Service, and only those', async () => {
    writer.apply([udp('10.96.0.10', ['10.244.1.10']), udp('10.96.0.11', ['10.244.1.20'])]);
    const moved = await connectedClient('10.96.0.10', 53);
    const kept = await connectedClient('10.96.0.11', 53);
    const direct = await connectedClient('10.244.1.10', 5353); // the same backend, not through a Service
    const mapped = await connectedClient('::ffff:10.96.0.10', 53); // a dual-stack socket (Java, .NET)
    // getpeername() says the Service: the hooks balanced these two.
    expect(moved.output()).toContain('connected 10.96.0.10:53');
    expect(mapped.output()).toContain('connected ::ffff:10.96.0.10:53');
    expect(direct.output()).toContain('connected 10.244.1.10:5353');

    // Nothing has changed yet: a pass destroys nothing.
    expect(term.terminate(listNetns()).terminated).toEqual([]);

    writer.apply([udp('10.96.0.10', ['10.244.1.11']), udp('10.96.0.11', ['10.244.1.20'])]);
    const pass = term.terminate(listNetns());
    expect(pass.terminated.map((t) => ({ backend: t.backend, port: t.port, rc: t.rc }))).toEqual([{ backend: '10.244.1.10', port: 5353, rc: 0 }, { backend: '10.244.1.10', port: 5353, rc: 0 }]);
    expect(pass.terminated[0]!.netns).not.toBe('/proc/thread-self/ns/net');
    expect(await eventually(async () => moved.output(), (o) => o.includes('error'), 5000, 25)).toMatch(/error ECONNABORTED/);
    expect(await eventually(async () => mapped.output(), (o) => o.includes('error'), 5000, 25)).toMatch(/error ECONNABORTED/);

    // A new client reaches the new backend; the others still hold their sockets.
    const again = await connectedClient('10.96.0.10', 53);
    expect(again.output()).toContain('connected 10.96.0.10:53');
    expect(term.terminate(listNetns()).terminated).toEqual([]);
    expect(kept.output()).not.toContain('error');
    expect(direct.output()).not.toContain('error');

    // A backend that terminates but still serves keeps its sockets until it is gone.
    writer.apply([udp('10.96.0.10', ['10.244.1.11']), { ...udp('10.96.0.11', ['10.244.1.21']), drainingBackends: [{ address: '10.244.1.20', port: 5353, local: false }] }]);
    expect(term.terminate(listNetns()).terminated).toEqual([]);
    expect(kept.output()).not.toContain('error');

    // A Service removed: its clients' sockets go too.
    writer.apply([udp('10.96.0.10', ['10.244.1.11'])]);
    expect(term.terminate(listNetns()).terminated.map((t) => t.backend)).toEqual(['10.244.1.20']);
    expect(await eventually(async () => kept.output(), (o) => o.includes('error'), 5000, 25)).toMatch(/error ECONNABORTED/);
    expect(again.output()).not.toContain('error');
    expect(direct.output()).not.toContain('error');
  });
});
