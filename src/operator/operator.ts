// `ferry operator`: LB-IPAM for the cluster. Every replica watches Services, pools and
// namespaces (their labels, for pools' namespaceSelectors), so a new leader starts with a
// warm cache; only the holder of the Lease allocates. A pass is
// the whole decision recomputed (plan.ts), debounced after changes and repeated every
// resync period; only what changes is written, at most statusWriteConcurrency at a time.
// Addresses are sticky (read back from the Services' status), so a restart or a failover
// changes none.
import type { Server } from 'node:http';
import type { KubernetesObject, V1Namespace, V1Service } from '@kubernetes/client-node';
import { pino, type Logger } from 'pino';
import { systemClock, type Clock, type Timer } from '../clock.js';
import { POOL_PATH, type PoolObject } from '../ipam/pool-resource.js';
import { serviceKey } from '../ipam/service-request.js';
import { JsonClient } from '../k8s/client.js';
import { kubeConfig, kubeConfigAccess } from '../k8s/kubeconfig-client.js';
import { leanNamespace } from '../k8s/lean.js';
import { EventQueue, eventSink } from '../k8s/events.js';
import { LeaderElector, leaseApi } from '../k8s/leader.js';
import { Watcher } from '../k8s/watcher.js';
import { closeServer, serveRoutes } from '../sys/http-server.js';
import type { OperatorConfig } from './config.js';
import { OperatorMetrics } from './metrics.js';
import { AnnouncementStatus } from './announcement-status.js';
import { concernsIpam, plan, type Plan, type PlannedEvent } from './plan.js';
import { WriteQueue, type WriteResult } from './write-queue.js';

/**
 * V8 flags the operator runs with (the Deployment's command line; the sandbox and the
 * benchmark start it the same way): a small young generation and slow heap growth keep
 * a controller whose heap is a watch cache, replaced object by object, near its live size.
 */
export const OPERATOR_NODE_FLAGS = ['--max-semi-space-size=2', '--heap-growing-percent=20'];

export function operatorLogger(level: string): Logger {
  return pino({ level, base: { component: 'ferry-operator' } });
}

/** A pass runs this long after the change that asked for it (changes come in bursts). */
const DEBOUNCE_MS = 20;
/** And no sooner than this after the previous pass. */
const MIN_INTERVAL_MS = 200;
/** Retry after a failed or conflicting write (the watch usually brings the news first). */
const RETRY_MS = 1_000;
const EVENT_QUEUE_MAX = 1_000;
const EVENT_CONCURRENCY = 4;

type Pool = PoolObject & KubernetesObject;

/**
 * The part of a Service's status LB-IPAM owns, as a merge patch: its ingress list (null
 * removes it) and the conditions (ours among the others, the whole list: a merge patch
 * replaces lists). Other status fields are left as they are.
 */
export function serviceStatusPatch(svc: V1Service): object {
  const ingress = svc.status?.loadBalancer?.ingress ?? [];
  return { loadBalancer: { ingress: ingress.length ? ingress : null }, conditions: svc.status?.conditions ?? [] };
}

export interface OperatorStatus {
  identity: string;
  leader: boolean;
  synced: boolean;
  lastPass: string | undefined;
  services: Record<string, number>;
  pools: Array<{ name: string; total: number; used: number; available: number; errors: string[]; conflictWith?: string }>;
  pendingWrites: number;
}

export class Operator {
  private leading = false;
  private stopping = false;
  private timer: Timer | undefined;
  private resyncTimer: Timer | undefined;
  private lastPassAt = 0;
  private passes = 0;
  /** What the last pass decided (the writes themselves are the queues'). */
  private lastPlan: Pick<Plan, 'outcomes' | 'pools'> | undefined;
  private readonly servers: Server[] = [];
  private readonly serviceWrites: WriteQueue<V1Service>;
  private readonly poolWrites: WriteQueue<Pool>;
  private readonly events: EventQueue;
  private readonly services: Watcher<V1Service>;
  private readonly pools: Watcher<Pool>;
  private readonly namespaces: Watcher<V1Namespace>;
  /** Every cache a pass needs complete. */
  private readonly caches: ReadonlyArray<Watcher<V1Service> | Watcher<Pool> | Watcher<V1Namespace>>;
  private readonly elector: LeaderElector;
  /** Status on the announcement objects (the agents' L2 and BGP configuration). */
  readonly announcementStatus: AnnouncementStatus;
  readonly metrics = new OperatorMetrics();

