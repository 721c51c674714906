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
  expect((await call('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', parse(readFileSync(join(REPO_ROOT, 'deploy', 'crds', 'loadbalancerippools.yaml'), 'utf8')))).status).toBe(201);
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

  it('makes only requests its RBAC (deploy/kubernetes/base/operator.yaml) allows', async () => {
    await call('POST', SERVICES, lb('a'));
    const op = await startOperator('one');
    await eventually(() => ipOf('a'), (ip) => ip !== '');
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
    for (const v of ['list services', 'watch services', 'list namespaces', 'watch namespaces', 'patch services/status', 'list loadbalancerippools', 'watch loadbalancerippools', 'patch loadbalancerippools/status', 'create events', 'get leases', 'create leases', 'update leases']) expect(seen).toContain(v);
  });

  it('the Deployment starts it with the V8 flags the benchmark measured', () => {
    const docs = parseAllDocuments(readFileSync(join(REPO_ROOT, 'deploy', 'kubernetes', 'base', 'operator.yaml'), 'utf8')).map((d) => d.toJSON() as { kind: string; spec?: { template: { spec: { containers: Array<{ command?: string[] }> } } } });
    const command = docs.find((d) => d.kind === 'Deployment')!.spec!.template.spec.containers[0]!.command!;
    expect(command).toEqual(['node', ...OPERATOR_NODE_FLAGS, '/opt/ferry/bin/ferry.js', 'operator']);
  });
});
