// Table tests for the model: every rule of kube-proxy-semantics.md that the model owns.
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { desiredState, nodeView } from '../../src/model/desired.js';
import { clusterEndpoints, localEndpoints, mergeSlices, type Endpoint } from '../../src/model/endpoints.js';
import { serviceFrontends, skipReason } from '../../src/model/service.js';
import type { FrontendSpec } from '../../src/model/frontend.js';

const NODE = { name: 'node-1', zone: 'a', addresses: ['10.0.30.21'] };

function svc(o: { name?: string; type?: string; clusterIP?: string; clusterIPs?: string[]; ipFamilies?: string[]; ports?: object[]; labels?: Record<string, string>; spec?: object; status?: object } = {}): V1Service {
  return {
    metadata: { name: o.name ?? 'web', namespace: 'default', labels: o.labels },
    spec: {
      type: o.type ?? 'ClusterIP',
      clusterIP: o.clusterIP ?? '10.96.0.10',
      clusterIPs: o.clusterIPs,
      ipFamilies: o.ipFamilies,
      ports: (o.ports ?? [{ name: 'http', port: 80, protocol: 'TCP' }]) as never,
      ...o.spec,
    },
    status: o.status,
  } as V1Service;
}

type Ep = { ip: string; node?: string; ready?: boolean; serving?: boolean; terminating?: boolean; zones?: string[]; addresses?: string[] };
function slice(o: { name?: string; svc?: string; ports?: object[]; eps: Ep[]; addressType?: string; labels?: Record<string, string> }): V1EndpointSlice {
  return {
    metadata: { name: o.name ?? 'web-abc', namespace: 'default', labels: { 'kubernetes.io/service-name': o.svc ?? 'web', ...o.labels } },
    addressType: o.addressType ?? 'IPv4',
    ports: (o.ports ?? [{ name: 'http', port: 8080, protocol: 'TCP' }]) as never,
    endpoints: o.eps.map((e) => ({
      addresses: e.addresses ?? [e.ip],
      nodeName: e.node,
      conditions: { ready: e.ready, serving: e.serving, terminating: e.terminating },
      hints: e.zones ? { forZones: e.zones.map((z) => ({ name: z })) } : undefined,
    })),
  } as V1EndpointSlice;
}

const summary = (fs: FrontendSpec[]) => fs.map((f) => `${f.kind} ${f.address}:${f.port}/${f.proto} → ${f.backends.map((b) => `${b.address}:${b.port}${b.local ? 'L' : ''}${b.terminating ? 'T' : ''}`).join(',') || '∅'}`);