  private constructor(readonly cfg: OperatorConfig, readonly log: Logger, private readonly clock: Clock) {
    const kc = kubeConfig(cfg.kubeconfig);
    const written = (kind: string) => (key: string, result: WriteResult, err?: unknown) => {
      this.metrics.statusWrites.inc({ kind, result: result === 'superseded' ? 'written' : result });
      if (result === 'written' || result === 'gone') return;
      if (result === 'superseded') {
        this.kick();
        return;
      }
      const level = result === 'conflict' ? 'debug' : 'warn';
      this.log[level]({ [kind]: key, result, err: (err as Error)?.message }, 'status write did not land; retrying after the watch catches up');
      this.kick(RETRY_MS);
    };
    // Status writes are merge patches of the status subresource, conditional on the
    // resourceVersion the decision was made on (a 409 sends the Service round again).
    const access = kubeConfigAccess(kc, 'ferry-operator');
    const json = new JsonClient(access);
    const patchStatus = <T extends { metadata?: { resourceVersion?: string } }>(path: string, obj: T, status: object) =>
      json.request<T>('PATCH', `${path}/status`, { metadata: { resourceVersion: obj.metadata?.resourceVersion }, status }, 'application/merge-patch+json');
    this.serviceWrites = new WriteQueue<V1Service>({
      concurrency: cfg.statusWriteConcurrency,
      write: (svc) => patchStatus(`/api/v1/namespaces/${encodeURIComponent(svc.metadata!.namespace!)}/services/${encodeURIComponent(svc.metadata!.name!)}`, svc, serviceStatusPatch(svc)),
      onResult: written('service'),
      onIdle: () => this.events.resume(),
      now: () => clock.now(),
    });
    this.poolWrites = new WriteQueue<Pool>({
      concurrency: 4,
      write: (pool) => patchStatus(`${POOL_PATH}/${encodeURIComponent(pool.metadata!.name!)}`, pool, pool.status ?? {}),
      onResult: written('pool'),
      now: () => clock.now(),
    });
    this.events = new EventQueue(eventSink(access, 'ferry-operator', cfg.identity), {
      max: EVENT_QUEUE_MAX,
      concurrency: EVENT_CONCURRENCY,
      // Addresses first: Events wait while status writes are under way.
      holdWhile: () => this.serviceWrites.size > 0,
      onDropped: () => this.metrics.eventsDropped.inc(),
      onError: (e) => {
        this.metrics.eventErrors.inc();
        this.log.debug({ err: (e as Error).message }, 'cannot post an Event');
      },
    });
    const onError = (what: string) => (err: unknown, retryInMs: number) =>
      this.log.warn({ watch: what, err: (err as Error)?.message ?? String(err), retryInMs, ...(what === 'loadbalancerippools' ? { hint: 'is the LoadBalancerIPPool CRD installed? kubectl apply -f deploy/crds/' } : {}) }, 'watch failed');
    this.services = new Watcher<V1Service>('services', json, '/api/v1/services', {
      onChange: (kind, svc) => this.serviceChanged(kind, svc),
      onError: onError('services'),
    });
    this.pools = new Watcher<Pool>('loadbalancerippools', json, POOL_PATH, {
      onChange: (kind, pool) => this.poolChanged(kind, pool),
      onError: onError('loadbalancerippools'),
    });
    // Few and seldom changed: any change asks for a pass.
    this.namespaces = new Watcher<V1Namespace>('namespaces', json, '/api/v1/namespaces', {
      onChange: () => this.kick(),
      onError: onError('namespaces'),
    }, { transform: leanNamespace });
    this.caches = [this.services, this.pools, this.namespaces];
    this.announcementStatus = new AnnouncementStatus({ json, log, clock, metrics: this.metrics, leading: () => this.leading });
    this.elector = new LeaderElector(leaseApi(kc), {
      namespace: cfg.namespace,
      name: cfg.leaseName,
      identity: cfg.identity,
      leaseDurationSeconds: cfg.leaseDurationSeconds,
      renewDeadlineSeconds: cfg.renewDeadlineSeconds,
      retryPeriodSeconds: cfg.retryPeriodSeconds,
      clock,
      onStartedLeading: () => {
        this.leading = true;
        this.metrics.leader.set(1);
        this.log.info({ identity: cfg.identity, lease: `${cfg.namespace}/${cfg.leaseName}` }, 'became leader; allocating');
        void this.synced.then(() => this.kick(0));
        this.announcementStatus.kick(0);
      },
      onStoppedLeading: () => {
        this.leading = false;
        this.metrics.leader.set(0);
        this.serviceWrites.cancel();
        this.poolWrites.cancel();
        this.announcementStatus.cancel();
        if (this.stopping) this.log.info({ identity: cfg.identity }, 'gave the leader lease up');
        else this.log.warn({ identity: cfg.identity }, 'lost the leader lease; standing by');
      },
      onError: (e) => this.log.warn({ err: (e as Error).message }, 'leader election: cannot reach the Lease'),
    });
  }

