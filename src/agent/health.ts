// kube-proxy's health servers, byte for byte: the proxy health server (:10256 /healthz and
// /livez) and one server per LoadBalancer Service with externalTrafficPolicy=Local on its
// healthCheckNodePort.
import type { Server, ServerResponse } from 'node:http';
import { listen, parseHostPort, type Handler } from '../sys/http-server.js';
import type { AgentMetrics } from './metrics.js';
import { systemClock, type Clock } from '../clock.js';

export const TO_BE_DELETED_TAINT = 'ToBeDeletedByClusterAutoscaler';

/** Go's RFC 3339 with nanoseconds, as kube-proxy formats times. */
function rfc3339(d: Date): string {
  return d.toISOString().replace(/\.(\d{3})Z$/, '.$1000000Z');
}

export class ProxyHealth {
  private lastUpdated: Date | undefined;
  private oldestPendingQueued: Date | undefined;
  /** The first sync is done: the datapath serves what the API says (/readyz). */
  private ready = false;
  private nodeEligible = true;

  constructor(
    private readonly healthTimeoutMs: number,
    private readonly clock: Pick<Clock, 'now'> = systemClock,
  ) {}

  private date(): Date {
    return new Date(this.clock.now());
  }

  /** A change arrived that the datapath does not reflect yet. */
  queuedUpdate(): void {
    this.oldestPendingQueued ??= this.date();
  }

  /** The datapath reflects everything queued so far. */
  updated(): void {
    this.oldestPendingQueued = undefined;
    this.lastUpdated = this.date();
  }

  /** After the first sync: /readyz answers 200 from now on. */
  markReady(): void {
    this.ready = true;
  }

  /**
   * ferry's own /readyz, for the DaemonSet's startup and readiness probes: 503 until the
   * first sync is done (kube-proxy's /healthz and /livez answer 200 while starting, so a
   * liveness probe never kills a long first sync).
   */
  readiness(): { status: number; body: string } {
    return { status: this.ready ? 200 : 503, body: `{"ready": ${this.ready}}` };
  }

  syncNode(node: { metadata?: { deletionTimestamp?: Date | string }; spec?: { taints?: { key: string }[] } }): void {
    this.nodeEligible = !node.metadata?.deletionTimestamp && !(node.spec?.taints ?? []).some((t) => t.key === TO_BE_DELETED_TAINT);
  }

  isHealthy(): boolean {
    return !this.oldestPendingQueued || this.clock.now() - this.oldestPendingQueued.getTime() < this.healthTimeoutMs;
  }

  /** Status and body of /healthz (with node eligibility) or /livez. */
  respond(path: '/healthz' | '/livez'): { status: number; body: string } {
    const now = this.date();
    const eligible = this.nodeEligible;
    let healthy = this.isHealthy();
    if (path === '/healthz') healthy = healthy && eligible;
    // Like kube-proxy, a healthy answer reports "now" as lastUpdated.
    const last = healthy ? now : (this.lastUpdated ?? new Date(0));
    const body = path === '/healthz'
      ? `{"lastUpdated": ${JSON.stringify(rfc3339(last))},"currentTime": ${JSON.stringify(rfc3339(now))}, "nodeEligible": ${eligible}}`
      : `{"lastUpdated": ${JSON.stringify(rfc3339(last))},"currentTime": ${JSON.stringify(rfc3339(now))}}`;
    return { status: healthy ? 200 : 503, body };
  }
}

function writeJson(res: ServerResponse, status: number, body: string, extra: Record<string, string> = {}): void {
  res.writeHead(status, { 'Content-Type': 'application/json', 'X-Content-Type-Options': 'nosniff', ...extra });
  res.end(body);
}

export function serviceHealthBody(namespace: string, name: string, localEndpoints: number, proxyHealthy: boolean): string {
  return `{\n\t"service": {\n\t\t"namespace": ${JSON.stringify(namespace)},\n\t\t"name": ${JSON.stringify(name)}\n\t},\n\t"localEndpoints": ${localEndpoints},\n\t"serviceProxyHealthy": ${proxyHealthy}\n}`;
}

export async function startProxyHealthServer(health: ProxyHealth, addr: string, metrics: AgentMetrics): Promise<Server> {
  const { host, port } = parseHostPort(addr);
  return listen((req, res) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    if (path === '/readyz') {
      const r = health.readiness();
      writeJson(res, r.status, r.body);
      return;
    }
    if (path !== '/healthz' && path !== '/livez') {
      res.writeHead(404).end('404 page not found\n');
      return;
    }
    const r = health.respond(path);
    (path === '/healthz' ? metrics.healthz : metrics.livez).inc({ code: String(r.status) });
    writeJson(res, r.status, r.body);
  }, host, port);
}

interface ServiceHealthEntry {
  namespace: string;
  name: string;
  port: number;
  endpoints: number;
  server: Server;
}

/** A health check node port listens on `host`, or, unset, on every address of both
 * families as kube-proxy's (":port"): an IPv6 load balancer probes it too. A node without
 * IPv6 gets IPv4's alone. */
async function listenNodePort(handler: Handler, host: string, port: number): Promise<Server> {
  if (host) return listen(handler, host, port);
  try {
    return await listen(handler, '::', port); // IPV6_V6ONLY off: IPv4 clients too
  } catch (e) {
    if (!['EAFNOSUPPORT', 'EADDRNOTAVAIL'].includes((e as NodeJS.ErrnoException).code ?? '')) throw e;
    return listen(handler, '0.0.0.0', port);
  }
}

/** One HTTP server per health check node port, opened and closed as Services come and go. */
export class ServiceHealthServers {
  private readonly byService = new Map<string, ServiceHealthEntry>();

  constructor(
    private readonly proxy: ProxyHealth,
    private readonly host: string,
    private readonly onError: (service: string, e: Error) => void,
  ) {}

  /**
   * Open and close servers to match `wanted`. Never waits on a client: a server going away
   * drops its connections at once (a slow client on a health check node port must not hold
   * up a sync of the datapath).
   */
  async sync(wanted: Array<{ service: string; nodePort: number; localReadyEndpoints: number }>): Promise<void> {
    const want = new Map(wanted.map((w) => [w.service, w]));
    for (const [svc, e] of [...this.byService]) {
      const w = want.get(svc);
      if (!w || w.nodePort !== e.port) {
        e.server.close();
        e.server.closeAllConnections();
        this.byService.delete(svc);
      }
    }
    for (const w of wanted) {
      const have = this.byService.get(w.service);
      if (have) {
        have.endpoints = w.localReadyEndpoints;
        continue;
      }
      const [namespace, name] = w.service.split('/') as [string, string];
      const entry = { namespace, name, port: w.nodePort, endpoints: w.localReadyEndpoints } as ServiceHealthEntry;
      try {
        entry.server = await listenNodePort((_req, res) => {
          const healthy = this.proxy.isHealthy();
          const status = entry.endpoints > 0 && healthy ? 200 : 503;
          writeJson(res, status, serviceHealthBody(entry.namespace, entry.name, entry.endpoints, healthy), { 'X-Load-Balancing-Endpoint-Weight': String(entry.endpoints) });
        }, this.host, w.nodePort);
        this.byService.set(w.service, entry);
      } catch (e) {
        this.onError(w.service, e as Error);
      }
    }
  }

  ports(): number[] {
    return [...this.byService.values()].map((e) => e.port);
  }

  async close(): Promise<void> {
    await this.sync([]);
  }
}

