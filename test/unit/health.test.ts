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

  it('/readyz (ferry\'s own) is 503 until the first sync, while /livez and /healthz answer 200 as kube-proxy\'s do', () => {
    const h = new ProxyHealth(60_000, clock());
    expect(h.readiness()).toEqual({ status: 503, body: '{"ready": false}' });
    expect(h.respond('/livez').status).toBe(200);
    h.updated();
    h.markReady();
    expect(h.readiness()).toEqual({ status: 200, body: '{"ready": true}' });
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

describe('health check node port servers', () => {
  it('with no bind address set, answers on both families (an IPv6 load balancer probes it too)', async () => {
    const { ServiceHealthServers } = await import('../../src/agent/health.js');
    const { get } = await import('node:http');
    const servers = new ServiceHealthServers(new ProxyHealth(60_000), '', () => {});
    const port = 32000 + (process.pid % 700);
    await servers.sync([{ service: 'default/lb', nodePort: port, localReadyEndpoints: 2 }]);
    const ask = (host: string) => new Promise<string>((resolve, reject) => {
      get({ host, port, path: '/' }, (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve(`${res.statusCode} ${JSON.parse(body).localEndpoints}`));
      }).on('error', reject);
    });
    try {
      expect(await ask('127.0.0.1')).toBe('200 2');
      expect(await ask('::1')).toBe('200 2');
    } finally {
      await servers.close();
    }
  });

  it('a slow client does not hold up a sync: the server goes, and its port is free again at once', async () => {
    const { ServiceHealthServers } = await import('../../src/agent/health.js');
    const { createServer, connect } = await import('node:net');
    const servers = new ServiceHealthServers(new ProxyHealth(60_000), '127.0.0.1', () => {});
    const port = 31000 + (process.pid % 1000);
    await servers.sync([{ service: 'default/lb', nodePort: port, localReadyEndpoints: 1 }]);
    // A client that sends half a request and waits.
    const slow = connect(port, '127.0.0.1');
    await new Promise<void>((r) => slow.once('connect', () => r()));
    slow.write('GET / HTTP/1.1\r\nHost: x\r\n');
    const closed = new Promise<void>((r) => slow.once('close', () => r()));
    slow.on('error', () => {});
    const guard = new Promise<string>((r) => setTimeout(() => r('sync still waiting after 3 s'), 3000).unref());
    expect(await Promise.race([servers.sync([]).then(() => 'done'), guard])).toBe('done');
    await closed;
    const again = createServer();
    await new Promise<void>((resolve, reject) => again.once('error', reject).listen(port, '127.0.0.1', () => resolve()));
    again.close();
  });
});
