// The test API server's RBAC: what a ServiceAccount may do through ClusterRoleBindings and
// RoleBindings, subresources, resourceNames, and taking one rule or verb away.
import { describe, expect, it } from 'vitest';
import { RbacPolicy } from '../../src/sandbox/apiserver/rbac.js';

const SA = 'system:serviceaccount:kube-system:agent';
const objects = [
  { kind: 'ClusterRole', metadata: { name: 'read' }, rules: [{ apiGroups: [''], resources: ['services'], verbs: ['list', 'watch'] }, { apiGroups: [''], resources: ['services/status'], verbs: ['patch'] }] },
  { kind: 'ClusterRoleBinding', metadata: { name: 'read' }, roleRef: { kind: 'ClusterRole', name: 'read' }, subjects: [{ kind: 'ServiceAccount', name: 'agent', namespace: 'kube-system' }] },
  { kind: 'Role', metadata: { name: 'lease', namespace: 'kube-system' }, rules: [{ apiGroups: ['coordination.k8s.io'], resources: ['leases'], resourceNames: ['mine'], verbs: ['get', 'update'] }] },
  { kind: 'RoleBinding', metadata: { name: 'lease', namespace: 'kube-system' }, roleRef: { kind: 'Role', name: 'lease' }, subjects: [{ kind: 'ServiceAccount', name: 'agent' }] },
  { kind: 'ClusterRole', metadata: { name: 'events' }, rules: [{ apiGroups: [''], resources: ['events'], verbs: ['create'] }] },
  { kind: 'RoleBinding', metadata: { name: 'events', namespace: 'default' }, roleRef: { kind: 'ClusterRole', name: 'events' }, subjects: [{ kind: 'ServiceAccount', name: 'agent', namespace: 'kube-system' }] },
];
const p = new RbacPolicy(objects);

describe('RBAC of the test API server', () => {
  it('grants cluster-wide through a ClusterRoleBinding, the named verbs and subresources only', () => {
    expect(p.allows(SA, { verb: 'list', group: '', resource: 'services' })).toBe(true);
    expect(p.allows(SA, { verb: 'watch', group: '', resource: 'services', namespace: 'x' })).toBe(true);
    expect(p.allows(SA, { verb: 'get', group: '', resource: 'services', namespace: 'x', name: 'a' })).toBe(false);
    expect(p.allows(SA, { verb: 'patch', group: '', resource: 'services/status', namespace: 'x', name: 'a' })).toBe(true);
    expect(p.allows(SA, { verb: 'patch', group: '', resource: 'services', namespace: 'x', name: 'a' })).toBe(false);
    expect(p.allows(SA, { verb: 'list', group: 'apps', resource: 'services' })).toBe(false);
  });

  it('grants in one namespace through a RoleBinding (to a Role or a ClusterRole), to its subjects only', () => {
    expect(p.allows(SA, { verb: 'get', group: 'coordination.k8s.io', resource: 'leases', namespace: 'kube-system', name: 'mine' })).toBe(true);
    expect(p.allows(SA, { verb: 'get', group: 'coordination.k8s.io', resource: 'leases', namespace: 'kube-system', name: 'theirs' })).toBe(false);
    expect(p.allows(SA, { verb: 'list', group: 'coordination.k8s.io', resource: 'leases', namespace: 'kube-system' })).toBe(false); // resourceNames
    expect(p.allows(SA, { verb: 'get', group: 'coordination.k8s.io', resource: 'leases', namespace: 'default', name: 'mine' })).toBe(false);
    expect(p.allows(SA, { verb: 'create', group: '', resource: 'events', namespace: 'default' })).toBe(true);
    expect(p.allows(SA, { verb: 'create', group: '', resource: 'events', namespace: 'kube-system' })).toBe(false);
    expect(p.allows('system:serviceaccount:default:agent', { verb: 'list', group: '', resource: 'services' })).toBe(false);
    expect(p.allows('admin', { verb: 'list', group: '', resource: 'services' })).toBe(false);
  });

  it('takes a rule, or one verb of it, away', () => {
    const ids = p.rules.map((r) => `${r.role}#${r.index}`);
    expect(ids).toEqual(['ClusterRole/read#0', 'ClusterRole/read#1', 'Role/kube-system/lease#0', 'ClusterRole/events#0']);
    expect(p.withoutRule('ClusterRole/read#0').allows(SA, { verb: 'list', group: '', resource: 'services' })).toBe(false);
    const noWatch = p.withoutRule('ClusterRole/read#0:watch');
    expect(noWatch.allows(SA, { verb: 'list', group: '', resource: 'services' })).toBe(true);
    expect(noWatch.allows(SA, { verb: 'watch', group: '', resource: 'services' })).toBe(false);
    expect(noWatch.label).toBe('without ClusterRole/read#0:watch');
    expect(p.label).toBe('manifests');
    expect(RbacPolicy.forbidden(SA, { verb: 'patch', group: '', resource: 'services/status', namespace: 'x', name: 'a' })).toBe(`services "a" is forbidden: User "${SA}" cannot patch resource "services" subresource "status" in API group "" in the namespace "x"`);
  });
});

