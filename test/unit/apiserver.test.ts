// The test API server against the real client: lists, watches, resourceVersions, 410 Gone
// and re-list, selectors, status subresource, merge patches, conflicts. Loopback only.
import { CoreV1Api, DiscoveryV1Api, KubeConfig, type V1EndpointSlice, type V1Service } from '@kubernetes/client-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { JsonClient } from '../../src/k8s/client.js';
import { kubeConfigAccess } from '../../src/k8s/kubeconfig-client.js';
import { leanNode, leanSlice } from '../../src/k8s/lean.js';
import { Watcher } from '../../src/k8s/watcher.js';
import { TestApiServer, matchesFields, matchesLabels, mergePatch } from '../../src/sandbox/apiserver/server.js';

let server: TestApiServer;
let kc: KubeConfig;
beforeEach(async () => {
  server = new TestApiServer();
  await server.start();
  kc = new KubeConfig();
  kc.loadFromOptions({ clusters: [{ name: 'c', server: server.url, skipTLSVerify: true }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
});
afterEach(async () => {
  await server.stop();
});

const svc = (name: string, labels?: Record<string, string>): V1Service => ({ metadata: { name, namespace: 'default', labels }, spec: { clusterIP: '10.96.0.10', ports: [{ port: 80 }] } });
const until = async (cond: () => boolean, ms = 5000) => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 10));
  }
};

