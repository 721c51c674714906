// loadBalancerSourceRanges at the socket hooks need each namespace's address: the agent's
// scanner enters every namespace it lists and writes cookie → address into
// lb4_netns_sources; the hooks then allow or refuse a pod's connect() by it.
import { networkInterfaces } from 'node:os';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { NetnsSourceScanner, type NetnsSourcesStatus } from '../../src/agent/netns-sources.js';
import { AgentMetrics } from '../../src/agent/metrics.js';
import { counterTotal, resetCounters } from '../../src/datapath/counters.js';
import { NetnsSources } from '../../src/datapath/netns-sources.js';
import { NODE_IP6, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import type { Host } from '../../src/sandbox/netns/testbed.js';
import { WORKLOADS_BIN } from '../../src/sandbox/workloads/spawn.js';
import { exec } from '../../src/sys/exec.js';
import { inNetns } from '../../src/sys/netns.js';
import { netnsCookie } from '../../src/sys/socket.js';
import { describeWith } from '../harness/requirements.js';

const LB_IP = '10.0.100.77';
let n: DatapathNode;
let podA: Host;
let podB: Host;
let bare: Host;

beforeAll(async () => {
  n = await datapathNode();
  // Two pods with one address each (on eth0, and on another name), and a namespace without one yet.
  podA = await n.tb.addHost('pod-a', { cgroupParent: n.host });
  podB = await n.tb.addHost('pod-b', { cgroupParent: n.host });
  bare = await n.tb.addHost('bare', { cgroupParent: n.host });
  await n.tb.link({ host: podA, ifname: 'eth0', address: '10.244.1.10/24' }, { host: n.host, ifname: 'vpa', address: '10.244.1.1/24' });
  await n.tb.link({ host: podB, ifname: 'veth-b', address: '10.244.2.20/24' }, { host: n.host, ifname: 'vpb', address: '10.244.2.1/24' });
  n.dp.attachCgroup({ path: n.host.cgroup, expect: 'subtree' }, { hostNetns: n.host.netns });
});
afterAll(async () => {
  await n?.close();
});

const scanner = (paths: () => string[]) => new NetnsSourceScanner(new NetnsSources(n.dp.maps.lb4_netns_sources), pino({ level: 'silent' }), new AgentMetrics(), paths, new NetnsSources(n.dp.maps.lb6_netns_sources));
const path = (h: Host) => `/run/netns/${h.netns}`;

/** Passes until `done` (or `ms`), as the agent's own passes go on: an interface counts once it runs, which the kernel tells a moment after a veth's ends are up. */
async function passUntil(s: NetnsSourceScanner, done: (st: NetnsSourcesStatus) => boolean, ms = 3000): Promise<NetnsSourcesStatus> {
  const until = Date.now() + ms;
  for (;;) {
    const st = s.pass();
    if (done(st) || Date.now() > until) return st;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** What connect() to the LB IP gets from a pod: EPERM is the hooks' refusal; anything else means it was rewritten and sent. */
async function connectFrom(h: Host, target = `[${LB_IP}]:80/tcp`): Promise<string> {
  const r = await h.exec([process.execPath, WORKLOADS_BIN, 'connect-probe', '--targets', target], { timeoutMs: 30_000 });
  expect(r.code, r.stderr).toBe(0);
  return (JSON.parse(r.stdout.trim()) as { result: string }).result;
}

describeWith(['root', 'netns', 'bpffs', 'cgroup2'], 'namespace source addresses (lb4_netns_sources)', () => {
  it('records each namespace\'s address by its cookie, not one without an address, and forgets a namespace no longer listed', async () => {
    let paths = [path(podA), path(podB), path(bare), '/proc/thread-self/ns/net'];
    const s = scanner(() => paths);
    const st = await passUntil(s, (x) => x.recorded === 2);
    const map = n.dp.maps.lb4_netns_sources;
    // Its own namespace (the host's: the hooks use the node's address there) is left out.
    expect(st).toMatchObject({ namespaces: 3, recorded: 2, unaddressed: 1, full: 0 });
    expect(map.lookup(netnsCookie())).toBeUndefined();
    expect(map.lookup(netnsCookie(podA.netns))?.address).toBe('10.244.1.10');
    expect(map.lookup(netnsCookie(podB.netns))?.address).toBe('10.244.2.20');
    expect(map.lookup(netnsCookie(bare.netns))).toBeUndefined();
    paths = [path(podA)];
    expect(s.pass()).toMatchObject({ recorded: 1 });
    expect(map.lookup(netnsCookie(podB.netns))).toBeUndefined();
    // A restarted agent starts from what the map holds, and a pass makes it what it sees.
    paths = [path(podA), path(podB)];
    expect(scanner(() => paths).pass()).toMatchObject({ recorded: 2 });
  });

  it('a namespace with several addresses: its default route\'s device decides', async () => {
    const multi = await n.tb.addHost('multi', { cgroupParent: n.host });
    await n.tb.link({ host: multi, ifname: 'net0', address: '10.244.4.40/24' }, { host: n.host, ifname: 'vpm0', address: '10.244.4.1/24' });
    await n.tb.link({ host: multi, ifname: 'net1', address: '10.244.5.50/24' }, { host: n.host, ifname: 'vpm1', address: '10.244.5.1/24' });
    const s = scanner(() => [path(multi)]);
    // Both links running (the kernel says so a moment after they are up): before that one alone would count.
    for (let i = 0; i < 60 && Object.keys(inNetns(path(multi), () => networkInterfaces())).filter((d) => d.startsWith('net')).length < 2; i++) await new Promise((r) => setTimeout(r, 50));
    expect(s.pass()).toMatchObject({ namespaces: 1, recorded: 0, unaddressed: 1 }); // no eth0, no default route: which one is not known
    await multi.ip('route', 'add', 'default', 'via', '10.244.5.1', 'dev', 'net1');
    expect(s.pass()).toMatchObject({ recorded: 1 });
    expect(n.dp.maps.lb4_netns_sources.lookup(netnsCookie(multi.netns))?.address).toBe('10.244.5.50');
  });

  it('a listed namespace that cannot be read for a moment keeps its entry; unlisted, it goes', async () => {
    const gone = await n.tb.addHost('gone', { cgroupParent: n.host });
    await n.tb.link({ host: gone, ifname: 'eth0', address: '10.244.3.30/24' }, { host: n.host, ifname: 'vpg', address: '10.244.3.1/24' });
    const cookie = netnsCookie(gone.netns);
    let paths = [path(podA), path(gone)];
    const s = scanner(() => paths);
    expect(await passUntil(s, (st) => st.recorded === 2)).toMatchObject({ recorded: 2 });
    await exec('ip', ['netns', 'del', gone.netns]); // its pin goes; this listing still names it
    expect(s.pass()).toMatchObject({ namespaces: 2, recorded: 2 });
    expect(n.dp.maps.lb4_netns_sources.lookup(cookie)?.address).toBe('10.244.3.30');
    paths = [path(podA)];
    expect(s.pass()).toMatchObject({ namespaces: 1, recorded: 1 });
    expect(n.dp.maps.lb4_netns_sources.lookup(cookie)).toBeUndefined();
  });

  it('the socket hooks allow and refuse a pod by its recorded address, and refuse one not recorded', async () => {
    n.writer.apply([{ address: LB_IP, port: 80, proto: 'TCP', kind: 'LoadBalancer', backends: [{ address: '10.244.9.9', port: 8080, local: false }], sourceRanges: ['10.244.1.0/24'], service: 'default/ranged:http' }]);
    const paths = [path(podA), path(podB)];
    await passUntil(scanner(() => paths), (st) => st.recorded === 2);
    const drops = (name: string) => counterTotal(n.dp.maps, name).packets;
    resetCounters(n.dp.maps);
    // Rewritten: the backend (no route to it from the pod) answers nothing, so anything but EPERM.
    expect(await connectFrom(podA)).not.toBe('EPERM');
    expect(await connectFrom(podB)).toBe('EPERM');
    expect(await connectFrom(bare)).toBe('EPERM');
    expect(drops('DROP_SOURCE_RANGE')).toBe(1n);
    expect(drops('DROP_SOURCE_UNKNOWN')).toBe(1n);
    // An address change is picked up by the next pass.
    await podB.ip('addr', 'add', '10.244.1.99/24', 'dev', 'veth-b');
    await podB.ip('addr', 'del', '10.244.2.20/24', 'dev', 'veth-b');
    scanner(() => paths).pass();
    expect(n.dp.maps.lb4_netns_sources.lookup(netnsCookie(podB.netns))?.address).toBe('10.244.1.99');
    expect(await connectFrom(podB)).not.toBe('EPERM');
  });

  it('IPv6: a namespace\'s IPv6 address is recorded apart (never a link-local one), and an IPv6 LB IP\'s ranges allow or refuse pods and the host by it', async () => {
    const LB6 = 'fd00:100::77';
    await podA.ip('-6', 'addr', 'add', 'fd00:244:1::10/64', 'dev', 'eth0', 'nodad');
    await podB.ip('-6', 'addr', 'add', 'fd00:244:2::20/64', 'dev', 'veth-b', 'nodad');
    const paths = [path(podA), path(podB), path(bare)];
    const st = await passUntil(scanner(() => paths), (x) => x.recorded6 === 2);
    expect(st).toMatchObject({ recorded6: 2 });
    expect(n.dp.maps.lb6_netns_sources.lookup(netnsCookie(podA.netns))?.address).toBe('fd00:244:1::10');
    expect(n.dp.maps.lb6_netns_sources.lookup(netnsCookie(bare.netns))).toBeUndefined(); // its lo's ::1 and link-locals do not count
    const remote = [{ address: 'fd00:244:9::9', port: 8080, local: false }];
    expect(n.writer.apply([
      { address: LB6, port: 80, proto: 'TCP', kind: 'LoadBalancer', backends: remote, sourceRanges: ['fd00:244:1::/64'], service: 'default/ranged6:http' },
      // The node's own IPv6 address (the host's source) in a range of another port.
      { address: LB6, port: 81, proto: 'TCP', kind: 'LoadBalancer', backends: remote, sourceRanges: [`${NODE_IP6}/128`], service: 'default/ranged6:host' },
    ]).failures).toEqual([]);
    resetCounters(n.dp.maps);
    expect(await connectFrom(podA, `[${LB6}]:80/tcp`)).not.toBe('EPERM');
    expect(await connectFrom(podB, `[${LB6}]:80/tcp`)).toBe('EPERM');
    expect(await connectFrom(bare, `[${LB6}]:80/tcp`)).toBe('EPERM');
    expect(await connectFrom(n.host, `[${LB6}]:80/tcp`)).toBe('EPERM');
    expect(await connectFrom(n.host, `[${LB6}]:81/tcp`)).not.toBe('EPERM');
    expect(await connectFrom(podA, `[${LB6}]:81/tcp`)).toBe('EPERM');
    expect(counterTotal(n.dp.maps, 'DROP_SOURCE_RANGE').packets).toBe(3n);
    expect(counterTotal(n.dp.maps, 'DROP_SOURCE_UNKNOWN').packets).toBe(1n);
  });
});
