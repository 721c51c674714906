// L2 announcements, pure: policies (read defensively), what is announced and by which
// candidates (ETP Local, shared addresses, excluded nodes, node addresses), and the
// election (one owner per address, the same on every agent, sticky, spread).
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { EXCLUDE_LABEL, announcements } from '../../src/announce/announcements.js';
import { elect, rank } from '../../src/announce/election.js';
import { parseL2Policy, policyDevices } from '../../src/announce/policy.js';

const policy = (spec: Record<string, unknown> = {}, name = 'p') => parseL2Policy({ metadata: { name }, spec });
const node = (name: string, labels: Record<string, string> = {}, ip = `10.0.30.${20 + Number(name.slice(-1))}`): V1Node => ({ metadata: { name, labels: { 'kubernetes.io/hostname': name, ...labels } }, status: { addresses: [{ type: 'InternalIP', address: ip }] } });
const lb = (name: string, ip: string, o: { etp?: 'Local' | 'Cluster'; labels?: Record<string, string>; cls?: string; externalIPs?: string[] } = {}): V1Service => ({
  metadata: { name, namespace: 'default', labels: o.labels },
  spec: { type: 'LoadBalancer', externalTrafficPolicy: o.etp ?? 'Cluster', ...(o.cls ? { loadBalancerClass: o.cls } : {}), ...(o.externalIPs ? { externalIPs: o.externalIPs } : {}), ports: [{ port: 80 }] },
  status: { loadBalancer: { ingress: ip ? [{ ip }] : [] } },
});
const slice = (svc: string, nodes: Array<[string, boolean]>): V1EndpointSlice => ({
  metadata: { name: `${svc}-x`, namespace: 'default', labels: { 'kubernetes.io/service-name': svc } },
  addressType: 'IPv4',
  endpoints: nodes.map(([n, ready], i) => ({ addresses: [`10.244.0.${i + 1}`], nodeName: n, conditions: { ready } })),
});
const NODES = [node('node-1'), node('node-2'), node('node-3')];
const DEVICES = new Map(NODES.map((n) => [n.metadata!.name!, ['eth0', 'eth1']]));
const candidatesOf = (a: ReturnType<typeof announcements>, ip: string) => Object.fromEntries(a.find((x) => x.address === ip)?.candidates ?? []);

describe('L2AnnouncementPolicy', () => {
  it('defaults: every Service, every node, every device, LoadBalancer IPs only', () => {
    expect(policy()).toMatchObject({ interfaces: [], loadBalancerIPs: true, externalIPs: false, errors: [] });
    expect(policyDevices(policy(), {}, ['eth0', 'eth1'])).toEqual(['eth0', 'eth1']);
  });

  it('interfaces are whole-name patterns; the node selector picks nodes', () => {
    const p = policy({ interfaces: ['eth[0-9]+'], nodeSelector: { matchLabels: { l2: 'yes' } } });
    expect(policyDevices(p, { l2: 'yes' }, ['eth0', 'eth10', 'veth0', 'eth0.100'])).toEqual(['eth0', 'eth10']);
    expect(policyDevices(p, {}, ['eth0'])).toEqual([]);
  });

  it.each<[string, Record<string, unknown>, RegExp]>([
    ['a bad pattern', { interfaces: ['eth(0'] }, /interfaces: "eth\(0": Invalid regular expression/],
    ['interfaces not a list', { interfaces: 'eth0' }, /interfaces: a list of at most 32 patterns/],
    ['a pattern too long', { interfaces: ['x'.repeat(200)] }, /at most 128 characters/],
    ['a bad selector', { serviceSelector: { matchExpressions: [{ key: 'a', operator: 'Near' }] } }, /serviceSelector: matchExpressions: operator "Near"/],
  ])('%s: an error, and the policy announces nothing', (_what, spec, re) => {
    const p = policy(spec);
    expect(p.errors.join('; ')).toMatch(re);
    expect(announcements({ services: [lb('web', '10.0.30.200')], slices: [], nodes: NODES, policies: [p], devices: DEVICES })).toEqual([]);
  });
});

