// BGP announcements end to end in the sandbox (--announce bgp, the default): the router
// runs FRR and learns each LoadBalancer address from the nodes' FRR, which the agents
// drive. ECMP over every node for ETP=Cluster; ETP=Local only to the nodes with a ready
// endpoint, following the pod; a node's link cut with BFD (100 ms x 3): its path gone from
// the router within 1 s, with a request loop's failures counted; an agent restart
// withdraws nothing; a peer password (TCP MD5) from a Secret brings the sessions up.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { parseAllDocuments } from 'yaml';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { SANDBOX_USER_AGENT } from '../../src/sandbox/api-client.js';
import type { NodeInfo } from '../../src/sandbox/network.js';
import type { Host } from '../../src/sandbox/netns/testbed.js';
import { NODE_NET } from '../../src/sandbox/network.js';
import { OPERATOR_NAMESPACE, ROUTER_ASN, Sandbox } from '../../src/sandbox/sandbox.js';
import { exec } from '../../src/sys/exec.js';
import { kubectlFor } from '../harness/kubectl.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { eventually } from '../harness/wait.js';
import { webEverywhereSoloOnNode1, whoamiPod } from '../harness/objects.js';

const FERRY = join(REPO_ROOT, 'bin', 'ferry.js');
let sb: Sandbox;
const kubectl = kubectlFor(() => sb.kubeconfig);
const node = (name: string): NodeInfo => sb.net.nodes.find((n) => n.name === name)!;

const lbService = (name: string, selector: string, etp: 'Cluster' | 'Local' = 'Cluster') => `
apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: default }
spec: { type: LoadBalancer, externalTrafficPolicy: ${etp}, selector: { app: ${selector} }, ports: [{ port: 80, targetPort: 8080 }] }
`;
const ipOf = (name: string) => kubectl.lbAddresses(name);

/** The router's next hops for `ip` learned by BGP (node addresses), sorted. */
async function nexthops(ip: string): Promise<string[]> {
  const out = (await sb.net.router.exec(['ip', 'route', 'show', ip, 'proto', 'bgp'])).stdout;
  return [...out.matchAll(/via (10\.0\.30\.\d+)/g)].map((m) => m[1]!).sort();
}

function requestLoop(from: Host, url: string) {
  const p = from.spawn(['sh', '-c', `while :; do t=$(date +%s%3N); c=$(curl -s -o /dev/null -w '%{http_code}' --max-time 0.5 ${url}); echo "$t $c"; sleep 0.02; done`]);
  return {
    async stop(): Promise<Array<{ at: number; ok: boolean }>> {
      const stoppedAt = Date.now();
      await p.stop(1000);
      return p.output().trim().split('\n').map((l) => l.split(' ')).filter((x) => x.length === 2).map(([t, c]) => ({ at: Number(t), ok: c === '200' })).filter((x) => x.at < stoppedAt - 600);
    },
  };
}

