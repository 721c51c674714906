// LB-IPAM end to end, the way an operator drives it: kubectl against the sandbox, whose
// `ferry operator` (two replicas, leader-elected) gives the addresses. Pools and their
// validation, requests, TCP/53 + UDP/53 sharing one address (served by the datapath),
// exhaustion and recovery, failover (kill -9 the leader), and migration from MetalLB and
// Cilium without an address changing.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { parseAllDocuments } from 'yaml';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { SandboxApi } from '../../src/sandbox/api-client.js';
import { Sandbox } from '../../src/sandbox/sandbox.js';
import { exec } from '../../src/sys/exec.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { udpEcho } from '../harness/traffic.js';
import { kubectlFor } from '../harness/kubectl.js';
import { eventually } from '../harness/wait.js';

const FERRY = join(REPO_ROOT, 'bin', 'ferry.js');
let sb: Sandbox;
let api: SandboxApi;

const kubectl = kubectlFor(() => sb.kubeconfig);
const apply = kubectl.apply;
type Svc = { metadata: { name: string; namespace: string }; status?: { loadBalancer?: { ingress?: Array<{ ip: string; ipMode?: string }> }; conditions?: Array<{ type: string; status: string; reason: string; message: string }> } };
const getSvc = async (name: string, ns = 'default'): Promise<Svc> => JSON.parse((await kubectl(['get', 'svc', '-n', ns, name, '-o', 'json'])).out || '{}') as Svc;
const ipOf = async (name: string, ns = 'default') => ((await getSvc(name, ns)).status?.loadBalancer?.ingress ?? []).map((i) => i.ip).join(',');
const conditionOf = async (name: string, ns = 'default') => (await getSvc(name, ns)).status?.conditions?.find((c) => c.type === 'ferry.dev/IPAllocated');
const lbService = (name: string, o: { annotations?: Record<string, string>; labels?: Record<string, string>; ports?: string; extra?: string; ns?: string } = {}) => `
apiVersion: v1
kind: Service
metadata:
  name: ${name}
  namespace: ${o.ns ?? 'default'}
  labels: ${JSON.stringify(o.labels ?? {})}
  annotations: ${JSON.stringify(o.annotations ?? {})}
spec:
  type: LoadBalancer
  selector: { app: ${name} }
  ports: ${o.ports ?? '[{ port: 80, protocol: TCP }]'}
${o.extra ?? ''}
`;
const allIPs = async () => Object.fromEntries((JSON.parse((await kubectl(['get', 'svc', '-A', '-o', 'json'])).out) as { items: Svc[] }).items.map((s) => [`${s.metadata.namespace}/${s.metadata.name}`, (s.status?.loadBalancer?.ingress ?? []).map((i) => i.ip).join(',')]));

