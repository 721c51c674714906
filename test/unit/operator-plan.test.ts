// The operator's pass, pure: what it writes back and which Events it posts, for new,
// unchanged, failing, released and no-longer-ours Services, and for pools.
import type { V1Service } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { CONDITION_IP_ALLOCATED } from '../../src/ipam/status.js';
import type { PoolObject } from '../../src/ipam/pool-resource.js';
import { plan } from '../../src/operator/plan.js';

const NOW = new Date('2026-12-01T12:00:00Z');
const policy = { handleUnclassed: true };
const pool = (name: string, spec: PoolObject['spec'], status?: PoolObject['status']): PoolObject => ({ metadata: { name, creationTimestamp: '2026-01-01T00:00:00Z' }, spec, ...(status ? { status } : {}) });
const svc = (name: string, o: { spec?: V1Service['spec']; status?: V1Service['status']; annotations?: Record<string, string>; created?: string } = {}): V1Service => ({
  metadata: { name, namespace: 'default', uid: `uid-${name}`, creationTimestamp: (o.created ?? '2026-02-01T00:00:00Z') as never, ...(o.annotations ? { annotations: o.annotations } : {}) },
  spec: { type: 'LoadBalancer', ports: [{ port: 80, protocol: 'TCP' }], ...o.spec },
  ...(o.status ? { status: o.status } : {}),
});
const allocated = (ip: string, message = `${ip} from pool default`): V1Service['status'] => ({
  loadBalancer: { ingress: [{ ip, ipMode: 'VIP' }] },
  conditions: [{ type: CONDITION_IP_ALLOCATED, status: 'True', reason: 'Allocated', message, lastTransitionTime: '2026-11-01T00:00:00Z' as never }],
});
const p24 = pool('default', { blocks: [{ cidr: '10.0.100.0/24' }] });