  static async start(cfg: OperatorConfig, log: Logger = operatorLogger(cfg.logLevel), clock: Clock = systemClock): Promise<Operator> {
    const op = new Operator(cfg, log, clock);
    try {
      for (const c of op.caches) c.start();
      op.announcementStatus.start();
      if (cfg.healthzBindAddress) op.servers.push(await op.startHealthServer(cfg.healthzBindAddress));
      if (cfg.metricsBindAddress) op.servers.push(await op.startMetricsServer(cfg.metricsBindAddress));
      op.elector.start();
      op.resyncTimer = clock.setInterval(() => {
        op.kick(0);
        op.announcementStatus.kick(0);
      }, cfg.resyncPeriodSeconds * 1000);
      op.resyncTimer.unref?.();
      log.info({ identity: cfg.identity, lease: `${cfg.namespace}/${cfg.leaseName}`, handleUnclassed: cfg.handleUnclassed }, 'operator started; campaigning for the lease');
    } catch (e) {
      await op.stop();
      throw e;
    }
    return op;
  }

  private get synced(): Promise<void> {
    return Promise.all(this.caches.map((c) => c.synced)).then(() => undefined);
  }

  get isLeader(): boolean {
    return this.leading;
  }

  private serviceChanged(kind: 'add' | 'update' | 'delete', svc: V1Service): void {
    const key = serviceKey(svc);
    if (kind === 'delete') this.serviceWrites.forget(key);
    else if (this.serviceWrites.echo(key, svc)) return; // our own write coming back
    if (concernsIpam(svc, this.cfg)) this.kick();
  }

  private poolChanged(kind: 'add' | 'update' | 'delete', pool: Pool): void {
    const name = pool.metadata?.name ?? '';
    if (kind === 'delete') this.poolWrites.forget(name);
    else if (this.poolWrites.echo(name, pool)) return;
    this.kick();
  }

