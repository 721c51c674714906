// kube-proxy's health semantics and bodies, with an injected clock.
import { describe, expect, it } from 'vitest';
import { ProxyHealth, serviceHealthBody } from '../../src/agent/health.js';
import { ManualClock } from '../harness/manual-clock.js';

const clock = () => new ManualClock(Date.parse('2026-11-30T12:00:00Z'));

describe('proxy health (:10256)', () => {
  it('is healthy while starting and when synced; unhealthy when a queued update is late', async () => {
    const c = clock();
    const h = new ProxyHealth(60_000, c);
    expect(h.respond('/healthz').status).toBe(200);
    h.queuedUpdate();
    await c.advance(59_000);
    expect(h.respond('/healthz').status).toBe(200);
    await c.advance(2_000);
    expect(h.respond('/healthz').status).toBe(503);
    expect(h.respond('/livez').status).toBe(503);
    h.updated();
    expect(h.respond('/livez').status).toBe(200);
  });

  it('formats bodies as kube-proxy does, with lastUpdated = now when healthy', () => {
    const c = clock();
    const h = new ProxyHealth(60_000, c);
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
