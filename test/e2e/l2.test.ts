// L2 announcements end to end in a sandbox whose node network is one broadcast domain and
// whose pool sits in the node subnet (--announce l2): the router reaches LoadBalancer
// addresses by ARP alone, exactly one node answers for each, a shared address has one
// owner, ETP=Local follows its pod, and the address fails over when its owner's agent is
// killed or its link is cut, with a request loop running (takeover time and failed
// requests printed), and does not move back.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { parseAllDocuments } from 'yaml';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { SANDBOX_USER_AGENT } from '../../src/sandbox/api-client.js';
import { ANNOTATION_DEVICES, heartbeatName } from '../../src/announce/heartbeats.js';
import { Sandbox } from '../../src/sandbox/sandbox.js';
import type { NodeInfo } from '../../src/sandbox/network.js';
import type { Host } from '../../src/sandbox/netns/testbed.js';
import { exec } from '../../src/sys/exec.js';
import { kubectlFor } from '../harness/kubectl.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { eventually } from '../harness/wait.js';
import { webEverywhereSoloOnNode1, whoamiPod } from '../harness/objects.js';

const FERRY = join(REPO_ROOT, 'bin', 'ferry.js');
let sb: Sandbox;
const kubectl = kubectlFor(() => sb.kubeconfig);
const macs = new Map<string, string>(); // node → eth0 MAC

const lbService = (name: string, o: { selector: string; etp?: 'Local' | 'Cluster'; annotations?: Record<string, string>; ports?: string }) => `
apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: default, annotations: ${JSON.stringify(o.annotations ?? {})} }
spec:
  type: LoadBalancer
  externalTrafficPolicy: ${o.etp ?? 'Cluster'}
  selector: { app: ${o.selector} }
  ports: ${o.ports ?? '[{ port: 80, targetPort: 8080 }]'}
`;
const ipOf = (name: string) => kubectl.lbAddresses(name);

/** The MACs that answer an ARP request for `ip` from the router, over three requests. */
async function answering(ip: string): Promise<string[]> {
  const r = await sb.net.router.exec(['arping', '-c', '3', '-w', '4', '-I', 'nodes', ip], { timeoutMs: 10_000 });
  return [...new Set([...r.stdout.matchAll(/reply from \S+ \[([0-9A-F:]+)\]/gi)].map((m) => m[1]!.toLowerCase()))].sort();
}
const nodeWithMac = (mac: string | undefined) => [...macs].find(([, m]) => m === mac)?.[0];
/** The one node answering for `ip` (fails if none or several answer). */
async function owner(ip: string): Promise<string> {
  const a = await answering(ip);
  expect(a, `MACs answering for ${ip}`).toHaveLength(1);
  return nodeWithMac(a[0])!;
}
const routerNeighbour = async (ip: string) => /lladdr (\S+)/.exec((await sb.net.router.exec(['ip', 'neigh', 'show', ip])).stdout)?.[1];
const nodeInfo = (name: string): NodeInfo => sb.net.nodes.find((n) => n.name === name)!;

/** A request loop from the client: one request every 50 ms, each with a 500 ms timeout. */
function requestLoop(from: Host, url: string) {
  const p = from.spawn(['sh', '-c', `while :; do t=$(date +%s%3N); c=$(curl -s -o /dev/null -w '%{http_code}' --max-time 0.5 ${url}); echo "$t $c"; sleep 0.05; done`]);
  return {
    async stop(): Promise<Array<{ at: number; ok: boolean }>> {
      const stoppedAt = Date.now();
      await p.stop(1000);
      // The request cut short by the stop is not a failure of the datapath.
      return p.output().trim().split('\n').map((l) => l.split(' ')).filter((x) => x.length === 2).map(([t, c]) => ({ at: Number(t), ok: c === '200' })).filter((x) => x.at < stoppedAt - 600);
    },
  };
}

/** After `from`: failed requests, and the gap from `from` to the first success after the last failure. */
function outage(samples: Array<{ at: number; ok: boolean }>, from: number): { failed: number; recoveredAfterMs: number } {
  const after = samples.filter((s) => s.at >= from);
  const lastFail = after.filter((s) => !s.ok).at(-1);
  const back = lastFail ? after.find((s) => s.ok && s.at > lastFail.at) : after.find((s) => s.ok);
  // Not back by the end of the samples: an outage without end, as far as this loop saw.
  return { failed: after.filter((s) => !s.ok).length, recoveredAfterMs: !lastFail ? 0 : back ? back.at - from : Infinity };
}