describe('which Services are programmed', () => {
  it.each([
    ['service-proxy-name label', svc({ labels: { 'service.kubernetes.io/service-proxy-name': 'other' } }), 'service-proxy-name'],
    ['headless label', svc({ labels: { 'service.kubernetes.io/headless': '' } }), 'headless'],
    ['clusterIP None', svc({ clusterIP: 'None' }), 'no-cluster-ip'],
    ['ExternalName', svc({ type: 'ExternalName', clusterIP: '' }), 'external-name'],
    ['IPv6-only', svc({ clusterIP: 'fd00::10', clusterIPs: ['fd00::10'], ipFamilies: ['IPv6'] }), undefined],
    ['an IPv6 address paired with IPv4', svc({ clusterIP: 'fd00::10', clusterIPs: ['fd00::10'], ipFamilies: ['IPv4'] }), 'no-cluster-ip'],
    ['plain ClusterIP', svc(), undefined],
  ])('%s', (_, s, reason) => {
    expect(skipReason(s)).toBe(reason);
  });

  it('a dual-stack Service: one pass per family, clusterIPs paired with ipFamilies, each over its own slices', () => {
    const s = svc({ type: 'NodePort', clusterIP: 'fd00::10', clusterIPs: ['fd00::10', '10.96.0.10'], ipFamilies: ['IPv6', 'IPv4'], ports: [{ name: 'http', port: 80, nodePort: 30080 }] });
    const slices = [slice({ eps: [{ ip: '10.244.1.5', node: 'node-1' }] }), slice({ name: 'web-v6', addressType: 'IPv6', eps: [{ ip: 'fd00:244::5', node: 'node-2' }] })];
    const r = serviceFrontends(s, slices, NODE);
    expect(summary(r.frontends)).toEqual([
      'ClusterIP 10.96.0.10:80/TCP → 10.244.1.5:8080L',
      'NodePort 10.0.30.21:30080/TCP → 10.244.1.5:8080L',
      'NodePort 0.0.0.0:30080/TCP → 10.244.1.5:8080L',
      'ClusterIP fd00::10:80/TCP → fd00:244::5:8080',
    ]);
    // This node has no IPv6 address: no IPv6 NodePort, and nothing to report.
    expect(r.ignored ?? []).toEqual([]);
  });

  it('IPv6 NodePorts, LB IPs and externalIPs: on this node\'s IPv6 addresses, ETP=Local: this node\'s endpoints from outside, the cluster\'s from inside', () => {
    const node6 = { ...NODE, addresses6: ['fd00:30::21'], clusterNodeAddresses: new Set(['10.0.30.21', 'fd00:30::21', 'fd00:30::22']) };
    const s = svc({
      type: 'LoadBalancer', clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10', 'fd00::10'], ipFamilies: ['IPv4', 'IPv6'],
      ports: [{ name: 'http', port: 80, nodePort: 30080 }],
      spec: { externalTrafficPolicy: 'Local', internalTrafficPolicy: 'Local', externalIPs: ['fd00:e::1', '192.0.2.9'] },
      status: { loadBalancer: { ingress: [{ ip: 'fd00:100::1' }, { ip: 'fd00:30::22' }, { ip: 'fd00:100::2', ipMode: 'Proxy' }, { ip: '192.0.2.1' }] } },
    });
    const slices = [slice({ name: 'web-v6', addressType: 'IPv6', eps: [{ ip: 'fd00:244::5', node: 'node-2' }, { ip: 'fd00:244::6', node: 'node-2', ready: false, serving: true, terminating: true }] })];
    const r = serviceFrontends(s, slices, node6);
    expect(summary(r.frontends.filter((f) => f.address.includes(':')))).toEqual([
      'ClusterIP fd00::10:80/TCP → ∅', // ITP=Local: no endpoint here
      // ETP=Local, and the endpoint is on node-2: none from outside here (tc drops) ...
      'NodePort fd00:30::21:30080/TCP → ∅',
      'LoadBalancer fd00:100::1:80/TCP → ∅',
      'LoadBalancer fd00:30::22:80/TCP → ∅',
      'ExternalIP fd00:e::1:80/TCP → ∅',
    ]);
    const v6 = r.frontends.filter((f) => f.address.includes(':'));
    // ... while this node's pods and host reach them through the cluster endpoints.
    expect(v6.map((f) => f.internalBackends?.map((b) => b.address))).toEqual([undefined, ...Array(4).fill(['fd00:244::5'])]);
    expect(v6.map((f) => f.dropWhenEmpty)).toEqual([true, true, true, true, true]);
    expect(r.noLocalEndpoints).toEqual(['internal', 'external', 'internal', 'external']); // per family
    // Draining (never chosen, kept for the sockets they have): as IPv4's, whatever the node.
    expect(v6.slice(1).map((f) => f.drainingBackends?.map((b) => b.address))).toEqual(Array(4).fill(['fd00:244::6']));
    // A node's address as an LB IP keeps the node's other ports; it is reported, as IPv4's.
    expect(v6.map((f) => f.serviceOnlyAddress)).toEqual([undefined, undefined, undefined, false, undefined]);
    expect(r.nodeAddresses).toEqual([{ address: 'fd00:30::22', kind: 'LoadBalancer' }]);
    expect(r.ignored).toEqual(['LoadBalancer ingress fd00:100::2 with ipMode Proxy']);
  });

  it('IPv6 with ETP=Cluster: one backend list for outside and inside, no internal entry', () => {
    const node6 = { ...NODE, addresses6: ['fd00:30::21'] };
    const s = svc({ type: 'NodePort', clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10', 'fd00::10'], ipFamilies: ['IPv4', 'IPv6'], ports: [{ name: 'http', port: 80, nodePort: 30080 }] });
    const slices = [slice({ name: 'web-v6', addressType: 'IPv6', eps: [{ ip: 'fd00:244::5', node: 'node-2' }, { ip: 'fd00:244::7', node: NODE.name }] })];
    const np = serviceFrontends(s, slices, node6).frontends.find((f) => f.kind === 'NodePort' && f.address.includes(':'))!;
    expect(np.backends.map((b) => [b.address, b.local])).toEqual([['fd00:244::5', false], ['fd00:244::7', true]]);
    expect(np.internalBackends).toBeUndefined();
    expect(np.dropWhenEmpty).toBe(false);
  });

  it('IPv6 LB IPs take the IPv6 loadBalancerSourceRanges alone (trimmed; a node address in one lets the LB IP itself in); no IPv6 family, no IPv6 LB IP', () => {
    const lb = (ranges: string[], families = ['IPv4', 'IPv6']) => svc({
      type: 'LoadBalancer', clusterIPs: ['10.96.0.10', 'fd00::10'].slice(0, families.length), ipFamilies: families,
      ports: [{ name: 'http', port: 80, nodePort: 30080 }], spec: { loadBalancerSourceRanges: ranges },
      status: { loadBalancer: { ingress: [{ ip: 'fd00:100::1' }, { ip: '10.0.100.1' }] } },
    });
    const byKind = (s: V1Service, node: typeof NODE & { addresses6?: string[] } = NODE) => serviceFrontends(s, [], node).frontends.filter((f) => f.kind === 'LoadBalancer');
    // IPv4 ranges alone: the IPv6 LB IP is open, the IPv4 one ranged.
    expect(byKind(lb(['10.1.0.0/16'])).map((f) => [f.address, f.sourceRanges])).toEqual([['10.0.100.1', ['10.1.0.0/16']], ['fd00:100::1', undefined]]);
    const both = byKind(lb(['10.1.0.0/16', ' fd00:1::/64']));
    expect(both.map((f) => [f.address, f.sourceRanges])).toEqual([['10.0.100.1', ['10.1.0.0/16']], ['fd00:100::1', ['fd00:1::/64']]]);
    expect(serviceFrontends(lb(['fd00:1::/64']), [], NODE).ignored).toEqual([]);
    // This node's IPv6 address in a range: the LB IP as source is allowed too.
    const inRange = byKind(lb(['fd00:30::/64']), { ...NODE, addresses6: ['fd00:30::21'] });
    expect(inRange.find((f) => f.address === 'fd00:100::1')?.sourceRanges).toEqual(['fd00:30::/64', 'fd00:100::1/128']);
    // Only LB IPs are ranged: the IPv6 NodePort stays open.
    expect(serviceFrontends(lb(['fd00:1::/64']), [], { ...NODE, addresses6: ['fd00:30::21'] }).frontends.filter((f) => f.kind === 'NodePort' && f.address.includes(':')).map((f) => f.sourceRanges)).toEqual([undefined]);
    expect(serviceFrontends(lb([], ['IPv4']), [], NODE).ignored).toEqual(['IPv6 LoadBalancer ingress fd00:100::1 (the Service has no IPv6 ClusterIP)']);
  });

  it('the health check node port counts the local Ready endpoints of either family (an IPv6-only Service has one too)', () => {
    const lb6 = (families: string[]) => svc({
      type: 'LoadBalancer', clusterIPs: families.map((f) => (f === 'IPv4' ? '10.96.0.10' : 'fd00::10')), ipFamilies: families,
      ports: [{ name: 'http', port: 80, nodePort: 30080 }], spec: { externalTrafficPolicy: 'Local', healthCheckNodePort: 32000 },
    });
    const v6 = slice({ name: 'web-v6', addressType: 'IPv6', eps: [{ ip: 'fd00:244::5', node: 'node-1' }, { ip: 'fd00:244::6', node: 'node-2' }, { ip: 'fd00:244::7', node: 'node-1', ready: false, serving: true, terminating: true }] });
    const v4 = slice({ eps: [{ ip: '10.244.2.5', node: 'node-2' }] });
    expect(serviceFrontends(lb6(['IPv6']), [v6], NODE).health).toEqual({ nodePort: 32000, localReadyEndpoints: 1 });
    expect(serviceFrontends(lb6(['IPv4', 'IPv6']), [v4, v6], NODE).health).toEqual({ nodePort: 32000, localReadyEndpoints: 1 });
    expect(serviceFrontends(lb6(['IPv4', 'IPv6']), [v4], NODE).health).toEqual({ nodePort: 32000, localReadyEndpoints: 0 });
  });

  it('the node view: NodePort addresses of each family, every node\'s in the cluster set', () => {
    const node = (name: string, addrs: string[]) => ({ metadata: { name }, status: { addresses: addrs.map((address) => ({ type: 'InternalIP', address })) } });
    const v = nodeView(node('node-1', ['10.0.30.21', 'fd00:30::21', 'fe80::1%eth0']), ['10.0.40.1', 'fd00:40::1'], [node('node-2', ['10.0.30.22', 'fd00:30::22'])]);
    expect([v.addresses, v.addresses6]).toEqual([['10.0.30.21', '10.0.40.1'], ['fd00:30::21', 'fd00:40::1']]);
    expect([...v.clusterNodeAddresses!].sort()).toEqual(['10.0.30.21', '10.0.30.22', '10.0.40.1', 'fd00:30::21', 'fd00:30::22', 'fd00:40::1']);
  });

  it('an IPv6-only Service: ClusterIP frontends with ITP, affinity and the drop-when-empty rule; IPv4 endpoints in an IPv6 slice left out', () => {
    const s = svc({ clusterIP: 'fd00::20', clusterIPs: ['fd00::20'], ipFamilies: ['IPv6'], ports: [{ name: 'dns', port: 53, protocol: 'UDP' }, { name: 'x', port: 9, protocol: 'SCTP' }], spec: { internalTrafficPolicy: 'Local', sessionAffinity: 'ClientIP' }, status: { loadBalancer: { ingress: [{ ip: 'fd00:100::1' }] } } });
    const eps = [{ ip: 'fd00:244::7', node: 'node-2' }, { ip: '10.244.1.9', node: 'node-1' }];
    const r = serviceFrontends(s, [slice({ addressType: 'IPv6', ports: [{ name: 'dns', port: 5353, protocol: 'UDP' }], eps })], NODE);
    expect(summary(r.frontends)).toEqual(['ClusterIP fd00::20:53/UDP → ∅']);
    expect(r.frontends[0]).toMatchObject({ dropWhenEmpty: true, affinityTimeout: 10800, service: 'default/web:dns' });
    expect(r.noLocalEndpoints).toEqual(['internal']);
    expect(r.ignored).toEqual(['port 9/SCTP (SCTP is not supported)']);
    // The same endpoint on this node: it serves; a terminating one that still serves drains.
    const local = serviceFrontends(s, [slice({ addressType: 'IPv6', ports: [{ name: 'dns', port: 5353, protocol: 'UDP' }], eps: [{ ip: 'fd00:244::7', node: 'node-1' }, { ip: 'fd00:244::8', node: 'node-1', ready: false, serving: true, terminating: true }] })], NODE);
    expect(summary(local.frontends)).toEqual(['ClusterIP fd00::20:53/UDP → fd00:244::7:5353L']);
    expect(local.frontends[0]!.drainingBackends?.map((b) => b.address)).toEqual(['fd00:244::8']);
  });

  it('ignores slices of other families, FQDN, and slices with the proxy-name or headless label', () => {
    const slices = [
      slice({ eps: [{ ip: '10.244.1.5', node: 'node-1' }] }),
      slice({ name: 'v6', addressType: 'IPv6', eps: [{ ip: 'fd00::5' }] }),
      slice({ name: 'fqdn', addressType: 'FQDN', eps: [{ ip: 'example.com' }] }),
      slice({ name: 'other', labels: { 'service.kubernetes.io/service-proxy-name': 'x' }, eps: [{ ip: '10.244.1.6' }] }),
    ];
    expect(summary(desiredState([svc()], slices, NODE).frontends)).toEqual(['ClusterIP 10.96.0.10:80/TCP → 10.244.1.5:8080L']);
  });
});

describe('endpoints', () => {
  it('merges slices, uses addresses[0] only, deduplicates with the non-terminating copy winning', () => {
    const m = mergeSlices([
      slice({ name: 'a', eps: [{ ip: '10.244.1.5', terminating: true, ready: false }, { ip: '10.244.1.6', addresses: ['10.244.1.6', '10.244.9.9'] }] }),
      slice({ name: 'b', eps: [{ ip: '10.244.1.5' }] }),
    ]);
    expect(m.get('http/TCP')!.map((e) => [e.ip, e.terminating])).toEqual([['10.244.1.5', false], ['10.244.1.6', false]]);
  });

  it('reads nil ready/serving as true and nil terminating as false', () => {
    const [e] = mergeSlices([slice({ eps: [{ ip: '10.244.1.5' }] })]).get('http/TCP')!;
    expect(e).toMatchObject({ ready: true, serving: true, terminating: false });
  });

  it('ignores slice ports without a number, and keys ports by name and protocol', () => {
    const m = mergeSlices([slice({ ports: [{ name: 'dns', port: 5353, protocol: 'UDP' }, { name: 'dns', port: 5353, protocol: 'TCP' }, { name: 'none', protocol: 'TCP' }], eps: [{ ip: '10.244.1.5' }] })]);
    expect([...m.keys()].sort()).toEqual(['dns/TCP', 'dns/UDP']);
  });

  const ep = (o: Partial<Endpoint>): Endpoint => ({ ip: '10.244.1.1', port: 80, ready: true, serving: true, terminating: false, nodeName: 'node-1', zone: undefined, hintZones: undefined, hintNodes: undefined, ...o });

  it.each([
    ['Ready endpoints', [ep({ ip: 'a' }), ep({ ip: 'b', ready: false, terminating: true })], ['a']],
    ['fallback to serving-terminating when none is Ready', [ep({ ip: 'a', ready: false, terminating: true }), ep({ ip: 'b', ready: false, serving: false, terminating: true })], ['a']],
    ['topology hints for this zone', [ep({ ip: 'a', hintZones: ['a'] }), ep({ ip: 'b', hintZones: ['b'] })], ['a']],
    ['hints ignored when one Ready endpoint has none', [ep({ ip: 'a', hintZones: ['a'] }), ep({ ip: 'b' })], ['a', 'b']],
    ['hints ignored when none matches this zone', [ep({ ip: 'a', hintZones: ['c'] }), ep({ ip: 'b', hintZones: ['d'] })], ['a', 'b']],
    ['node hints', [ep({ ip: 'a', hintNodes: ['node-1'] }), ep({ ip: 'b', hintNodes: ['node-2'] })], ['a']],
  ])('cluster endpoints: %s', (_, eps, want) => {
    expect(clusterEndpoints(eps, { name: 'node-1', zone: 'a' }).map((e) => e.ip)).toEqual(want);
  });

  it.each([
    ['Ready on this node', [ep({ ip: 'a' }), ep({ ip: 'b', nodeName: 'node-2' })], ['a']],
    ['local serving-terminating when none is Ready here', [ep({ ip: 'a', ready: false, terminating: true }), ep({ ip: 'b', nodeName: 'node-2' })], ['a']],
    ['none here', [ep({ ip: 'b', nodeName: 'node-2' })], []],
  ])('local endpoints: %s', (_, eps, want) => {
    expect(localEndpoints(eps, { name: 'node-1', zone: 'a' }).map((e) => e.ip)).toEqual(want);
  });
});

describe('frontends and traffic policies', () => {
  const eps = [slice({ eps: [{ ip: '10.244.1.5', node: 'node-1' }, { ip: '10.244.2.5', node: 'node-2' }] })];
  const lb = (spec: object = {}, status: object = { loadBalancer: { ingress: [{ ip: '10.0.100.1' }] } }) =>
    svc({ type: 'LoadBalancer', ports: [{ name: 'http', port: 80, nodePort: 30080 }], spec: { externalIPs: ['10.0.30.200'], ...spec }, status });

  it('programs ClusterIP, NodePort on every node address and 0.0.0.0, LB ingress and externalIPs', () => {
    expect(summary(serviceFrontends(lb(), eps, NODE).frontends)).toEqual([
      'ClusterIP 10.96.0.10:80/TCP → 10.244.1.5:8080L,10.244.2.5:8080',
      'NodePort 10.0.30.21:30080/TCP → 10.244.1.5:8080L,10.244.2.5:8080',
      'NodePort 0.0.0.0:30080/TCP → 10.244.1.5:8080L,10.244.2.5:8080',
      'LoadBalancer 10.0.100.1:80/TCP → 10.244.1.5:8080L,10.244.2.5:8080',
      'ExternalIP 10.0.30.200:80/TCP → 10.244.1.5:8080L,10.244.2.5:8080',
    ]);
  });

  it("a port's frontends that balance over the same endpoints share one backend list (memory at 50k Services)", () => {
    const all = serviceFrontends(lb(), eps, NODE).frontends;
    expect(new Set(all.map((f) => f.backends)).size).toBe(1);
    // ETP=Local: the external frontends share the local list; ClusterIP and their internal view the cluster one.
    const local = serviceFrontends(lb({ externalTrafficPolicy: 'Local' }), eps, NODE).frontends;
    const [cluster, ...external] = local;
    expect(new Set(external.map((f) => f.backends)).size).toBe(1);
    expect(external.every((f) => f.internalBackends === cluster!.backends)).toBe(true);
    expect(external[0]!.backends).not.toBe(cluster!.backends);
  });

  it('externalTrafficPolicy=Local: external frontends get local endpoints only; ClusterIP keeps all', () => {
    const r = serviceFrontends(lb({ externalTrafficPolicy: 'Local', healthCheckNodePort: 32000 }), eps, NODE);
    expect(summary(r.frontends).filter((s) => !s.startsWith('ClusterIP')).every((s) => s.endsWith('→ 10.244.1.5:8080L'))).toBe(true);
    expect(summary(r.frontends)[0]).toBe('ClusterIP 10.96.0.10:80/TCP → 10.244.1.5:8080L,10.244.2.5:8080');
    expect(r.health).toEqual({ nodePort: 32000, localReadyEndpoints: 1 });
  });

  it('externalTrafficPolicy=Local without local endpoints: external frontends have none (traffic is dropped)', () => {
    const r = serviceFrontends(lb({ externalTrafficPolicy: 'Local', healthCheckNodePort: 32000 }), eps, { ...NODE, name: 'node-3' });
    expect(summary(r.frontends).filter((s) => !s.startsWith('ClusterIP')).every((s) => s.endsWith('→ ∅'))).toBe(true);
    expect(r.noLocalEndpoints).toEqual(['external']);
    expect(r.frontends.filter((f) => f.kind !== 'ClusterIP').every((f) => f.dropWhenEmpty)).toBe(true); // dropped, not rejected
    // ...while this node's pods and host reach them through the cluster endpoints.
    expect(r.frontends.filter((f) => f.kind !== 'ClusterIP').every((f) => f.internalBackends?.map((b) => b.address).join() === '10.244.1.5,10.244.2.5')).toBe(true);
    expect(r.health).toEqual({ nodePort: 32000, localReadyEndpoints: 0 });
  });

  it('internalTrafficPolicy=Local: ClusterIP gets local endpoints only', () => {
    const r = serviceFrontends(svc({ spec: { internalTrafficPolicy: 'Local' } }), eps, NODE);
    expect(summary(r.frontends)).toEqual(['ClusterIP 10.96.0.10:80/TCP → 10.244.1.5:8080L']);
    const none = serviceFrontends(svc({ spec: { internalTrafficPolicy: 'Local' } }), eps, { ...NODE, name: 'node-3' });
    expect(summary(none.frontends)).toEqual(['ClusterIP 10.96.0.10:80/TCP → ∅']);
    expect(none.noLocalEndpoints).toEqual(['internal']);
  });

  it('programs only LB ingress with an ip and ipMode unset or VIP', () => {
    const r = serviceFrontends(lb({}, { loadBalancer: { ingress: [{ ip: '10.0.100.1' }, { ip: '10.0.100.2', ipMode: 'VIP' }, { ip: '10.0.100.3', ipMode: 'Proxy' }, { hostname: 'lb.example' }] } }), eps, NODE);
    expect(r.frontends.filter((f) => f.kind === 'LoadBalancer').map((f) => f.address)).toEqual(['10.0.100.1', '10.0.100.2']);
    expect(r.ignored).toEqual(['LoadBalancer ingress 10.0.100.3 with ipMode Proxy']);
  });

  it('applies loadBalancerSourceRanges to LB IPs only, trimmed, with the LB IP itself when a node is in a range', () => {
    const r = serviceFrontends(lb({ loadBalancerSourceRanges: [' 10.0.10.0/24 ', 'fd00::/64'] }), eps, NODE);
    expect(r.frontends.filter((f) => f.sourceRanges).map((f) => [f.kind, f.sourceRanges])).toEqual([['LoadBalancer', ['10.0.10.0/24']]]);
    const withNode = serviceFrontends(lb({ loadBalancerSourceRanges: ['10.0.30.0/24'] }), eps, NODE);
    expect(withNode.frontends.find((f) => f.kind === 'LoadBalancer')!.sourceRanges).toEqual(['10.0.30.0/24', '10.0.100.1/32']);
  });

  it('maps ports by name and protocol: same port number on TCP and UDP', () => {
    const s = svc({ ports: [{ name: 'dns-udp', port: 53, protocol: 'UDP' }, { name: 'dns-tcp', port: 53, protocol: 'TCP' }] });
    const sl = slice({ ports: [{ name: 'dns-udp', port: 5353, protocol: 'UDP' }, { name: 'dns-tcp', port: 5354, protocol: 'TCP' }], eps: [{ ip: '10.244.1.5', node: 'node-1' }] });
    expect(summary(serviceFrontends(s, [sl], NODE).frontends)).toEqual(['ClusterIP 10.96.0.10:53/UDP → 10.244.1.5:5353L', 'ClusterIP 10.96.0.10:53/TCP → 10.244.1.5:5354L']);
  });

  it('keeps terminating endpoints as draining backends while Ready ones take new flows', () => {
    const sl = slice({ eps: [{ ip: '10.244.1.5', node: 'node-1' }, { ip: '10.244.1.6', node: 'node-1', ready: false, terminating: true }] });
    const [f] = serviceFrontends(svc(), [sl], NODE).frontends;
    expect(f!.backends.map((b) => b.address)).toEqual(['10.244.1.5']);
    expect(f!.drainingBackends?.map((b) => [b.address, b.terminating])).toEqual([['10.244.1.6', true]]);
  });

  it('marks serving-terminating fallback endpoints as terminating', () => {
    const sl = slice({ eps: [{ ip: '10.244.1.5', node: 'node-1', ready: false, terminating: true }] });
    expect(summary(serviceFrontends(svc(), [sl], NODE).frontends)).toEqual(['ClusterIP 10.96.0.10:80/TCP → 10.244.1.5:8080LT']);
  });

  it('health counts distinct local Ready endpoint IPs; terminating ones do not count', () => {
    const sl = slice({ eps: [{ ip: '10.244.1.5', node: 'node-1', ready: false, terminating: true }] });
    expect(serviceFrontends(lb({ externalTrafficPolicy: 'Local', healthCheckNodePort: 32000 }), [sl], NODE).health).toEqual({ nodePort: 32000, localReadyEndpoints: 0 });
  });

  it('session affinity ClientIP with the default timeout of 10800 s', () => {
    expect(serviceFrontends(svc({ spec: { sessionAffinity: 'ClientIP' } }), [], NODE).frontends[0]!.affinityTimeout).toBe(10800);
    expect(serviceFrontends(svc({ spec: { sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } } } }), [], NODE).frontends[0]!.affinityTimeout).toBe(60);
  });
});

