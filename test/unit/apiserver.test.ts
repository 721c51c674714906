// The test API server against the real client: lists, watches, resourceVersions, 410 Gone
// and re-list, selectors, status subresource, merge patches, conflicts. Loopback only.
import { CoreV1Api, DiscoveryV1Api, KubeConfig, type V1EndpointSlice, type V1Service } from '@kubernetes/client-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
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
    const core = kc.makeApiClient(CoreV1Api);
    const seen: string[] = [];
    const w = new Watcher<V1Service>('services', kc, '/api/v1/services', () => core.listServiceForAllNamespaces(), { onChange: (k, o) => seen.push(`${k} ${o.metadata?.name}`), onError: () => {} });
    w.start();
    await w.synced;
    expect(w.list().length).toBe(50);
    server.store.create('services', svc('late') as never);
    server.store.delete('services', 'default', 's0');
    await until(() => seen.includes('add late') && seen.includes('delete s0'));
    await w.stop();
  });

  it('answers a watch from a compacted resourceVersion with 410, and the watcher re-lists', async () => {
    const discovery = kc.makeApiClient(DiscoveryV1Api);
    const slice = (name: string): V1EndpointSlice => ({ metadata: { name, namespace: 'default', labels: { 'kubernetes.io/service-name': 'web' } }, addressType: 'IPv4', endpoints: [] });
    server.store.create('endpointslices', slice('a') as never);
    const w = new Watcher<V1EndpointSlice>('slices', kc, '/apis/discovery.k8s.io/v1/endpointslices', () => discovery.listEndpointSliceForAllNamespaces(), { onChange: () => {}, onError: () => {} });
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