  /** Ask for a pass: after `delay`, and not sooner than MIN_INTERVAL_MS after the last. */
  private kick(delay = DEBOUNCE_MS): void {
    if (!this.leading || this.timer) return;
    const wait = Math.max(delay, this.lastPassAt + MIN_INTERVAL_MS - this.clock.now());
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      this.pass();
    }, wait);
  }

  /** One allocation pass; public for tests and the benchmark. */
  pass(): void {
    if (!this.leading || !this.caches.every((c) => c.hasSynced)) return;
    const started = performance.now();
    this.lastPassAt = this.clock.now();
    let p: Plan;
    try {
      const services = this.services.list().map((s) => this.serviceWrites.view(serviceKey(s), s));
      const pools = this.pools.list().map((x) => this.poolWrites.view(x.metadata?.name ?? '', x));
      const namespaceLabels = new Map(this.namespaces.list().map((n) => [n.metadata?.name ?? '', n.metadata?.labels ?? {}]));
      p = plan(services, pools, this.cfg, new Date(this.lastPassAt), namespaceLabels);
    } catch (e) {
      this.metrics.reconciles.inc({ result: 'error' });
      this.log.error({ err: (e as Error).stack }, 'allocation pass failed');
      this.kick(RETRY_MS);
      return;
    }
    this.lastPlan = { outcomes: p.outcomes, pools: p.pools };
    this.passes++;
    this.metrics.reconcileDuration.observe((performance.now() - started) / 1000);
    this.metrics.reconciles.inc({ result: 'ok' });
    const byKey = new Map<string, PlannedEvent[]>();
    for (const e of p.events) {
      const k = `${e.namespace}/${e.name}`;
      byKey.set(k, [...(byKey.get(k) ?? []), e]);
    }
    for (const w of p.serviceWrites) {
      const events = byKey.get(w.key) ?? [];
      this.serviceWrites.push(w.key, { ...w.service, status: w.status }, () => {
        for (const e of events) {
          if (e.reason === 'IPReleased') this.metrics.released.inc();
          this.events.post({ kind: 'Service', namespace: e.namespace, name: e.name, ...(e.uid ? { uid: e.uid } : {}) }, e.type, e.reason, e.message);
        }
      });
    }
    for (const w of p.poolWrites) this.poolWrites.push(w.name, { ...w.pool, status: w.status } as Pool);
    this.refreshGauges();
    if (p.serviceWrites.length || p.poolWrites.length) {
      this.log.info({ services: p.outcomes.size, serviceWrites: p.serviceWrites.length, poolWrites: p.poolWrites.length, events: p.events.length, ms: Math.round(performance.now() - started) }, 'allocation pass');
    }
  }

  private refreshGauges(): void {
    const p = this.lastPlan;
    if (!p) return;
    this.metrics.services.reset();
    for (const o of p.outcomes.values()) this.metrics.services.inc({ reason: o.reason });
    this.metrics.poolAddresses.reset();
    for (const [pool, u] of p.pools) {
      this.metrics.poolAddresses.set({ pool, state: 'total' }, u.total);
      this.metrics.poolAddresses.set({ pool, state: 'used' }, u.used);
      this.metrics.poolAddresses.set({ pool, state: 'available' }, u.available);
    }
  }

  /** Writes not yet done (the benchmark and tests wait for zero). */
  get pendingWrites(): number {
    return this.serviceWrites.size + this.poolWrites.size + this.announcementStatus.pendingWrites;
  }

  status(): OperatorStatus {
    const services: Record<string, number> = {};
    for (const o of this.lastPlan?.outcomes.values() ?? []) services[o.reason] = (services[o.reason] ?? 0) + 1;
    return {
      identity: this.cfg.identity,
      leader: this.leading,
      synced: this.caches.every((c) => c.hasSynced),
      lastPass: this.passes ? new Date(this.lastPassAt).toISOString() : undefined,
      services,
      pools: [...(this.lastPlan?.pools ?? [])].map(([name, u]) => ({ name, total: u.total, used: u.used, available: u.available, errors: u.errors, ...(u.conflictWith ? { conflictWith: u.conflictWith } : {}) })),
      pendingWrites: this.pendingWrites,
    };
  }

  private startHealthServer(addr: string): Promise<Server> {
    return serveRoutes(addr, {
      // Alive while the event loop answers; ready once every cache is complete (a standby
      // replica is ready too: it must be able to take over at once).
      '/healthz': (_req, res) => res.writeHead(200, { 'Content-Type': 'text/plain' }).end('ok'),
      '/readyz': (_req, res) => {
        const missing = this.caches.filter((w) => !w.hasSynced).map((w) => w.name);
        if (missing.length) res.writeHead(503, { 'Content-Type': 'text/plain' }).end(`not synced: ${missing.join(', ')}`);
        else res.writeHead(200, { 'Content-Type': 'text/plain' }).end('ok');
      },
    });
  }

  private startMetricsServer(addr: string): Promise<Server> {
    return serveRoutes(addr, {
      '/status': (_req, res) => res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify(this.status())),
      '/metrics': (_req, res) => {
        this.metrics.registry.metrics().then(
          (body) => res.writeHead(200, { 'Content-Type': this.metrics.registry.contentType }).end(body),
          (e: Error) => res.writeHead(500).end(e.message),
        );
      },
    });
  }

  /** Give the lease up (another replica takes over at once), stop watching and serving. */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.timer) this.clock.clearTimeout(this.timer);
    if (this.resyncTimer) this.clock.clearInterval(this.resyncTimer);
    this.timer = undefined;
    await this.elector.stop();
    await this.serviceWrites.idle();
    await this.announcementStatus.stop();
    await Promise.all(this.caches.map((c) => c.stop()));
    for (const s of this.servers.splice(0)) await closeServer(s);
  }
}