beforeAll(async () => {
  sb = await Sandbox.up({ name: 'l2e', nodes: 3, mode: 'snat', announce: 'l2', log: pino({ level: 'silent' }), agentEnv: { FERRY_MIN_SYNC_PERIOD_MS: '20' } });
  for (const n of sb.net.nodes) macs.set(n.name, /link\/ether (\S+)/.exec(await n.host.ip('link', 'show', 'eth0'))![1]!);
  await webEverywhereSoloOnNode1(kubectl, sb.net.nodes);
  await sb.settle();
}, 180_000);
afterAll(async () => {
  await sb?.down();
}, 60_000);

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'L2 announcements', () => {
  it('the router reaches the address by ARP alone, and exactly one node answers for it', async () => {
    expect((await kubectl.apply(lbService('web', { selector: 'web' }))).code).toBe(0);
    const ip = await eventually(() => ipOf('web'), (x) => x !== '');
    expect(ip).toMatch(/^10\.0\.30\.2\d\d$/);
    expect((await sb.net.router.ip('route', 'show'))).not.toContain(ip); // no route of its own
    expect(await sb.net.router.ip('route', 'get', ip)).toMatch(new RegExp(`^${ip.replace(/\./g, '\\.')} dev nodes src 10\\.0\\.30\\.1`));
    const r = await eventually(() => sb.net.client.exec(['curl', '-sS', '--max-time', '2', `http://${ip}/`]), (x) => x.code === 0);
    expect(r.stdout).toMatch(/Hostname: web-\d/);
    const who = await eventually(() => answering(ip), (a) => a.length === 1);
    expect(who).toHaveLength(1);
    const node = nodeWithMac(who[0])!;
    const list = await exec(process.execPath, [FERRY, 'lb', 'list', '--kubeconfig', sb.kubeconfig]);
    expect(list.stdout).toMatch(new RegExp(`${ip.replace(/\./g, '\\.')}\\s+default\\s+default/web\\s+80/TCP\\s+Cluster\\s+${node} \\(l2\\)`));
    expect((await kubectl(['get', 'events'])).out).toMatch(new RegExp(`L2Announced\\s+service/web\\s+${ip.replace(/\./g, '\\.')} is now answered by ${node}`));
  });

  it('a shared address (TCP/53 and UDP/53) has one owner', async () => {
    const shared = { 'ferry.dev/sharing-key': 'dns' };
    expect((await kubectl.apply([lbService('dns-tcp', { selector: 'web', annotations: shared, ports: '[{ port: 53, protocol: TCP, targetPort: 8080 }]' }), lbService('dns-udp', { selector: 'web', annotations: shared, ports: '[{ port: 53, protocol: UDP, targetPort: 8080 }]' })].join('---\n'))).code).toBe(0);
    const ip = await eventually(() => ipOf('dns-tcp'), (x) => x !== '');
    expect(await eventually(() => ipOf('dns-udp'), (x) => x !== '')).toBe(ip);
    expect(await eventually(() => answering(ip), (a) => a.length === 1)).toHaveLength(1);
    const events = (await kubectl(['get', 'events'])).out;
    expect(events).toMatch(/L2Announced\s+service\/dns-tcp/);
    expect(events).toMatch(/L2Announced\s+service\/dns-udp/);
  });

  it('externalTrafficPolicy Local: the node with the pod answers, and the address follows the pod', async () => {
    expect((await kubectl.apply(lbService('solo', { selector: 'solo', etp: 'Local' }))).code).toBe(0);
    const ip = await eventually(() => ipOf('solo'), (x) => x !== '');
    expect(nodeWithMac((await eventually(() => answering(ip), (a) => a.length === 1 && nodeWithMac(a[0]) === 'node-1'))[0])).toBe('node-1');
    expect((await sb.net.client.exec(['curl', '-sS', '--max-time', '2', `http://${ip}/`])).stdout).toMatch(/Hostname: solo/);
    // The pod moves to node-3.
    await kubectl(['delete', 'pod', 'solo']);
    expect((await kubectl.apply(whoamiPod('solo-moved', 'solo', 'node-3'))).code).toBe(0);
    await sb.settle();
    const after = await eventually(() => answering(ip), (a) => a.length === 1 && nodeWithMac(a[0]) === 'node-3', 20_000);
    expect(nodeWithMac(after[0])).toBe('node-3');
    expect((await eventually(() => sb.net.client.exec(['curl', '-sS', '--max-time', '2', `http://${ip}/`]), (x) => x.code === 0)).stdout).toMatch(/Hostname: solo-moved/);
    expect((await kubectl(['get', 'events'])).out).toMatch(new RegExp(`L2AnnouncementMoved\\s+service/solo\\s+${ip.replace(/\./g, '\\.')} moved from node-1 to node-3: node-1 can no longer answer for it \\(no ready endpoint there\\)`));
  });

  it('the owner\'s agent is killed: another node answers within 3 s; the agent back, nothing moves', async () => {
    const ip = await ipOf('web');
    const was = await owner(ip);
    const loop = requestLoop(sb.net.client, `http://${ip}/`);
    await new Promise((r) => setTimeout(r, 1000));
    const killedAt = Date.now();
    process.kill(sb.agents.get(was)!.pid, 'SIGKILL');
    const mac = await eventually(() => routerNeighbour(ip), (m) => m !== undefined && m !== macs.get(was), 10_000, 50);
    const takeoverMs = Date.now() - killedAt;
    await new Promise((r) => setTimeout(r, 1500));
    const o = outage(await loop.stop(), killedAt);
    process.stdout.write(`L2 failover, agent killed: the router's neighbour entry moved after ${takeoverMs} ms; ${o.failed} failed requests\n`);
    expect(takeoverMs).toBeLessThan(3000);
    const heir = nodeWithMac(mac)!;
    expect(heir).not.toBe(was);
    expect(await owner(ip)).toBe(heir);
    // The killed agent comes back: the address stays where it is.
    await sb.startAgent(nodeInfo(was));
    await new Promise((r) => setTimeout(r, 3000));
    expect(await owner(ip)).toBe(heir);
  });

  it('a clean restart of the owner\'s agent moves nothing', async () => {
    const ip = await ipOf('web');
    const was = await owner(ip);
    const moves = ((await kubectl(['get', 'events'])).out.match(/L2AnnouncementMoved\s+service\/web\s/g) ?? []).length;
    await sb.stopAgent(nodeInfo(was));
    await new Promise((r) => setTimeout(r, 2500)); // longer than a lease duration
    await sb.startAgent(nodeInfo(was));
    await new Promise((r) => setTimeout(r, 2000));
    expect(await owner(ip)).toBe(was);
    expect(((await kubectl(['get', 'events'])).out.match(/L2AnnouncementMoved\s+service\/web\s/g) ?? []).length).toBe(moves);
  });

  it('the owner\'s link is cut: another node answers within 3 s; back on the network, it takes nothing back', async () => {
    const ip = await ipOf('web');
    const was = await owner(ip);
    // Only the address should be at stake: no backend on the node that goes dark (its pod
    // would stay an endpoint until the node controller noticed, tens of seconds later).
    await kubectl(['delete', 'pod', `web-${was.slice(-1)}`]);
    await sb.settle();
    await eventually(async () => {
      const r = await Promise.all(Array.from({ length: 6 }, () => sb.net.client.exec(['curl', '-s', '-o', '/dev/null', '--max-time', '1', `http://${ip}/`])));
      return r.every((x) => x.code === 0);
    }, (ok) => ok);
    const loop = requestLoop(sb.net.client, `http://${ip}/`);
    await new Promise((r) => setTimeout(r, 1000));
    const cutAt = Date.now();
    await sb.net.setNodeConnected(nodeInfo(was), false);
    const mac = await eventually(() => routerNeighbour(ip), (m) => m !== undefined && m !== macs.get(was), 10_000, 50);
    const takeoverMs = Date.now() - cutAt;
    await new Promise((r) => setTimeout(r, 3000));
    const o = outage(await loop.stop(), cutAt);
    process.stdout.write(`L2 failover, link cut: the router's neighbour entry moved after ${takeoverMs} ms; requests failed for ${o.recoveredAfterMs} ms (${o.failed} failed)\n`);
    expect(takeoverMs).toBeLessThan(3000);
    // The last request lost may have waited out its 0.5 s timeout just after the takeover.
    expect(o.recoveredAfterMs).toBeLessThan(3500);
    const heir = nodeWithMac(mac)!;
    await sb.net.setNodeConnected(nodeInfo(was), true);
    await new Promise((r) => setTimeout(r, 4000));
    expect(await owner(ip)).toBe(heir);
    expect((await eventually(() => sb.net.client.exec(['curl', '-sS', '--max-time', '2', `http://${ip}/`]), (x) => x.code === 0)).code).toBe(0);
  });

  it('a device hotplugged on a node is one ARP is answered on: its heartbeat carries it, and drops it when it goes; given an address, it lends it to SNAT flows routed out of it', async () => {
    const node = nodeInfo('node-3');
    const devices = () => (sb.store.get('leases', 'kube-system', heartbeatName('node-3')) as { metadata?: { annotations?: Record<string, string> } } | undefined)?.metadata?.annotations?.[ANNOTATION_DEVICES];
    const snatDevices = async () => JSON.stringify((JSON.parse(await node.host.execOk(['curl', '-sS', 'http://127.0.0.1:10249/status'])) as { snatDevices: unknown }).snatDevices);
    await sb.stopAgent(node);
    await sb.startAgent(node, 60_000, { devices: 'eth0|hot[0-9]+', env: { FERRY_DEVICE_SCAN_SECONDS: '1' } });
    expect(await eventually(async () => devices(), (d) => d === 'eth0', 10_000)).toBe('eth0');
    await node.host.ip('link', 'add', 'hot0', 'type', 'veth', 'peer', 'name', 'cold0');
    try {
      await node.host.ip('link', 'set', 'hot0', 'up');
      expect(await eventually(async () => devices(), (d) => d === 'eth0,hot0', 10_000), sb.agents.get('node-3')?.output().slice(-3000)).toBe('eth0,hot0');
      expect(await snatDevices(), 'no address: it lends none').toBe('[]');
      await node.host.ip('addr', 'add', '10.99.0.1/24', 'dev', 'hot0');
      expect(await eventually(snatDevices, (s) => s.includes('10.99.0.1'), 10_000)).toMatch(/^\[\{"name":"hot0","ifindex":\d+,"address":"10\.99\.0\.1"\}\]$/);
    } finally {
      await node.host.exec(['ip', 'link', 'del', 'hot0']);
    }
    expect(await eventually(async () => devices(), (d) => d === 'eth0', 10_000)).toBe('eth0');
    expect(await eventually(snatDevices, (s) => s === '[]', 10_000), 'gone with it').toBe('[]');
  });

  it('every L2 request the agents made is one their RBAC (deploy/kubernetes/base/agent.yaml) allows', () => {
    type Rule = { apiGroups: string[]; resources: string[]; verbs: string[] };
    const docs = parseAllDocuments(readFileSync(join(REPO_ROOT, 'deploy', 'kubernetes', 'base', 'agent.yaml'), 'utf8')).map((d) => d.toJSON() as { kind: string; metadata: { namespace?: string }; rules?: Rule[] });
    const rules = docs.filter((d) => d.kind === 'ClusterRole' || (d.kind === 'Role' && d.metadata.namespace === 'kube-system')).flatMap((d) => d.rules ?? []);
    // The agents' L2 requests: the policies, and the heartbeat Leases (the operator's Lease is its own business).
    const ours = (a: { userAgent?: string }) => a.userAgent !== SANDBOX_USER_AGENT && !a.userAgent?.startsWith('kubectl');
    const l2 = sb.api.access.filter((a) => ours(a) && (a.resource === 'l2announcementpolicies' || (a.resource === 'leases' && a.name !== 'ferry-operator')));
    expect(l2.length).toBeGreaterThan(10);
    const denied = l2.filter((a) => !rules.some((r) => r.apiGroups.includes(a.group) && r.resources.includes(a.resource) && r.verbs.includes(a.verb)));
    expect(denied, JSON.stringify(denied)).toEqual([]);
    expect(new Set(l2.map((a) => `${a.verb} ${a.resource}`))).toEqual(new Set(['list l2announcementpolicies', 'watch l2announcementpolicies', 'list leases', 'watch leases', 'get leases', 'create leases', 'update leases']));
  });

  it('every request an agent made is one its RBAC allows, and the RBAC grants nothing it does not use (bar a BGP password Secret)', () => {
    type Rule = { apiGroups: string[]; resources: string[]; verbs: string[] };
    const docs = parseAllDocuments(readFileSync(join(REPO_ROOT, 'deploy', 'kubernetes', 'base', 'agent.yaml'), 'utf8')).map((d) => d.toJSON() as { kind: string; metadata: { namespace?: string }; rules?: Rule[] });
    const rules = docs.filter((d) => d.kind === 'ClusterRole' || (d.kind === 'Role' && d.metadata.namespace === 'kube-system')).flatMap((d) => d.rules ?? []);
    const agent = sb.api.access.filter((a) => a.userAgent === 'ferry-agent');
    expect(agent.length).toBeGreaterThan(50);
    const denied = agent.filter((a) => !rules.some((r) => r.apiGroups.includes(a.group) && r.resources.includes(a.resource) && r.verbs.includes(a.verb)));
    expect(denied, JSON.stringify(denied.slice(0, 5))).toEqual([]);
    const used = new Set(agent.map((a) => `${a.group}/${a.resource} ${a.verb}`));
    const granted = rules.flatMap((r) => r.apiGroups.flatMap((g) => r.resources.flatMap((res) => r.verbs.map((v) => `${g}/${res} ${v}`))));
    // A BGPPeer's password Secret is read only when one names it (bgp.test.ts has none).
    expect(granted.filter((g) => !used.has(g) && g !== '/secrets get')).toEqual([]);
  });
});
