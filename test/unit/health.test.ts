// kube-proxy's health semantics and bodies, with an injected clock.
import { describe, expect, it } from 'vitest';
import { ProxyHealth, serviceHealthBody } from '../../src/agent/health.js';

function clock(start = Date.parse('2026-11-30T12:00:00Z')) {
  let now = start;
  return { now: () => new Date(now), advance: (ms: number) => (now += ms) };
}

describe('proxy health (:10256)', () => {
  it('is healthy while starting and when synced; unhealthy when a queued update is late', () => {
    const c = clock();
    const h = new ProxyHealth(60_000, c.now);
    expect(h.respond('/healthz').status).toBe(200);
    h.queuedUpdate();
    c.advance(59_000);
    expect(h.respond('/healthz').status).toBe(200);
    c.advance(2_000);
    expect(h.respond('/healthz').status).toBe(503);
    expect(h.respond('/livez').status).toBe(503);
    h.updated();
    expect(h.respond('/livez').status).toBe(200);
  });

  it('formats bodies as kube-proxy does, with lastUpdated = now when healthy', () => {
    const c = clock();
    const h = new ProxyHealth(60_000, c.now);
    h.updated();
    expect(h.respond('/healthz').body).toBe('{"lastUpdated": "2026-11-30T12:00:00.000000000Z","currentTime": "2026-11-30T12:00:00.000000000Z", "nodeEligible": true}');
    expect(h.respond('/livez').body).toBe('{"lastUpdated": "2026-11-30T12:00:00.000000000Z","currentTime": "2026-11-30T12:00:00.000000000Z"}');
  });

  it('makes /healthz (not /livez) unhealthy for a node being deleted or drained by the autoscaler', () => {
    const h = new ProxyHealth(60_000);
    h.syncNode({ spec: { taints: [{ key: 'ToBeDeletedByClusterAutoscaler' }] } });
    expect(h.respond('/healthz')).toMatchObject({ status: 503 });
    expect(h.respond('/healthz').body).toMatch(/"nodeEligible": false\}$/);
    expect(h.respond('/livez').status).toBe(200);
    h.syncNode({ metadata: { deletionTimestamp: new Date() } });
    expect(h.respond('/healthz').status).toBe(503);
    h.syncNode({});
    expect(h.respond('/healthz').status).toBe(200);
  });
});

describe('service health (healthCheckNodePort)', () => {
  it('is the tab-indented body kube-proxy writes', () => {
    expect(serviceHealthBody('ns', 'svc', 2, true)).toBe('{\n\t"service": {\n\t\t"namespace": "ns",\n\t\t"name": "svc"\n\t},\n\t"localEndpoints": 2,\n\t"serviceProxyHealthy": true\n}');
  });
});