describe('the secure listener', () => {
  it('serves TLS with the sandbox CA, 401 without a known token, 403 for what the manifests do not grant', async () => {
    const { mkdtempSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const https = await import('node:https');
    const { ClusterIdentity, AGENT_USER, OPERATOR_USER } = await import('../../src/sandbox/cluster-identity.js');
    const { TestApiServer } = await import('../../src/sandbox/apiserver/server.js');
    const id = await ClusterIdentity.create(mkdtempSync(join(tmpdir(), 'ferry-id-')), '127.0.0.1', 6443); // the port only goes into the manifests
    const api = new TestApiServer({ host: '127.0.0.1', secure: { key: id.key, cert: id.cert, userOf: (t) => id.userOf(t), policy: () => id.policy } });
    await api.start();
    const get = (path: string, token?: string, ca: string | undefined = id.ca) => new Promise<number>((resolve, reject) => {
      https.get(`${api.url}${path}`, { ca, headers: token ? { authorization: `Bearer ${token}` } : {} }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      }).on('error', reject);
    });
    try {
      expect(api.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
      expect(await get('/api/v1/services', id.tokenOf(AGENT_USER))).toBe(200);
      expect(await get('/api/v1/secrets', id.tokenOf(AGENT_USER))).toBe(403);
      expect(await get('/api/v1/nodes', id.tokenOf(OPERATOR_USER))).toBe(403);
      expect(await get('/api/v1/services')).toBe(401);
      expect(await get('/api/v1/services', 'not-a-token')).toBe(401);
      await expect(get('/api/v1/services', id.tokenOf(AGENT_USER), 'not a CA')).rejects.toThrow();
      expect(api.access.map((a) => [a.user, a.resource, a.allowed])).toEqual([[AGENT_USER, 'services', true], [AGENT_USER, 'secrets', false], [OPERATOR_USER, 'nodes', false]]);
    } finally {
      await api.stop();
    }
  });

  // A client that connected but has not finished its TLS handshake is not among the
  // connections closeAllConnections() ends: stop() must not wait out the handshake timeout.
  it('stops at once while a client is still in its TLS handshake', async () => {
    const { mkdtempSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const net = await import('node:net');
    const { ClusterIdentity } = await import('../../src/sandbox/cluster-identity.js');
    const { TestApiServer } = await import('../../src/sandbox/apiserver/server.js');
    const id = await ClusterIdentity.create(mkdtempSync(join(tmpdir(), 'ferry-id-')), '127.0.0.1', 6443);
    const api = new TestApiServer({ host: '127.0.0.1', secure: { key: id.key, cert: id.cert, userOf: (t) => id.userOf(t), policy: () => id.policy } });
    await api.start();
    const port = Number(new URL(api.url).port);
    const silent = net.connect(port, '127.0.0.1');
    await new Promise<void>((resolve, reject) => silent.once('connect', resolve).once('error', reject));
    const ended = new Promise<void>((resolve) => silent.once('close', () => resolve()));
    await api.stop(); // before the fix this waited for the 120 s handshake timeout, past the test's
    await ended;
    expect(api.listening).toBe(false);
  }, 10_000);
});