describe('operator pass', () => {
  it("a Service whose namespace's labels are not in yet waits, unwritten, where a pool selects by them", () => {
    const tenants = pool('tenants', { blocks: [{ cidr: '10.0.101.0/24' }], namespaceSelector: { matchLabels: { tenant: 'yes' } } });
    const waiting = plan([svc('web')], [p24, tenants], policy, NOW);
    expect(waiting).toMatchObject({ serviceWrites: [], events: [] });
    expect(waiting.outcomes.get('default/web')!.reason).toBe('NamespacePending');
    const known = plan([svc('web')], [p24, tenants], policy, NOW, new Map([['default', { tenant: 'yes' }]]));
    expect(known.serviceWrites[0]!.status.loadBalancer).toEqual({ ingress: [{ ip: '10.0.101.1', ipMode: 'VIP' }] });
  });

  it('a new Service: status with ipMode VIP and the condition, and an IPAllocated Event', () => {
    const p = plan([svc('web')], [p24], policy, NOW);
    expect(p.serviceWrites).toHaveLength(1);
    expect(p.serviceWrites[0]!.status.loadBalancer).toEqual({ ingress: [{ ip: '10.0.100.1', ipMode: 'VIP' }] });
    expect(p.serviceWrites[0]!.status.conditions).toEqual([{ type: CONDITION_IP_ALLOCATED, status: 'True', reason: 'Allocated', message: '10.0.100.1 from pool default', lastTransitionTime: '2026-12-01T12:00:00Z' }]);
    expect(p.events).toEqual([{ namespace: 'default', name: 'web', uid: 'uid-web', type: 'Normal', reason: 'IPAllocated', message: '10.0.100.1 from pool default' }]);
  });

  it('a Service that has its address already: nothing to write, no Event (a restarted operator is silent)', () => {
    const p = plan([svc('web', { status: allocated('10.0.100.1') })], [pool('default', { blocks: [{ cidr: '10.0.100.0/24' }] }, { total: 254, used: 1, available: 253 })], policy, NOW);
    expect(p.serviceWrites).toEqual([]);
    expect(p.events).toEqual([]);
  });

  it('a failure: the condition says why, one AllocationFailed Event, and none again while it stays the same', () => {
    const first = plan([svc('web', { annotations: { 'ferry.dev/pool': 'nope' } })], [p24], policy, NOW);
    expect(first.serviceWrites[0]!.status.conditions?.[0]).toMatchObject({ status: 'False', reason: 'NoPool', message: 'pool nope does not exist' });
    expect(first.events.map((e) => [e.type, e.reason, e.message])).toEqual([['Warning', 'AllocationFailed', 'NoPool: pool nope does not exist']]);
    const again = plan([svc('web', { annotations: { 'ferry.dev/pool': 'nope' }, status: first.serviceWrites[0]!.status })], [p24], policy, NOW);
    expect(again.serviceWrites).toEqual([]);
    expect(again.events).toEqual([]);
  });

  it('an address out of every pool: released with a Warning, a new one given', () => {
    const p = plan([svc('web', { status: allocated('10.0.99.7') })], [p24], policy, NOW);
    expect(p.serviceWrites[0]!.status.loadBalancer?.ingress?.[0]?.ip).toBe('10.0.100.1');
    expect(p.events.map((e) => [e.type, e.reason])).toEqual([['Warning', 'IPReleased'], ['Normal', 'IPAllocated']]);
    expect(p.events[0]!.message).toBe('10.0.99.7 released: no pool holds it any more');
  });

  it.each<[string, V1Service['spec']]>([
    ['type changed to ClusterIP', { type: 'ClusterIP' }],
    ['another class', { loadBalancerClass: 'example.com/other' }],
  ])('a Service no longer ours (%s): its address and condition go, with an Event', (_what, spec) => {
    const p = plan([svc('web', { spec, status: allocated('10.0.100.1') })], [p24], policy, NOW);
    expect(p.serviceWrites).toHaveLength(1);
    expect(p.serviceWrites[0]!.status).toEqual({ loadBalancer: {}, conditions: [] });
    expect(p.events[0]).toMatchObject({ reason: 'IPReleased' });
    expect(p.outcomes.has('default/web')).toBe(false);
  });

  it('a Service of another class that was never ours is left alone', () => {
    const foreign = svc('web', { spec: { loadBalancerClass: 'example.com/other' }, status: { loadBalancer: { ingress: [{ ip: '192.0.2.1' }] } } });
    expect(plan([foreign], [p24], policy, NOW)).toMatchObject({ serviceWrites: [], events: [] });
  });

  it('without handleUnclassed only class ferry.dev/lb is served', () => {
    const p = plan([svc('plain'), svc('ours', { spec: { loadBalancerClass: 'ferry.dev/lb' } })], [p24], { handleUnclassed: false }, NOW);
    expect(p.serviceWrites.map((w) => w.key)).toEqual(['default/ours']);
  });

  it('pools: usage and Ready written once, then nothing while it holds', () => {
    const p = plan([svc('web')], [p24], policy, NOW);
    expect(p.poolWrites[0]!.status).toMatchObject({ total: 254, used: 1, available: 253, conditions: [{ type: 'Ready', status: 'True' }, { type: 'Conflict', status: 'False' }] });
    const again = plan([svc('web', { status: p.serviceWrites[0]!.status })], [{ ...p24, status: p.poolWrites[0]!.status }], policy, NOW);
    expect(again.poolWrites).toEqual([]);
  });

  it('a malformed pool (fields of the wrong type) is not Ready and says why; the good pool still serves', () => {
    const bad = pool('bad', { blocks: 'lots' as never, serviceSelector: { matchLabels: { a: 1 as never } } });
    const p = plan([svc('web')], [bad, { ...p24, metadata: { name: 'default', creationTimestamp: '2026-01-02T00:00:00Z' } }], policy, NOW);
    const badStatus = p.poolWrites.find((w) => w.name === 'bad')!.status;
    expect(badStatus.conditions[0]).toMatchObject({ status: 'False', reason: 'InvalidBlocks' });
    expect(badStatus.conditions[0]!.message).toMatch(/no blocks; serviceSelector: matchLabels: must map keys to strings/);
    expect(p.outcomes.get('default/web')).toMatchObject({ reason: 'Allocated', ips: ['10.0.100.1'] });
  });

  it('a hostile request (thousands of addresses in the annotation) gets a short, clear condition', () => {
    const many = Array.from({ length: 5000 }, (_, i) => `10.0.${i >> 8}.${i & 255}`).join(',');
    const p = plan([svc('web', { annotations: { 'ferry.dev/load-balancer-ips': many } })], [p24], policy, NOW);
    expect(p.serviceWrites[0]!.status.conditions?.[0]).toMatchObject({ reason: 'RequestedIPUnavailable', message: '5000 addresses requested: at most 8' });
  });
});