describe('what is announced, by whom', () => {
  const all = [policy({ interfaces: ['eth0'] })];

  it('a LoadBalancer address: every selected node with a matching device', () => {
    const a = announcements({ services: [lb('web', '10.0.30.200')], slices: [], nodes: NODES, policies: all, devices: DEVICES });
    expect(a).toEqual([{ address: '10.0.30.200', services: ['default/web'], local: false, candidates: new Map([['node-1', ['eth0']], ['node-2', ['eth0']], ['node-3', ['eth0']]]) }]);
  });

  it('externalTrafficPolicy Local: only nodes with a ready endpoint', () => {
    const a = announcements({ services: [lb('web', '10.0.30.200', { etp: 'Local' })], slices: [slice('web', [['node-2', true], ['node-3', false]])], nodes: NODES, policies: all, devices: DEVICES });
    expect(Object.keys(candidatesOf(a, '10.0.30.200'))).toEqual(['node-2']);
  });

  it('a shared address is one announcement; under Local, the nodes every Service can use', () => {
    const a = announcements({
      services: [lb('dns-tcp', '10.0.30.201', { etp: 'Local' }), lb('dns-udp', '10.0.30.201', { etp: 'Local' })],
      slices: [slice('dns-tcp', [['node-1', true], ['node-2', true]]), slice('dns-udp', [['node-2', true], ['node-3', true]])],
      nodes: NODES, policies: all, devices: DEVICES,
    });
    expect(a).toHaveLength(1);
    expect(a[0]!.services).toEqual(['default/dns-tcp', 'default/dns-udp']);
    expect(Object.keys(candidatesOf(a, '10.0.30.201'))).toEqual(['node-2']);
  });

  it.each<[string, Partial<Parameters<typeof announcements>[0]>, string[]]>([
    ['a node labelled exclude-from-external-load-balancers', { nodes: [node('node-1', { [EXCLUDE_LABEL]: '' }), NODES[1]!] }, ['node-2']],
    ['a node without a heartbeat (no known devices)', { devices: new Map([['node-1', ['eth0']]]) }, ['node-1']],
    ['a node whose devices do not match', { devices: new Map([['node-1', ['eth1']], ['node-2', ['eth0']], ['node-3', ['eth0']]]) }, ['node-2', 'node-3']],
    ['a node the policy does not select', { policies: [policy({ nodeSelector: { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'NotIn', values: ['node-3'] }] } })] }, ['node-1', 'node-2']],
  ])('not a candidate: %s', (_what, o, want) => {
    const a = announcements({ services: [lb('web', '10.0.30.200')], slices: [], nodes: NODES, policies: all, devices: DEVICES, ...o });
    expect(Object.keys(candidatesOf(a, '10.0.30.200')).sort()).toEqual(want);
  });

  it.each<[string, V1Service, Record<string, unknown>]>([
    ['another class\'s address', lb('web', '10.0.30.200', { cls: 'example.com/lb' }), {}],
    ['a node\'s own address', lb('web', '10.0.30.22'), {}],
    ['an IPv6 address', lb('web', 'fd00::1'), {}],
    ['externalIPs unless the policy asks', { ...lb('web', '', { externalIPs: ['10.0.30.210'] }), spec: { type: 'ClusterIP', externalIPs: ['10.0.30.210'] } }, {}],
    ['a Service the policy does not select', lb('web', '10.0.30.200'), { serviceSelector: { matchLabels: { l2: 'yes' } } }],
  ])('nothing announced: %s', (_what, svc, spec) => {
    expect(announcements({ services: [svc], slices: [], nodes: NODES, policies: [policy(spec)], devices: DEVICES })).toEqual([]);
  });

  it('externalIPs when the policy asks for them', () => {
    const svc: V1Service = { metadata: { name: 'ext', namespace: 'default' }, spec: { type: 'ClusterIP', externalIPs: ['10.0.30.210'] } };
    const a = announcements({ services: [svc], slices: [], nodes: NODES, policies: [policy({ externalIPs: true })], devices: DEVICES });
    expect(a.map((x) => x.address)).toEqual(['10.0.30.210']);
  });
});

describe('election', () => {
  const three = ['node-1', 'node-2', 'node-3'];
  const addresses = Array.from({ length: 60 }, (_, i) => `10.0.30.${100 + i}`);
  const candidates = new Map(addresses.map((a) => [a, three]));
  const live = new Set(three);

  it('one owner per address, spread over the nodes, the same whatever the order of the input', () => {
    const owners = elect({ candidates, live, claims: new Map() });
    expect(owners.size).toBe(60);
    const perNode = three.map((n) => [...owners.values()].filter((o) => o === n).length);
    for (const c of perNode) expect(c).toBeGreaterThan(12); // 20 each on average
    // And over many addresses, close to a third each.
    const many = elect({ candidates: new Map(Array.from({ length: 3000 }, (_, i) => [`10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`, three])), live, claims: new Map() });
    for (const n of three) expect([...many.values()].filter((o) => o === n).length / 3000).toBeGreaterThan(0.3);
    const shuffled = elect({ candidates: new Map([...candidates].reverse().map(([a, c]) => [a, [...c].reverse()])), live, claims: new Map() });
    expect(shuffled).toEqual(owners);
  });

  it('a node that goes loses only its own addresses; when it comes back, it takes none back', () => {
    const before = elect({ candidates, live, claims: new Map() });
    const claims = new Map(three.map((n) => [n, new Set([...before].filter(([, o]) => o === n).map(([a]) => a))]));
    const without2 = elect({ candidates, live: new Set(['node-1', 'node-3']), claims });
    for (const [a, o] of before) if (o !== 'node-2') expect(without2.get(a)).toBe(o);
    expect([...without2.values()]).not.toContain('node-2');
    // node-2 is back, claiming nothing (it let go when it lost its heartbeat).
    const claimsAfter = new Map(['node-1', 'node-3'].map((n) => [n, new Set([...without2].filter(([, o]) => o === n).map(([a]) => a))]));
    expect(elect({ candidates, live, claims: claimsAfter })).toEqual(without2);
  });

  it('two live claimers (a race): the better ranked keeps it; no live candidate: no owner', () => {
    const a = '10.0.30.200';
    const both = new Map([['node-1', new Set([a])], ['node-2', new Set([a])]]);
    const winner = rank(a, 'node-1') > rank(a, 'node-2') ? 'node-1' : 'node-2';
    expect(elect({ candidates: new Map([[a, three]]), live, claims: both }).get(a)).toBe(winner);
    expect(elect({ candidates: new Map([[a, three]]), live: new Set(), claims: both }).has(a)).toBe(false);
    // A claim by a node that is no longer a candidate (ETP Local, its pod gone) counts for nothing.
    expect(elect({ candidates: new Map([[a, ['node-3']]]), live, claims: both }).get(a)).toBe('node-3');
  });
});