describe('bad input', () => {
  const good = svc({ name: 'good', clusterIP: '10.96.0.1' });
  it.each([
    ['a bad cluster IP', svc({ name: 'bad', clusterIP: '10.96.0.300' }), /cluster IP "10.96.0.300" is not an IP address/],
    ['an externalIP with a zone', svc({ name: 'bad', spec: { externalIPs: ['fe80::1%eth0'] } }), /externalIP "fe80::1%eth0" is not an IP address/],
    ['port 0', svc({ name: 'bad', ports: [{ port: 0 }] }), /port 0 is not in 1..65535/],
    ['port 70000', svc({ name: 'bad', ports: [{ port: 70000 }] }), /port 70000 is not in 1..65535/],
    ['duplicate ports', svc({ name: 'bad', ports: [{ name: 'a', port: 80 }, { name: 'b', port: 80 }] }), /port 80\/TCP is listed twice/],
    ['10k ports', svc({ name: 'bad', ports: Array.from({ length: 10_000 }, (_, i) => ({ name: `p${i}`, port: 1 + i })) }), /10000 ports/],
    ['an odd name', svc({ name: 'Bad_Name!' }), /is not a DNS label/],
    ['a bad protocol', svc({ name: 'bad', ports: [{ port: 80, protocol: 'ICMP' }] }), /not TCP, UDP or SCTP/],
    ['a bad externalIP', svc({ name: 'bad', spec: { externalIPs: ['nope'] } }), /externalIP "nope"/],
    ['a bad source range', svc({ name: 'bad', spec: { loadBalancerSourceRanges: ['10.0.0.0/33'] } }), /loadBalancerSourceRanges entry "10.0.0.0\/33" is not a CIDR/],
  ])('rejects %s and keeps every other Service', (_, bad, why) => {
    const d = desiredState([bad, good], [], NODE);
    expect(d.rejected).toHaveLength(1);
    expect(d.rejected[0]!.error).toMatch(why);
    expect(summary(d.frontends)).toEqual(['ClusterIP 10.96.0.1:80/TCP → ∅']);
  });

  it('rejects a slice with a bad address and keeps the Service', () => {
    const d = desiredState([svc()], [slice({ name: 'bad', eps: [{ ip: '10.244.1.999' }] }), slice({ name: 'ok', eps: [{ ip: '10.244.1.5', node: 'node-1' }] })], NODE);
    expect(d.rejected.map((r) => [r.kind, r.name])).toEqual([['EndpointSlice', 'bad']]);
    expect(summary(d.frontends)).toEqual(['ClusterIP 10.96.0.10:80/TCP → 10.244.1.5:8080L']);
  });

  it('gives a frontend to the first Service that asks, and reports the conflict', () => {
    const a = svc({ name: 'a', clusterIP: '10.96.0.1', spec: { externalIPs: ['10.0.30.200'] } });
    const b = svc({ name: 'b', clusterIP: '10.96.0.2', spec: { externalIPs: ['10.0.30.200'] } });
    const d = desiredState([b, a], [], NODE);
    expect(d.conflicts).toEqual([{ service: 'default/b', frontend: '10.0.30.200:80/tcp', kind: 'ExternalIP', owner: 'default/a', ownerKind: 'ExternalIP' }]);
  });

  it('a ClusterIP always wins over an externalIP or LoadBalancer IP set to it, whatever the names', () => {
    // "a-hijack" sorts before "web", and claims web's ClusterIP and port as an externalIP.
    const web = svc({ name: 'web', clusterIP: '10.96.0.10' });
    const hijack = svc({ name: 'a-hijack', clusterIP: '10.96.0.11', type: 'LoadBalancer', spec: { externalIPs: ['10.96.0.10'] }, status: { loadBalancer: { ingress: [{ ip: '10.96.0.10' }] } } });
    const slices = [slice({ svc: 'web', eps: [{ ip: '10.244.1.5', node: 'node-1' }] }), slice({ name: 'h', svc: 'a-hijack', eps: [{ ip: '10.244.9.9', node: 'node-1' }] })];
    const d = desiredState([hijack, web], slices, NODE);
    const at = d.frontends.filter((f) => f.address === '10.96.0.10' && f.port === 80);
    expect(at.map((f) => [f.kind, f.service, f.backends[0]?.address])).toEqual([['ClusterIP', 'default/web:http', '10.244.1.5']]);
    expect(d.conflicts.map((c) => [c.service, c.kind, c.owner, c.ownerKind])).toEqual([
      ['default/a-hijack', 'LoadBalancer', 'default/web', 'ClusterIP'],
      ['default/a-hijack', 'ExternalIP', 'default/web', 'ClusterIP'],
    ]);
  });

  it('an LB IP or externalIP that is a node\'s address takes only its own ports there (no wildcard), and is reported', () => {
    const nodes = { ...NODE, clusterNodeAddresses: new Set(['10.0.30.21', '10.0.30.22']) };
    const s = svc({ type: 'LoadBalancer', spec: { externalIPs: ['10.0.30.21'] }, status: { loadBalancer: { ingress: [{ ip: '10.0.30.22' }, { ip: '10.0.100.5' }] } } });
    const d = desiredState([s], [], nodes);
    const lb = d.frontends.filter((f) => f.kind === 'LoadBalancer').map((f) => [f.address, f.serviceOnlyAddress]);
    expect(lb).toEqual([['10.0.30.22', false], ['10.0.100.5', undefined]]);
    expect(d.conflicts.map((c) => [c.frontend, c.kind, c.ownerKind])).toEqual([['10.0.30.22', 'LoadBalancer', 'NodeAddress'], ['10.0.30.21', 'ExternalIP', 'NodeAddress']]);
  });

  it('SCTP ports are not programmed at all, and say so', () => {
    const s = svc({ ports: [{ name: 'sig', port: 3868, protocol: 'SCTP' }, { name: 'http', port: 80, protocol: 'TCP' }] });
    const r = serviceFrontends(s, [], NODE);
    expect(r.frontends.map((f) => `${f.port}/${f.proto}`)).toEqual(['80/TCP']);
    expect(r.ignored).toEqual(['port 3868/SCTP (SCTP is not supported)']);
  });

  it('reads the node: name, zone, addresses of each family (not its hostname)', () => {
    expect(nodeView({ metadata: { name: 'n', labels: { 'topology.kubernetes.io/zone': 'z' } }, status: { addresses: [{ type: 'InternalIP', address: '10.0.30.21' }, { type: 'InternalIP', address: 'fd00::21' }, { type: 'Hostname', address: 'n' }] } }, [], [{ status: { addresses: [{ type: 'InternalIP', address: '10.0.30.22' }] } }])).toEqual({ name: 'n', zone: 'z', addresses: ['10.0.30.21'], addresses6: ['fd00::21'], clusterNodeAddresses: new Set(['10.0.30.21', 'fd00::21', '10.0.30.22']) });
  });
});