beforeAll(async () => {
  sb = await Sandbox.up({ name: 'bgpe', nodes: 3, mode: 'snat', log: pino({ level: 'silent' }), agentEnv: { FERRY_MIN_SYNC_PERIOD_MS: '20' } });
  await webEverywhereSoloOnNode1(kubectl, sb.net.nodes);
  await sb.settle();
}, 180_000);
afterAll(async () => {
  await sb?.down();
}, 60_000);

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'BGP announcements', () => {
  it('ETP=Cluster: the router learns the address from every node (ECMP) and reaches it through those routes only', async () => {
    expect((await kubectl.apply(lbService('web', 'web'))).code).toBe(0);
    const ip = await eventually(() => ipOf('web'), (x) => x !== '');
    expect(await eventually(() => nexthops(ip), (h) => h.length === 3, 20_000)).toEqual(['10.0.30.21', '10.0.30.22', '10.0.30.23']);
    // No route but BGP's: nothing static, nothing on-link.
    expect((await sb.net.router.ip('route', 'show', ip)).trim().split('\n')[0]).toMatch(new RegExp(`^${ip.replace(/\./g, '\\.')} proto bgp`));
    const seen = new Set<string>();
    for (let i = 0; i < 30 && seen.size < 3; i++) seen.add(/Hostname: (\S+)/.exec((await sb.net.client.execOk(['curl', '-s', '--max-time', '2', `http://${ip}/`])))?.[1] ?? '');
    expect([...seen].sort()).toEqual(['web-1', 'web-2', 'web-3']);
    // What the CLI shows: the router's BGP table, and a node's session with BFD up.
    const routes = await exec(process.execPath, [FERRY, 'bgp', 'routes', '--pathspace', sb.frr.get('router')!.pathspace]);
    expect(routes.stdout.split('\n').filter((l) => l.startsWith(`${ip}/32`))).toHaveLength(3);
    const peers = await eventually(() => exec(process.execPath, [FERRY, 'bgp', 'peers', '--pathspace', sb.frr.get('node-1')!.pathspace]), (r) => / up \(/.test(r.stdout), 10_000);
    expect(peers.stdout).toMatch(/10\.0\.30\.1\s+64513\s+Established\s+\S+\s+0\s+\d+\s+up \(100\/100 ms × 3\)/);
  });

  it('ETP=Local: only the node with a ready endpoint announces, and the route follows the pod', async () => {
    expect((await kubectl.apply(lbService('solo', 'solo', 'Local'))).code).toBe(0);
    const ip = await eventually(() => ipOf('solo'), (x) => x !== '');
    expect(await eventually(() => nexthops(ip), (h) => h.join() === '10.0.30.21', 20_000)).toEqual(['10.0.30.21']);
    await kubectl(['delete', 'pod', 'solo']);
    const t0 = Date.now();
    expect((await kubectl.apply(whoamiPod('solo-moved', 'solo', 'node-3'))).code).toBe(0);
    await sb.settle();
    expect(await eventually(() => nexthops(ip), (h) => h.join() === '10.0.30.23', 20_000, 20)).toEqual(['10.0.30.23']);
    process.stdout.write(`BGP, ETP=Local: the route followed the pod to node-3 in ${Date.now() - t0} ms (pod created, ready, announced, learned)\n`);
    expect((await eventually(() => sb.net.client.exec(['curl', '-s', '--max-time', '2', `http://${ip}/`]), (r) => r.code === 0)).stdout).toMatch(/Hostname: solo-moved/);
  });

  it('a node\'s link cut: BFD takes its path off the router within 1 s; back, the path returns', async () => {
    const ip = await ipOf('web');
    // Only the path should be at stake: no backend on the node that goes dark (its pod would
    // stay an endpoint until the node controller noticed, tens of seconds later).
    await kubectl(['delete', 'pod', 'web-2']);
    await sb.settle();
    const loop = requestLoop(sb.net.client, `http://${ip}/`);
    await new Promise((r) => setTimeout(r, 1000));
    const cutAt = Date.now();
    await sb.net.setNodeConnected(node('node-2'), false);
    const hops = await eventually(() => nexthops(ip), (h) => !h.includes('10.0.30.22'), 5000, 10);
    const goneMs = Date.now() - cutAt;
    await new Promise((r) => setTimeout(r, 1500));
    const samples = await loop.stop();
    const failed = samples.filter((s) => s.at >= cutAt && !s.ok).length;
    const total = samples.filter((s) => s.at >= cutAt).length;
    process.stdout.write(`BGP, link cut: node-2's path left the router after ${goneMs} ms (BFD 100 ms × 3); ${failed} of ${total} requests failed\n`);
    expect(hops).toEqual(['10.0.30.21', '10.0.30.23']);
    expect(goneMs).toBeLessThan(1000);
    // After the path went, every request succeeds.
    expect(samples.filter((s) => s.at > cutAt + goneMs + 600 && !s.ok)).toEqual([]);
    await sb.net.setNodeConnected(node('node-2'), true);
    expect(await eventually(() => nexthops(ip), (h) => h.length === 3, 20_000)).toHaveLength(3);
  });

  it('an agent restart withdraws nothing (FRR outlives the agent)', async () => {
    const ip = await ipOf('web');
    let lost = false;
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        if (!(await nexthops(ip)).includes('10.0.30.21')) lost = true;
        await new Promise((r) => setTimeout(r, 30));
      }
    })();
    await sb.stopAgent(node('node-1'));
    await new Promise((r) => setTimeout(r, 2000));
    await sb.startAgent(node('node-1'));
    await new Promise((r) => setTimeout(r, 2000));
    watching = false;
    await watcher;
    expect(lost).toBe(false);
    const debug = async () => `${await sb.frr.get('router')!.vtysh.show(`show ip bgp ${ip}/32`)}\n${await sb.frr.get('node-2')!.vtysh.show('show running-config')}`;
    const hops = await nexthops(ip);
    expect(hops, hops.length === 3 ? '' : await debug()).toEqual(['10.0.30.21', '10.0.30.22', '10.0.30.23']);
  });

  it('a restarted agent reads FRR back and applies nothing (what FRR writes back equals what ferry renders)', async () => {
    // FRR writes some things back in its own way (a BFD profile's lines in its order, the
    // sandbox's peer having one; communities in numeric order, well-known ones by name):
    // read back after a start, a difference would be applied again, the sessions' routes
    // re-sent. A fresh agent's apply counter starts at zero.
    const metrics = () => node('node-2').host.execOk(['curl', '-sS', 'http://127.0.0.1:10249/metrics']);
    await sb.stopAgent(node('node-2'));
    await sb.startAgent(node('node-2'));
    // A session state is reported once a pass has run (and applied whatever it found to do).
    const m = await eventually(metrics, (t) => /^ferry_bgp_sessions\{peer="router",state="Established"\} 1$/m.test(t), 20_000);
    expect(m).toMatch(/^ferry_bgp_sessions\{peer="router",state="Established"\} 1$/m);
    expect(m).toMatch(/^ferry_bgp_apply_duration_seconds_count 0$/m);
    expect(m).toMatch(/^ferry_bgp_apply_errors_total 0$/m);
  });

  it('a node taken out of the advertisement withdraws cleanly', async () => {
    const ip = await ipOf('web');
    await kubectl.apply(`apiVersion: ferry.dev/v1alpha1\nkind: BGPAdvertisement\nmetadata: { name: default }\nspec: { nodeSelector: { matchExpressions: [{ key: kubernetes.io/hostname, operator: NotIn, values: [node-3] }] }, serviceSelector: { matchExpressions: [{ key: announce, operator: NotIn, values: [l2] }] } }\n`);
    expect(await eventually(() => nexthops(ip), (h) => h.join() === '10.0.30.21,10.0.30.22', 10_000)).toEqual(['10.0.30.21', '10.0.30.22']);
    const summary = await sb.frr.get('router')!.vtysh.showJson<{ ipv4Unicast?: { peers?: Record<string, { state: string }> } }>('show bgp summary json');
    expect(summary.ipv4Unicast?.peers?.['10.0.30.23']?.state).toBe('Established'); // the session stays
  });

  it('a peer with a password (TCP MD5): no session while only the router has the key, nor while its Secret is missing (an Event on the peer from each node); with the Secret, every node\'s is up', async () => {
    const router = sb.frr.get('router')!.vtysh;
    const established = async () => {
      const summary = await router.showJson<{ ipv4Unicast?: { peers?: Record<string, { state: string }> } }>('show bgp summary json');
      return Object.entries(summary.ipv4Unicast?.peers ?? {}).filter(([, p]) => p.state === 'Established').map(([a]) => a).sort();
    };
    const all = sb.net.nodes.map((n) => n.ip).sort();
    expect(await eventually(established, (e) => e.length === all.length, 15_000)).toEqual(all);
    const ip = await ipOf('web');
    const announcing = await nexthops(ip);
    expect(announcing.length).toBeGreaterThan(0);
    const peer = sb.store.get('bgppeers', undefined, 'router') as { metadata: Record<string, unknown>; spec: Record<string, unknown> };
    const KEY = 'ferry-md5-key';
    try {
      // The router asks every node for the key: their sessions go, and cannot come back.
      await router.apply(`router bgp ${ROUTER_ASN}\n neighbor NODES password ${KEY}\nexit\n`);
      expect(await eventually(established, (e) => e.length === 0, 20_000)).toEqual([]);
      // The BGPPeer names a Secret not there yet: every agent leaves the peer out and says so
      // on it (an Event per node), and the sessions stay down past the nodes' 5 s connect retry.
      await sb.put('BGPPeer', { apiVersion: 'ferry.dev/v1alpha1', kind: 'BGPPeer', metadata: { name: 'router' }, spec: { ...peer.spec, passwordSecretRef: { name: 'router-bgp', key: 'password' } } });
      const warnings = async () => sb.store.list('events').filter((e) => (e.involvedObject as { kind?: string; name?: string }).kind === 'BGPPeer' && e.reason === 'PasswordMissing').map((e) => String(e.message).split(':')[0]).sort();
      expect(await eventually(warnings, (w) => w.length === all.length, 20_000)).toEqual(sb.net.nodes.map((n) => n.name).sort());
      await new Promise((r) => setTimeout(r, 6_000));
      expect(await established()).toEqual([]);
      // The Secret appears: each agent reads it at its next pass (at most 5 s) and gives its FRR the key.
      await sb.put('Secret', { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'router-bgp', namespace: OPERATOR_NAMESPACE }, data: { password: Buffer.from(KEY).toString('base64') } });
      expect(await eventually(established, (e) => e.length === all.length, 30_000)).toEqual(all);
      expect(await sb.frr.get('node-2')!.vtysh.show('show running-config')).toContain(`neighbor ${NODE_NET.router} password ${KEY}`);
      expect(await eventually(() => nexthops(ip), (h) => h.join() === announcing.join(), 15_000)).toEqual(announcing);
    } finally {
      await router.apply(`router bgp ${ROUTER_ASN}\n no neighbor NODES password\nexit\n`);
      await sb.put('BGPPeer', { apiVersion: 'ferry.dev/v1alpha1', kind: 'BGPPeer', metadata: { name: 'router' }, spec: peer.spec });
    }
    expect(await eventually(established, (e) => e.length === all.length, 30_000)).toEqual(all);
  });

  it('every BGP request the agents made is one their RBAC (deploy/kubernetes/base/agent.yaml) allows', () => {
    type Rule = { apiGroups: string[]; resources: string[]; verbs: string[] };
    const docs = parseAllDocuments(readFileSync(join(REPO_ROOT, 'deploy', 'kubernetes', 'base', 'agent.yaml'), 'utf8')).map((d) => d.toJSON() as { kind: string; metadata: { namespace?: string }; rules?: Rule[] });
    const rules = docs.filter((d) => d.kind === 'ClusterRole' || (d.kind === 'Role' && d.metadata.namespace === 'kube-system')).flatMap((d) => d.rules ?? []);
    const bgp = sb.api.access.filter((a) => a.userAgent !== SANDBOX_USER_AGENT && !a.userAgent?.startsWith('kubectl') && ['bgppeers', 'bgpadvertisements', 'secrets'].includes(a.resource));
    expect(bgp.length).toBeGreaterThan(3);
    expect(bgp.some((a) => a.resource === 'secrets' && a.verb === 'get')).toBe(true); // the password test's
    expect(bgp.filter((a) => !rules.some((r) => r.apiGroups.includes(a.group) && r.resources.includes(a.resource) && r.verbs.includes(a.verb)))).toEqual([]);
  });
});