beforeAll(async () => {
  sb = await Sandbox.up({ name: 'lbipam', nodes: 2, mode: 'snat', log: pino({ level: 'silent' }), agentEnv: { FERRY_MIN_SYNC_PERIOD_MS: '20' } });
  api = new SandboxApi(sb.api.alsoUrl!);
}, 180_000);
afterAll(async () => {
  await sb?.down();
}, 60_000);

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'LB-IPAM through kubectl', () => {
  it('pools: kubectl shows usage; a malformed pool is rejected (422) and a pool the schema cannot judge says why it is not Ready', async () => {
    const ready = /default\s+false\s+254\s+0\s+254\s+True/; // no PRIORITY; 254 free
    const table = await eventually(async () => (await kubectl(['get', 'loadbalancerippools'])).out, (o) => ready.test(o));
    expect(table).toMatch(ready);
    expect(table).toMatch(/NAME\s+DISABLED\s+PRIORITY\s+TOTAL\s+USED\s+AVAILABLE\s+READY\s+AGE/);
    const empty = await apply('apiVersion: ferry.dev/v1alpha1\nkind: LoadBalancerIPPool\nmetadata: {name: empty}\nspec: {blocks: []}\n');
    expect(empty.code).not.toBe(0);
    expect(empty.err).toMatch(/is invalid.*spec\.blocks/s);
    const notCidr = await apply('apiVersion: ferry.dev/v1alpha1\nkind: LoadBalancerIPPool\nmetadata: {name: banana}\nspec: {blocks: [{cidr: banana}]}\n');
    expect(notCidr.err).toMatch(/is invalid.*spec\.blocks\[0\]\.cidr/s);
    // Valid to the schema, but not a network, start after stop, and overlapping the default pool.
    expect((await apply(`apiVersion: ferry.dev/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: sloppy}
spec: {blocks: [{cidr: 10.0.102.1/24}, {start: 10.0.103.9, stop: 10.0.103.1}]}
---
apiVersion: ferry.dev/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: overlap}
spec: {blocks: [{cidr: 10.0.100.128/25}]}
`)).code).toBe(0);
    const sloppy = await eventually(async () => JSON.parse((await kubectl(['get', 'lbpool', 'sloppy', '-o', 'json'])).out), (p) => p.status?.conditions !== undefined);
    expect(sloppy.status.conditions[0]).toMatchObject({ type: 'Ready', status: 'False', reason: 'InvalidBlocks' });
    expect(sloppy.status.conditions[0].message).toBe('"10.0.102.1/24" is not a network: host bits are set (did you mean 10.0.102.0/24?); block 10.0.103.9-10.0.103.1: start is after stop');
    const overlap = await eventually(async () => JSON.parse((await kubectl(['get', 'lbpool', 'overlap', '-o', 'json'])).out), (p) => p.status?.conditions !== undefined);
    expect(overlap.status.conditions).toMatchObject([{ type: 'Ready', status: 'False', reason: 'Conflict' }, { type: 'Conflict', status: 'True', message: 'overlaps the older pool default, which keeps the addresses' }]);
    expect((await kubectl(['delete', 'lbpool', 'sloppy', 'overlap'])).code).toBe(0);
  });

  it('priority: a younger pool with a priority serves before the older pool for everyone; a negative one is rejected (422)', async () => {
    const preferred = 'apiVersion: ferry.dev/v1alpha1\nkind: LoadBalancerIPPool\nmetadata: {name: preferred}\nspec: {blocks: [{cidr: 10.0.105.0/30}], priority: 1}\n';
    expect((await apply(preferred)).code).toBe(0);
    // PRIORITY 1; TOTAL 3 (.1-.3: a /24's .0 is skipped), none used yet.
    const shown = /preferred\s+false\s+1\s+3\s+0\s+3\s+True/;
    expect(await eventually(async () => (await kubectl(['get', 'lbpool', 'preferred'])).out, (o) => shown.test(o))).toMatch(shown);
    expect((await apply(lbService('prefers'))).code).toBe(0);
    expect(await eventually(() => ipOf('prefers'), (ip) => ip !== '')).toBe('10.0.105.1');
    expect(await conditionOf('prefers')).toMatchObject({ reason: 'Allocated', message: '10.0.105.1 from pool preferred' });
    const negative = await apply(preferred.replace('name: preferred', 'name: negative').replace('10.0.105.0/30', '10.0.106.0/30').replace('priority: 1', 'priority: -1'));
    expect(negative.err).toMatch(/is invalid.*spec\.priority/s);
    await kubectl(['delete', 'svc', 'prefers']);
    expect((await kubectl(['delete', 'lbpool', 'preferred'])).code).toBe(0);
  });

  it("namespaceSelector: a Service takes the pool for its namespace's labels, and gives the address back when the namespace loses them", async () => {
    expect((await apply(`apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {team: a}}
---
apiVersion: ferry.dev/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: team-a}
spec: {blocks: [{cidr: 10.0.106.0/30}], namespaceSelector: {matchLabels: {team: a}}}
`)).code).toBe(0);
    expect((await apply(lbService('tenant', { ns: 'team-a' }))).code).toBe(0);
    expect(await eventually(() => ipOf('tenant', 'team-a'), (ip) => ip !== '')).toBe('10.0.106.1');
    expect((await kubectl(['label', 'namespace', 'team-a', 'team-'])).code).toBe(0);
    expect(await eventually(() => ipOf('tenant', 'team-a'), (ip) => ip !== '' && ip !== '10.0.106.1')).toMatch(/^10\.0\.100\.\d+$/);
    expect((await kubectl(['delete', 'svc', '-n', 'team-a', 'tenant'])).code).toBe(0);
    expect((await kubectl(['delete', 'lbpool', 'team-a'])).code).toBe(0);
  });

  it('requests: spec.loadBalancerIP, the annotations, and what cannot be granted says why (condition and Event)', async () => {
    expect((await apply([
      lbService('asks-spec', { extra: '  loadBalancerIP: 10.0.100.77' }),
      lbService('asks-annotation', { annotations: { 'ferry.dev/load-balancer-ips': '10.0.100.78' } }),
      lbService('asks-outside', { annotations: { 'ferry.dev/load-balancer-ips': '192.0.2.10' } }),
      lbService('asks-taken', { annotations: { 'ferry.dev/load-balancer-ips': '10.0.100.77' } }),
      lbService('asks-garbage', { annotations: { 'ferry.dev/load-balancer-ips': '10.0.100.999' } }),
    ].join('---\n'))).code).toBe(0);
    expect(await eventually(() => ipOf('asks-spec'), (ip) => ip !== '')).toBe('10.0.100.77');
    expect((await getSvc('asks-spec')).status!.loadBalancer!.ingress![0]!.ipMode).toBe('VIP');
    expect(await eventually(() => ipOf('asks-annotation'), (ip) => ip !== '')).toBe('10.0.100.78');
    expect(await eventually(() => conditionOf('asks-outside'), (c) => c !== undefined)).toMatchObject({ status: 'False', reason: 'RequestedIPUnavailable', message: '192.0.2.10 is in no usable pool' });
    expect(await eventually(() => conditionOf('asks-taken'), (c) => c !== undefined)).toMatchObject({ reason: 'RequestedIPUnavailable', message: "10.0.100.77 is default/asks-spec's alone (no sharing key)" });
    expect(await eventually(() => conditionOf('asks-garbage'), (c) => c !== undefined)).toMatchObject({ reason: 'RequestedIPUnavailable', message: '"10.0.100.999" is not an IP address' });
    const events = await eventually(async () => (await kubectl(['get', 'events'])).out, (o) => /AllocationFailed\s+service\/asks-taken/.test(o));
    expect(events).toMatch(/Warning\s+AllocationFailed\s+service\/asks-outside\s+RequestedIPUnavailable: 192\.0\.2\.10 is in no usable pool/);
    expect(events).toMatch(/Normal\s+IPAllocated\s+service\/asks-spec\s+10\.0\.100\.77 as requested/);
    // kubectl describe shows a Service's own Events (found by name, kind and uid).
    const described = (await kubectl(['describe', 'svc', 'asks-outside'])).out;
    expect(described).toMatch(/Warning\s+AllocationFailed\s+\S+\s+ferry-operator\s+RequestedIPUnavailable: 192\.0\.2\.10 is in no usable pool/);
    expect(described).not.toMatch(/asks-taken|10\.0\.100\.77/);
    // kubectl get svc shows the address, or <pending>.
    const svcs = (await kubectl(['get', 'svc'])).out;
    expect(svcs).toMatch(/asks-spec\s+LoadBalancer\s+10\.\d+\.\d+\.\d+\s+10\.0\.100\.77\s+80:\d+\/TCP/);
    expect(svcs).toMatch(/asks-outside\s+LoadBalancer\s+\S+\s+<pending>/);
    // Freed by its owner, the address goes to the Service waiting for it.
    expect((await kubectl(['delete', 'svc', 'asks-spec'])).code).toBe(0);
    expect(await eventually(() => ipOf('asks-taken'), (ip) => ip !== '')).toBe('10.0.100.77');
    await kubectl(['delete', 'svc', 'asks-annotation', 'asks-outside', 'asks-taken', 'asks-garbage']);
  });

  it('sharing: TCP/53 and UDP/53 on one address, both served; a third on TCP/53 is refused with SharingConflict', async () => {
    await sb.put('Pod', { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'dns', namespace: 'default', labels: { app: 'dns' } }, spec: { nodeName: 'node-1', containers: [{ name: 'c', image: 'traefik/whoami', ports: [{ containerPort: 8080 }, { containerPort: 5353, protocol: 'UDP' }] }] } });
    const shared = { 'ferry.dev/sharing-key': 'dns' };
    expect((await apply([
      lbService('dns-tcp', { annotations: shared, ports: '[{ port: 53, protocol: TCP, targetPort: 8080 }]' }).replace('app: dns-tcp', 'app: dns'),
      lbService('dns-udp', { annotations: shared, ports: '[{ port: 53, protocol: UDP, targetPort: 5353 }]' }).replace('app: dns-udp', 'app: dns'),
    ].join('---\n'))).code).toBe(0);
    const ip = await eventually(() => ipOf('dns-tcp'), (x) => x !== '');
    expect(await eventually(() => ipOf('dns-udp'), (x) => x !== '')).toBe(ip);
    // Each says whom it shares with, whichever came first.
    expect(await eventually(async () => (await conditionOf('dns-udp'))?.message, (m) => m?.includes('shared') === true)).toBe(`${ip} from pool default, shared with default/dns-tcp`);
    expect(await eventually(async () => (await conditionOf('dns-tcp'))?.message, (m) => m?.includes('shared') === true)).toBe(`${ip} from pool default, shared with default/dns-udp`);
    // Both protocols through the datapath, from outside.
    const http = await eventually(() => sb.net.client.exec(['curl', '-sS', '--max-time', '3', `http://${ip}:53/`]), (r) => r.code === 0);
    expect(http.stdout).toMatch(/Hostname: dns/);
    expect((await udpEcho(sb.net.client, `${ip}:53`, 100)).map((r) => r.ok)).toEqual([true, true]);
    expect((await apply(lbService('dns-tcp-2', { annotations: shared, ports: '[{ port: 53, protocol: TCP }]' }))).code).toBe(0);
    expect(await eventually(() => conditionOf('dns-tcp-2'), (c) => c !== undefined)).toMatchObject({ status: 'False', reason: 'SharingConflict', message: `${ip}: ports TCP/53 are already default/dns-tcp, default/dns-udp's` });
    await kubectl(['delete', 'svc', 'dns-tcp-2', 'dns-tcp', 'dns-udp']);
  });

  it('a pool runs out, then grows: the waiting Service gets an address and nobody else moves', async () => {
    const pool = (stop: string) => `apiVersion: ferry.dev/v1alpha1\nkind: LoadBalancerIPPool\nmetadata: {name: tiny}\nspec: {blocks: [{start: 10.0.104.1, stop: ${stop}}]}\n`;
    expect((await apply(pool('10.0.104.1'))).code).toBe(0);
    const inTiny = { 'ferry.dev/pool': 'tiny' };
    expect((await apply(lbService('first', { annotations: inTiny }))).code).toBe(0);
    expect(await eventually(() => ipOf('first'), (x) => x !== '')).toBe('10.0.104.1');
    expect((await apply(lbService('second', { annotations: inTiny }))).code).toBe(0);
    expect(await eventually(() => conditionOf('second'), (c) => c !== undefined)).toMatchObject({ reason: 'PoolExhausted', message: 'no free address in pool tiny' });
    const exhausted = /tiny\s+false\s+1\s+1\s+0\s+True/; // TOTAL 1, USED 1, AVAILABLE 0 (no PRIORITY)
    expect(await eventually(async () => (await kubectl(['get', 'lbpool', 'tiny'])).out, (o) => exhausted.test(o))).toMatch(exhausted);
    expect((await apply(pool('10.0.104.2'))).code).toBe(0);
    expect(await eventually(() => ipOf('second'), (x) => x !== '')).toBe('10.0.104.2');
    expect(await ipOf('first')).toBe('10.0.104.1');
    expect(await conditionOf('second')).toMatchObject({ status: 'True', reason: 'Allocated' });
    // ferry lb shows both, with their pool.
    const list = await exec(process.execPath, [FERRY, 'lb', 'list', '--kubeconfig', sb.kubeconfig]);
    expect(list.stdout).toMatch(/10\.0\.104\.1\s+tiny\s+default\/first\s+80\/TCP\s+Cluster/);
    expect(list.stdout).toMatch(/10\.0\.104\.2\s+tiny\s+default\/second/);
    const pools = await exec(process.execPath, [FERRY, 'lb', 'pools', '--kubeconfig', sb.kubeconfig]);
    expect(pools.stdout).toMatch(/tiny\s+10\.0\.104\.1-10\.0\.104\.2\s+\(every Service\)\s+-\s+2\s+2\s+0\s+True/);
  });

  it('kill -9 the leader: the other replica takes over within 15 s and no address changes', async () => {
    const before = await allIPs();
    const leader = (await sb.operatorLeader())!;
    expect(leader).toMatch(/^ferry-operator-node-\d$/);
    // Both replicas are ready (a standby must be able to take over); only the leader says it leads.
    for (const n of sb.net.nodes) {
      const ready = await n.host.exec(['curl', '-s', '-o', '/dev/null', '-w', '%{http_code}', 'http://127.0.0.1:9254/readyz']);
      expect(ready.stdout, n.name).toBe('200');
      const metrics = (await n.host.exec(['curl', '-s', 'http://127.0.0.1:9253/metrics'])).stdout;
      expect(metrics, n.name).toMatch(new RegExp(`^ferry_operator_leader ${leader.endsWith(n.name) ? 1 : 0}$`, 'm'));
      if (leader.endsWith(n.name)) expect(metrics).toMatch(/^ferry_operator_pool_addresses\{pool="default",state="total"\} 254$/m);
    }
    const proc = sb.operators.get(leader)!;
    const killedAt = Date.now();
    process.kill(proc.pid, 'SIGKILL');
    const next = await eventually(() => sb.operatorLeader(), (h) => h !== undefined && h !== leader, 20_000, 100);
    const took = Date.now() - killedAt;
    expect(next).not.toBe(leader);
    expect(took).toBeLessThan(15_000);
    // The new leader works (a new Service gets an address) and moved nothing.
    expect((await apply(lbService('after-failover'))).code).toBe(0);
    expect(await eventually(() => ipOf('after-failover'), (x) => x !== '')).toMatch(/^10\.0\.100\./);
    expect(Object.fromEntries(Object.entries(await allIPs()).filter(([k]) => k !== 'default/after-failover'))).toEqual(before);
    // The killed replica comes back as the standby.
    await proc.exited;
    sb.startOperator(sb.net.nodes.find((n) => leader.endsWith(n.name))!);
    process.stdout.write(`failover took ${took} ms\n`);
  });

  it('migrates a MetalLB and a Cilium cluster: ferry takes over every address as it was', async () => {
    // Before: MetalLB and Cilium gave the addresses, ferry's operator is not installed.
    await Promise.all([...sb.operators.values()].map((p) => p.stop(5000)));
    sb.operators.clear();
    expect((await kubectl(['create', 'namespace', 'web'])).code).toBe(0);
    const metallb = join(REPO_ROOT, 'test', 'fixtures', 'migrate', 'metallb.yaml');
    const cilium = join(REPO_ROOT, 'test', 'fixtures', 'migrate', 'cilium.yaml');
    const theirs: Record<string, string> = { 'default/dns-tcp': '10.0.110.53', 'default/dns-udp': '10.0.110.53', 'default/plain': '10.0.110.0', 'web/shop': '10.0.120.80' };
    type Doc = { kind: string; metadata: { name: string }; items?: Doc[] };
    const services = [metallb, cilium]
      .flatMap((f) => parseAllDocuments(readFileSync(f, 'utf8')).map((d) => d.toJSON() as Doc))
      .flatMap((d) => d.items ?? [d])
      .filter((d) => d.kind === 'Service');
    for (const [key, ip] of Object.entries(theirs)) {
      const [ns, name] = key.split('/') as [string, string];
      const doc = services.find((d) => d.metadata.name === name)!;
      const created = await api.call('POST', api.url('Service', ns), { ...doc, status: undefined });
      expect(created.status, JSON.stringify(created.json)).toBe(201);
      const status = await api.call('PUT', `${api.url('Service', ns, name)}/status`, { ...created.json, status: { loadBalancer: { ingress: [{ ip }] } } });
      expect(status.status).toBe(200);
    }
    // The switch: ferry migrate → kubectl apply, then the operator starts.
    const out = spawnSync(process.execPath, [FERRY, 'migrate', '-f', metallb, '-f', cilium], { encoding: 'utf8' });
    expect(out.status, out.stderr).toBe(0);
    expect(out.stderr).not.toMatch(/L2Advertisement/); // nothing lost: the L2Advertisement (every pool) is a policy for every Service
    const applied = await apply(out.stdout);
    expect(applied.code, applied.err).toBe(0);
    expect(applied.out).toMatch(/loadbalancerippool.ferry.dev\/production created/);
    expect(applied.out).toMatch(/l2announcementpolicy.ferry.dev\/l2 created/);
    expect(applied.out).toMatch(/service\/dns-tcp configured/);
    for (const n of sb.net.nodes) sb.startOperator(n);
    for (const [key, ip] of Object.entries(theirs)) {
      const [ns, name] = key.split('/') as [string, string];
      expect(await eventually(() => conditionOf(name, ns), (c) => c !== undefined), key).toMatchObject({ status: 'True', reason: 'Allocated' });
      expect(await ipOf(name, ns), key).toBe(ip);
    }
    expect((await conditionOf('dns-udp'))!.message).toBe('10.0.110.53 from pool production, shared with default/dns-tcp');
    const production = JSON.parse((await kubectl(['get', 'lbpool', 'production', '-o', 'json'])).out);
    expect(production.status).toMatchObject({ total: 267, used: 2 }); // .53 (shared) and .0
    expect((await kubectl(['get', 'events', '-A'])).out).not.toMatch(/IPReleased\s+service\/(dns-tcp|dns-udp|plain|shop)/);
  });
});
