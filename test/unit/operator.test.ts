// `ferry operator` in this process against the test API server: it allocates and writes
// status, conditions, Events and pool status; a restarted operator changes nothing; a
// freed address goes to the Service waiting for it; and every request it makes is one
// its RBAC in deploy/kubernetes/base/operator.yaml allows.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { parse, parseAllDocuments } from 'yaml';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_OPERATOR_CONFIG, mergeOperatorConfig } from '../../src/operator/config.js';
import { OPERATOR_NODE_FLAGS, Operator } from '../../src/operator/operator.js';
import { testKubeconfig } from '../../src/sandbox/apiserver/kubeconfig.js';
import { TestApiServer } from '../../src/sandbox/apiserver/server.js';
import { REPO_ROOT } from '../harness/paths.js';
import { eventually } from '../harness/wait.js';

let server: TestApiServer;
let dir: string;
const running: Operator[] = [];

const call = async (method: string, path: string, body?: unknown) => {
  const r = await fetch(`${server.url}${path}`, { method, headers: { 'content-type': 'application/json', 'user-agent': TEST_AGENT }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: r.status, json: (await r.json()) as Record<string, any> };
};
/** The test's own requests say so, to tell them from the operator's. */
const TEST_AGENT = 'ferry-operator-test';
const SERVICES = '/api/v1/namespaces/default/services';
const POOLS = '/apis/ferry.dev/v1alpha1/loadbalancerippools';
const lb = (name: string, extra: object = {}) => ({ metadata: { name, namespace: 'default' }, spec: { type: 'LoadBalancer', ports: [{ port: 80, protocol: 'TCP' }], ...extra } });
const ipOf = async (name: string) => ((await call('GET', `${SERVICES}/${name}`)).json.status?.loadBalancer?.ingress ?? []).map((i: { ip: string }) => i.ip).join(',');
const conditionOf = async (name: string) => ((await call('GET', `${SERVICES}/${name}`)).json.status?.conditions ?? [])[0] ?? {};

async function startOperator(identity: string): Promise<Operator> {
  const cfg = mergeOperatorConfig(DEFAULT_OPERATOR_CONFIG, {
    kubeconfig: join(dir, 'kubeconfig'), identity, namespace: 'kube-system', healthzBindAddress: '', metricsBindAddress: '',
    leaseDurationSeconds: 3, renewDeadlineSeconds: 2, retryPeriodSeconds: 1,
  }, 'test');
  const op = await Operator.start(cfg, pino({ level: 'silent' }));
  running.push(op);
  return op;
}

beforeEach(async () => {
  server = new TestApiServer();
  await server.start();
  dir = mkdtempSync(join(tmpdir(), 'ferry-operator-'));
  writeFileSync(join(dir, 'kubeconfig'), testKubeconfig(server.url));
  await call('POST', '/api/v1/namespaces', { metadata: { name: 'kube-system' } });
  for (const crd of ['loadbalancerippools', 'l2announcementpolicies', 'bgppeers', 'bgpadvertisements']) {
    expect((await call('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', parse(readFileSync(join(REPO_ROOT, 'deploy', 'crds', `${crd}.yaml`), 'utf8')))).status).toBe(201);
  }
  await call('POST', POOLS, { apiVersion: 'ferry.dev/v1alpha1', kind: 'LoadBalancerIPPool', metadata: { name: 'default' }, spec: { blocks: [{ start: '10.0.100.1', stop: '10.0.100.3' }] } });
});
afterEach(async () => {
  for (const op of running.splice(0)) await op.stop();
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('ferry operator (in process)', () => {
  it('allocates, reports, and a restarted operator rebuilds from status without writing', async () => {
    for (const n of ['a', 'b', 'c']) await call('POST', SERVICES, lb(n));
    const op = await startOperator('one');
    await eventually(async () => [await ipOf('a'), await ipOf('b'), await ipOf('c')].join(' '), (s) => s === '10.0.100.1 10.0.100.2 10.0.100.3');
    expect(await conditionOf('a')).toMatchObject({ type: 'ferry.dev/IPAllocated', status: 'True', reason: 'Allocated' });
    const pool = await eventually(async () => (await call('GET', `${POOLS}/default`)).json, (p) => p.status?.used === 3);
    expect(pool.status).toMatchObject({ total: 3, used: 3, available: 0 });
    const events = await eventually(async () => (await call('GET', '/api/v1/namespaces/default/events')).json.items as Array<{ reason: string; involvedObject: { name: string } }>, (e) => e.length === 3);
    expect(events.map((e) => `${e.reason} ${e.involvedObject.name}`).sort()).toEqual(['IPAllocated a', 'IPAllocated b', 'IPAllocated c']);
    expect(op.status()).toMatchObject({ identity: 'one', leader: true, synced: true, services: { Allocated: 3 } });

    // A fourth waits: the pool is full.
    await call('POST', SERVICES, lb('d'));
    expect(await eventually(() => conditionOf('d'), (c) => c.reason === 'PoolExhausted')).toMatchObject({ status: 'False', message: 'no free address in pool default' });

    await op.stop();
    running.splice(running.indexOf(op), 1);
    const writesBefore = server.access.filter((a) => a.verb === 'patch' && a.resource === 'services/status').length;
    const again = await startOperator('two');
    await eventually(async () => again.status(), (s) => s.leader && s.lastPass !== undefined && s.pendingWrites === 0);
    await new Promise((r) => setTimeout(r, 300));
    expect(server.access.filter((a) => a.verb === 'patch' && a.resource === 'services/status').length).toBe(writesBefore);
    expect([await ipOf('a'), await ipOf('b'), await ipOf('c'), await ipOf('d')]).toEqual(['10.0.100.1', '10.0.100.2', '10.0.100.3', '']);

    // b goes: its address is free again, and d, waiting, gets it.
    await call('DELETE', `${SERVICES}/b`);
    expect(await eventually(() => ipOf('d'), (ip) => ip !== '')).toBe('10.0.100.2');
  });

  it('a Service that stops being a LoadBalancer gives its address back', async () => {
    await call('POST', SERVICES, lb('a'));
    await startOperator('one');
    await eventually(() => ipOf('a'), (ip) => ip === '10.0.100.1');
    const cur = (await call('GET', `${SERVICES}/a`)).json;
    expect((await call('PUT', `${SERVICES}/a`, { ...cur, spec: { ...cur.spec, type: 'ClusterIP' } })).status).toBe(200);
    expect(await eventually(() => ipOf('a'), (ip) => ip === '')).toBe('');
    expect(await conditionOf('a')).toEqual({});
  });

  it('writes Accepted and ResolvedRefs on the announcement objects, and only changes', async () => {
    const FERRY = '/apis/ferry.dev/v1alpha1';
    const post = async (plural: string, kind: string, name: string, spec: object) => expect((await call('POST', `${FERRY}/${plural}`, { apiVersion: 'ferry.dev/v1alpha1', kind, metadata: { name }, spec })).status).toBe(201);
    await post('l2announcementpolicies', 'L2AnnouncementPolicy', 'good', { interfaces: ['eth0'] });
    await post('l2announcementpolicies', 'L2AnnouncementPolicy', 'bad', { interfaces: ['eth(0'] });
    await post('bgppeers', 'BGPPeer', 'router', { peerAddress: '192.0.2.1', peerASN: 65000, myASN: 64512, holdTimeSeconds: 3, keepaliveTimeSeconds: 2 });
    await post('bgpadvertisements', 'BGPAdvertisement', 'to-router', { peers: ['router', 'spare'] });
    const conditions = async (plural: string, name: string) => ((await call('GET', `${FERRY}/${plural}/${name}`)).json.status?.conditions ?? []).map((c: { type: string; status: string; reason: string }) => `${c.type}=${c.status}/${c.reason}`).join(' ');
    const op = await startOperator('one');
    expect(await eventually(() => conditions('l2announcementpolicies', 'good'), (c) => c !== '')).toBe('Accepted=True/Valid');
    expect(await eventually(() => conditions('l2announcementpolicies', 'bad'), (c) => c !== '')).toBe('Accepted=False/Invalid');
    expect(await eventually(() => conditions('bgppeers', 'router'), (c) => c !== '')).toBe('Accepted=False/Invalid');
    expect(await eventually(() => conditions('bgpadvertisements', 'to-router'), (c) => c !== '')).toBe('Accepted=True/Valid ResolvedRefs=False/PeerNotFound');
    // `kubectl get` shows it (the CRD's printer column).
    const table = (await (await fetch(`${server.url}${FERRY}/bgppeers`, { headers: { accept: 'application/json;as=Table;v=v1;g=meta.k8s.io' } })).json()) as { columnDefinitions: Array<{ name: string }>; rows: Array<{ cells: unknown[] }> };
    expect(table.rows[0]!.cells[table.columnDefinitions.findIndex((c) => c.name === 'Accepted')]).toBe('False');
    // The missing peer appears; the broken one is mended.
    await post('bgppeers', 'BGPPeer', 'spare', { peerAddress: '192.0.2.2', peerASN: 65000, myASN: 64512 });
    expect(await eventually(() => conditions('bgpadvertisements', 'to-router'), (c) => c.includes('ResolvedRefs=True'))).toBe('Accepted=True/Valid ResolvedRefs=True/Resolved');
    const router = (await call('GET', `${FERRY}/bgppeers/router`)).json;
    expect((await call('PUT', `${FERRY}/bgppeers/router`, { ...router, spec: { ...router.spec, holdTimeSeconds: 9, keepaliveTimeSeconds: 3 } })).status).toBe(200);
    expect(await eventually(() => conditions('bgppeers', 'router'), (c) => c.startsWith('Accepted=True'))).toBe('Accepted=True/Valid');
    expect(await eventually(async () => (await op.metrics.registry.getSingleMetricAsString('ferry_operator_announcement_objects')), (m) => /kind="BGPPeer",accepted="true"} 2/.test(m))).toMatch(/kind="L2AnnouncementPolicy",accepted="false"} 1/);
    // A restarted operator finds nothing to write.
    await eventually(async () => op.status(), (s) => s.pendingWrites === 0);
    await op.stop();
    running.splice(running.indexOf(op), 1);
    const patches = () => server.access.filter((a) => a.verb === 'patch' && /^(l2announcementpolicies|bgppeers|bgpadvertisements)\/status$/.test(a.resource)).length;
    const before = patches();
    expect(before).toBeGreaterThanOrEqual(6);
    const again = await startOperator('two');
    await eventually(async () => again.status(), (s) => s.leader && s.lastPass !== undefined && s.pendingWrites === 0);
    await new Promise((r) => setTimeout(r, 300));
    expect(patches()).toBe(before);
  });

  it('makes only requests its RBAC (deploy/kubernetes/base/operator.yaml) allows', async () => {
    await call('POST', SERVICES, lb('a'));
    await call('POST', '/apis/ferry.dev/v1alpha1/l2announcementpolicies', { apiVersion: 'ferry.dev/v1alpha1', kind: 'L2AnnouncementPolicy', metadata: { name: 'p' }, spec: {} });
    const op = await startOperator('one');
    await eventually(() => ipOf('a'), (ip) => ip !== '');
    await eventually(async () => (await call('GET', '/apis/ferry.dev/v1alpha1/l2announcementpolicies/p')).json.status?.conditions?.length, Boolean);
    await eventually(async () => op.status(), (s) => s.pendingWrites === 0);
    await op.stop(); // releases the Lease: an update too
    running.splice(running.indexOf(op), 1);
    type Rule = { apiGroups: string[]; resources: string[]; verbs: string[]; resourceNames?: string[] };
    const docs = parseAllDocuments(readFileSync(join(REPO_ROOT, 'deploy', 'kubernetes', 'base', 'operator.yaml'), 'utf8')).map((d) => d.toJSON() as { kind: string; metadata: { namespace?: string }; rules?: Rule[] });
    const clusterRules = docs.filter((d) => d.kind === 'ClusterRole').flatMap((d) => d.rules ?? []);
    const roles = docs.filter((d) => d.kind === 'Role');
    const allows = (r: Rule, a: (typeof server.access)[number]) => r.apiGroups.includes(a.group) && r.resources.includes(a.resource) && r.verbs.includes(a.verb) && (!r.resourceNames || (a.name !== undefined && r.resourceNames.includes(a.name)));
    const ops = server.access.filter((a) => a.userAgent !== TEST_AGENT);
    const denied = ops.filter((a) => !clusterRules.some((r) => allows(r, a)) && !roles.some((role) => role.metadata.namespace === a.namespace && (role.rules ?? []).some((r) => allows(r, a))));
    expect(denied).toEqual([]);
    // It did exercise the rules that matter.
    const seen = new Set(ops.map((a) => `${a.verb} ${a.resource}`));
    for (const v of ['list services', 'watch services', 'list namespaces', 'watch namespaces', 'patch services/status', 'list loadbalancerippools', 'watch loadbalancerippools', 'patch loadbalancerippools/status', 'list bgppeers', 'watch bgpadvertisements', 'patch l2announcementpolicies/status', 'create events', 'get leases', 'create leases', 'update leases']) expect(seen).toContain(v);
  });

  it('the Deployment starts it with the V8 flags the benchmark measured', () => {
    const docs = parseAllDocuments(readFileSync(join(REPO_ROOT, 'deploy', 'kubernetes', 'base', 'operator.yaml'), 'utf8')).map((d) => d.toJSON() as { kind: string; spec?: { template: { spec: { containers: Array<{ command?: string[] }> } } } });
    const command = docs.find((d) => d.kind === 'Deployment')!.spec!.template.spec.containers[0]!.command!;
    expect(command).toEqual(['node', ...OPERATOR_NODE_FLAGS, '/opt/ferry/bin/ferry.js', 'operator']);
  });
});