describe('test API server with @kubernetes/client-node', () => {
  it('creates, gets, lists, updates status, patches and deletes', async () => {
    const core = kc.makeApiClient(CoreV1Api);
    const created = await core.createNamespacedService({ namespace: 'default', body: svc('web') });
    expect(created.metadata?.resourceVersion).toBeTruthy();
    expect((await core.readNamespacedService({ name: 'web', namespace: 'default' })).spec?.clusterIP).toBe('10.96.0.10');
    await core.replaceNamespacedServiceStatus({ name: 'web', namespace: 'default', body: { ...created, status: { loadBalancer: { ingress: [{ ip: '10.0.100.1' }] } } } });
    const l = await core.listServiceForAllNamespaces();
    expect(l.items.map((s) => s.status?.loadBalancer?.ingress?.[0]?.ip)).toEqual(['10.0.100.1']);
    await expect(core.replaceNamespacedService({ name: 'web', namespace: 'default', body: created })).rejects.toThrow(/409|Conflict|modified/);
    await core.deleteNamespacedService({ name: 'web', namespace: 'default' });
    expect((await core.listServiceForAllNamespaces()).items).toEqual([]);
  });

  it('feeds a watcher: synced only after the full list, then every change', async () => {
    for (let i = 0; i < 50; i++) server.store.create('services', svc(`s${i}`) as never);
    const seen: string[] = [];
    const w = new Watcher<V1Service>('services', new JsonClient(kubeConfigAccess(kc)), '/api/v1/services', { onChange: (k, o) => seen.push(`${k} ${o.metadata?.name}`), onError: () => {} });
    w.start();
    await w.synced;
    expect(w.list().length).toBe(50);
    server.store.create('services', svc('late') as never);
    server.store.delete('services', 'default', 's0');
    await until(() => seen.includes('add late') && seen.includes('delete s0'));
    await w.stop();
  });

  it('answers a watch from a compacted resourceVersion with 410, and the watcher re-lists', async () => {
    const slice = (name: string): V1EndpointSlice => ({ metadata: { name, namespace: 'default', labels: { 'kubernetes.io/service-name': 'web' } }, addressType: 'IPv4', endpoints: [] });
    server.store.create('endpointslices', slice('a') as never);
    const w = new Watcher<V1EndpointSlice>('slices', new JsonClient(kubeConfigAccess(kc)), '/apis/discovery.k8s.io/v1/endpointslices', { onChange: () => {}, onError: () => {} });
    w.start();
    await w.synced;
    // The API server goes away; meanwhile history is compacted and objects change.
    await server.stop();
    server.store.create('endpointslices', slice('b') as never);
    server.store.delete('endpointslices', 'default', 'a');
    server.store.compact();
    await server.start();
    await until(() => w.list().map((s) => s.metadata?.name).join() === 'b', 15_000);
    expect(server.requests.filter((r) => r === 'GET endpointslices').length).toBeGreaterThanOrEqual(2); // listed again
    await w.stop();
  });

  it('lists in pages: every object once, the cache complete before anything is told', async () => {
    for (let i = 0; i < 1203; i++) server.store.create('services', svc(`s${String(i).padStart(4, '0')}`) as never);
    let sizeAtFirstEvent = -1;
    const w: Watcher<V1Service> = new Watcher<V1Service>('services', new JsonClient(kubeConfigAccess(kc)), '/api/v1/services', {
      onChange: () => {
        if (sizeAtFirstEvent < 0) sizeAtFirstEvent = w.size;
      },
      onError: () => {},
    }, { pageSize: 500 });
    w.start();
    await w.synced;
    expect(w.stats.pages).toBe(3);
    expect(new Set(w.list().map((s) => s.metadata?.name)).size).toBe(1203);
    expect(sizeAtFirstEvent).toBe(1203);
    await w.stop();
  });

  it('a page token from before a compaction is 410, and the watcher starts the list again', async () => {
    for (let i = 0; i < 20; i++) server.store.create('services', svc(`s${i}`) as never);
    const json = new JsonClient(kubeConfigAccess(kc));
    const first = await json.request<{ metadata: { continue?: string } }>('GET', '/api/v1/services?limit=5');
    expect(first.metadata.continue).toBeTruthy();
    for (let i = 0; i < 3; i++) server.store.create('services', svc(`t${i}`) as never);
    server.store.compact();
    await expect(json.request('GET', `/api/v1/services?limit=5&continue=${first.metadata.continue}`)).rejects.toThrow(/410/);
  });

  it('drops managedFields and last-applied, keeps only what the transform keeps', async () => {
    server.store.create('endpointslices', { metadata: { name: 'a', namespace: 'default', labels: { 'kubernetes.io/service-name': 'web' }, managedFields: [{ manager: 'x' }], annotations: { 'kubectl.kubernetes.io/last-applied-configuration': '{}', 'endpoints.kubernetes.io/last-change-trigger-time': '2026-01-01T00:00:00Z' } }, addressType: 'IPv4', endpoints: [{ addresses: ['10.244.1.5'], nodeName: 'n1', conditions: { ready: true }, targetRef: { kind: 'Pod', name: 'p', namespace: 'default' } }] } as never);
    server.store.create('nodes', { metadata: { name: 'n1' }, status: { addresses: [{ type: 'InternalIP', address: '10.0.30.21' }], images: [{ names: ['a'], sizeBytes: 1 }] } } as never);
    const slices = new Watcher<V1EndpointSlice>('slices', new JsonClient(kubeConfigAccess(kc)), '/apis/discovery.k8s.io/v1/endpointslices', { onChange: () => {}, onError: () => {} }, { transform: leanSlice });
    const nodes = new Watcher('nodes', new JsonClient(kubeConfigAccess(kc)), '/api/v1/nodes', { onChange: () => {}, onError: () => {} }, { transform: leanNode });
    slices.start();
    nodes.start();
    await Promise.all([slices.synced, nodes.synced]);
    const s = slices.get('default', 'a')!;
    expect(s.metadata).toEqual({ name: 'a', namespace: 'default', resourceVersion: expect.any(String), labels: { 'kubernetes.io/service-name': 'web' }, annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': '2026-01-01T00:00:00Z' } });
    expect(s.endpoints![0]).not.toHaveProperty('targetRef');
    expect(nodes.get(undefined, 'n1')!.status).toEqual({ addresses: [{ type: 'InternalIP', address: '10.0.30.21' }] });
    await Promise.all([slices.stop(), nodes.stop()]);
  });

  it('a watch ends after its timeout and is opened again from where it was; changes keep coming', async () => {
    const seen: string[] = [];
    const w = new Watcher<V1Service>('services', new JsonClient(kubeConfigAccess(kc)), '/api/v1/services', { onChange: (k, o) => seen.push(`${k} ${o.metadata?.name}`), onError: () => {} }, { watchTimeoutSeconds: [1, 1] });
    w.start();
    await w.synced;
    await until(() => w.stats.watches >= 3, 10_000);
    server.store.create('services', svc('after') as never);
    await until(() => seen.includes('add after'));
    expect(w.stats.lists).toBe(1); // resumed by resourceVersion, never listed again
    await w.stop();
  });

  it('a watch that goes silent (a half-open connection) is dropped and opened again', async () => {
    let watches = 0;
    // An API server that answers the list, then holds each watch open without a byte.
    const silent = createServer((req, res) => {
      if (req.url?.includes('watch=1')) {
        watches++;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.flushHeaders();
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ items: [], metadata: { resourceVersion: '1' } }));
    });
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
    const k = new KubeConfig();
    k.loadFromOptions({ clusters: [{ name: 'c', server: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`, skipTLSVerify: true }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
    const errors: string[] = [];
    const w = new Watcher<V1Service>('services', new JsonClient(kubeConfigAccess(k)), '/api/v1/services', { onChange: () => {}, onError: (e) => errors.push((e as Error).message) }, { watchTimeoutSeconds: [1, 1], silenceMarginMs: 500 });
    w.start();
    await w.synced;
    await until(() => watches >= 2, 10_000);
    expect(errors[0]).toMatch(/nothing from the server for 1 s \+ 0\.5 s/);
    await w.stop();
    silent.closeAllConnections();
    await new Promise((r) => silent.close(r));
  });

  it('labels every namespace with its name, as the API server does, however it is written', async () => {
    const core = kc.makeApiClient(CoreV1Api);
    await core.createNamespace({ body: { metadata: { name: 'shop', labels: { team: 'a' } } } });
    const read = async () => (await core.readNamespace({ name: 'shop' })).metadata?.labels;
    expect(await read()).toEqual({ team: 'a', 'kubernetes.io/metadata.name': 'shop' });
    const have = await core.readNamespace({ name: 'shop' });
    await core.replaceNamespace({ name: 'shop', body: { ...have, metadata: { ...have.metadata, labels: { team: 'b' } } } });
    expect(await read()).toEqual({ team: 'b', 'kubernetes.io/metadata.name': 'shop' });
  });

  it('filters by label and field selectors', () => {
    expect(matchesLabels({ a: '1' }, '!service.kubernetes.io/service-proxy-name,a=1')).toBe(true);
    expect(matchesLabels({ 'service.kubernetes.io/headless': '' }, '!service.kubernetes.io/headless')).toBe(false);
    expect(matchesLabels({ a: '1' }, 'a!=1')).toBe(false);
  });

  it('merges patches as RFC 7386 says', () => {
    expect(mergePatch({ a: 1, b: { c: 2, d: 3 } }, { b: { c: null, e: 4 }, f: [1] })).toEqual({ a: 1, b: { d: 3, e: 4 }, f: [1] });
  });
});

describe('field selectors', () => {
  const ev = { metadata: { name: 'e1', namespace: 'default' }, involvedObject: { kind: 'Service', name: 'web', uid: 'u-1' } } as never;
  it.each<[string, boolean]>([
    ['metadata.name=e1', true],
    ['involvedObject.name=web,involvedObject.kind=Service,involvedObject.uid=u-1', true],
    ['involvedObject.name=other', false], // kubectl describe of another object sees none of these
    ['involvedObject.uid=u-2', false],
    ['involvedObject.name!=other', true],
    ['involvedObject.name==web', true],
    ['nonsense', false],
  ])('%s → %s', (sel, want) => {
    expect(matchesFields(ev, sel)).toBe(want);
  });
});
