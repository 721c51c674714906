// CustomResourceDefinitions in the test API server: ferry's pool CRD from deploy/ served at
// its path, objects checked against its schema (422 for a bad pool, defaults, pruning),
// the status subresource, discovery, and the tables kubectl prints.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TestApiServer } from '../../src/sandbox/apiserver/server.js';
import { REPO_ROOT } from '../harness/paths.js';

let server: TestApiServer;
beforeEach(async () => {
  server = new TestApiServer();
  await server.start();
});
afterEach(async () => {
  await server.stop();
});

const call = async (method: string, path: string, body?: unknown, accept = 'application/json') => {
  const r = await fetch(`${server.url}${path}`, { method, headers: { 'content-type': method === 'PATCH' ? 'application/merge-patch+json' : 'application/json', accept }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: r.status, json: (await r.json()) as Record<string, any> };
};
const POOLS = '/apis/ferry.dev/v1alpha1/loadbalancerippools';
const crd = () => parse(readFileSync(join(REPO_ROOT, 'deploy', 'crds', 'loadbalancerippools.yaml'), 'utf8'));
const pool = (name: string, spec: object) => ({ apiVersion: 'ferry.dev/v1alpha1', kind: 'LoadBalancerIPPool', metadata: { name }, spec });

describe('custom resources', () => {
  beforeEach(async () => {
    expect((await call('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', crd())).status).toBe(201);
  });

  it('serves the pool CRD: create with defaults, unknown fields pruned, list, get', async () => {
    const r = await call('POST', POOLS, pool('default', { blocks: [{ cidr: '10.0.100.0/24' }], surprise: 1 }));
    expect(r.status).toBe(201);
    expect(r.json.spec).toEqual({ blocks: [{ cidr: '10.0.100.0/24' }], allowFirstLastIPs: false, autoAssign: true, disabled: false });
    expect((await call('GET', POOLS)).json.items.map((p: { metadata: { name: string } }) => p.metadata.name)).toEqual(['default']);
    expect((await call('GET', `${POOLS}/default`)).json.kind).toBe('LoadBalancerIPPool');
  });

  it.each([
    ['a block that is no CIDR', { blocks: [{ cidr: '10.0.100.0/33' }] }, 'spec.blocks[0].cidr: Invalid value: "10.0.100.0/33": spec.blocks[0].cidr in body must be of type cidr: "10.0.100.0/33"'],
    ['no blocks', { blocks: [] }, 'spec.blocks: Invalid value: 0: spec.blocks in body should have at least 1 items'],
    ['a block with a cidr and a range', { blocks: [{ cidr: '10.0.0.0/24', start: '10.0.1.1', stop: '10.0.1.2' }] }, 'spec.blocks[0]: Invalid value: {"cidr":"10.0.0.0/24","start":"10.0.1.1","stop":"10.0.1.2"}: spec.blocks[0] in body must match exactly one schema in oneOf'],
    ['an unknown operator', { blocks: [{ cidr: '10.0.0.0/24' }], serviceSelector: { matchExpressions: [{ key: 'a', operator: 'Near' }] } }, 'spec.serviceSelector.matchExpressions[0].operator: Unsupported value: "Near": supported values: "In", "NotIn", "Exists", "DoesNotExist"'],
    ['a wrong type', { blocks: [{ cidr: '10.0.0.0/24' }], autoAssign: 'yes' }, 'spec.autoAssign: Invalid value: "string": spec.autoAssign in body must be of type boolean: "string"'],
    ['more serviceSelectors than 16', { blocks: [{ cidr: '10.0.0.0/24' }], serviceSelectors: Array.from({ length: 17 }, () => ({ matchLabels: { a: '1' } })) }, 'spec.serviceSelectors: Too many: 17: must have at most 16 items'],
    ['an unknown operator among namespaceSelectors', { blocks: [{ cidr: '10.0.0.0/24' }], namespaceSelectors: [{ matchExpressions: [{ key: 'a', operator: 'Near' }] }] }, 'spec.namespaceSelectors[0].matchExpressions[0].operator: Unsupported value: "Near": supported values: "In", "NotIn", "Exists", "DoesNotExist"'],
    ['a negative priority', { blocks: [{ cidr: '10.0.0.0/24' }], priority: -1 }, 'spec.priority: Invalid value: -1: spec.priority in body should be greater than or equal to 0'],
    ['a priority beyond int32', { blocks: [{ cidr: '10.0.0.0/24' }], priority: 2 ** 31 }, `spec.priority: Invalid value: ${2 ** 31}: spec.priority in body should be less than or equal to 2147483647`],
    ['no spec', undefined, 'spec: Required value'],
  ])('refuses %s with 422 Invalid', async (_what, spec, message) => {
    const r = await call('POST', POOLS, { apiVersion: 'ferry.dev/v1alpha1', kind: 'LoadBalancerIPPool', metadata: { name: 'bad' }, ...(spec ? { spec } : {}) });
    expect(r.status).toBe(422);
    expect(r.json).toMatchObject({ reason: 'Invalid', message: `LoadBalancerIPPool.ferry.dev "bad" is invalid: ${message}` });
    expect((await call('GET', POOLS)).json.items).toEqual([]);
  });

  it('has a status subresource: the spec write keeps status, the status write keeps spec', async () => {
    await call('POST', POOLS, pool('p', { blocks: [{ cidr: '10.0.100.0/24' }], disabled: false }));
    const cur = (await call('GET', `${POOLS}/p`)).json;
    expect((await call('PUT', `${POOLS}/p/status`, { ...cur, spec: { blocks: [{ cidr: '10.9.9.0/24' }] }, status: { total: 254, used: 1, available: 253 } })).status).toBe(200);
    const after = (await call('GET', `${POOLS}/p`)).json;
    expect(after.spec.blocks).toEqual([{ cidr: '10.0.100.0/24' }]);
    expect(after.status).toEqual({ total: 254, used: 1, available: 253 });
    await call('PATCH', `${POOLS}/p`, { spec: { disabled: true }, status: { used: 99 } });
    expect((await call('GET', `${POOLS}/p`)).json).toMatchObject({ spec: { disabled: true }, status: { used: 1 } });
    expect((await call('PATCH', `${POOLS}/p/status`, { status: { used: 'many' } })).status).toBe(422);
  });

  it('discovery and tables show it as kubectl wants', async () => {
    expect((await call('GET', '/apis')).json.groups.map((g: { name: string }) => g.name)).toContain('ferry.dev');
    expect((await call('GET', '/apis/ferry.dev/v1alpha1')).json.resources.map((r: { name: string }) => r.name)).toEqual(['loadbalancerippools', 'loadbalancerippools/status']);
    await call('POST', POOLS, pool('p', { blocks: [{ cidr: '10.0.100.0/24' }], priority: 5 }));
    await call('PUT', `${POOLS}/p/status`, { ...(await call('GET', `${POOLS}/p`)).json, status: { total: 254, used: 3, available: 251, conditions: [{ type: 'Ready', status: 'True' }] } });
    const t = (await call('GET', POOLS, undefined, 'application/json;as=Table;v=v1;g=meta.k8s.io,application/json')).json;
    expect(t.columnDefinitions.map((c: { name: string }) => c.name)).toEqual(['Name', 'Disabled', 'Priority', 'Total', 'Used', 'Available', 'Ready', 'Age']);
    expect(t.rows[0].cells.slice(0, 7)).toEqual(['p', false, 5, 254, 3, 251, 'True']);
  });
});

describe('tables for built-in resources', () => {
  it('Services: TYPE, CLUSTER-IP, EXTERNAL-IP, PORT(S)', async () => {
    await call('POST', '/api/v1/namespaces/default/services', { metadata: { name: 'lb' }, spec: { type: 'LoadBalancer', clusterIP: '10.96.0.5', ports: [{ port: 53, nodePort: 30053, protocol: 'UDP' }] } });
    const accept = 'application/json;as=Table;v=v1;g=meta.k8s.io';
    const pending = (await call('GET', '/api/v1/namespaces/default/services', undefined, accept)).json;
    expect(pending.rows[0].cells.slice(0, 5)).toEqual(['lb', 'LoadBalancer', '10.96.0.5', '<pending>', '53:30053/UDP']);
    await call('PATCH', '/api/v1/namespaces/default/services/lb/status', { status: { loadBalancer: { ingress: [{ ip: '10.0.100.1' }] } } });
    expect((await call('GET', '/api/v1/namespaces/default/services/lb', undefined, accept)).json.rows[0].cells[3]).toBe('10.0.100.1');
  });
});
