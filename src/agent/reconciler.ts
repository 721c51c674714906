// Desired state → maps. Changes are debounced (minSyncPeriod) and coalesced into one sync;
// a periodic full sync runs too. Each sync recomputes the node's desired frontends from the
// caches and lets the writer apply only the difference. Flows to removed backends are
// flushed (kube-proxy's stale UDP flush), malformed objects reported once.
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { flushFlowsTo } from '../datapath/ct-gc.js';
import type { DatapathMaps } from '../datapath/loader.js';
import type { ApplyStats } from '../datapath/writer.js';
import type { WriteFailure } from '../datapath/write-plan.js';
import { FerryError } from '../errors.js';
import type { EventObject, EventSink } from '../k8s/events.js';
import { combine, conflictText, nodeView, serviceOutcome, slicesByService, type DesiredState, type ServiceOutcome } from '../model/desired.js';
import { LABEL_SERVICE_NAME, serviceName } from '../model/service.js';
import type { ProxyHealth, ServiceHealthServers } from './health.js';
import type { AgentMetrics } from './metrics.js';
import { systemClock, type Clock, type Timer } from '../clock.js';

export const TRIGGER_TIME_ANNOTATION = 'endpoints.kubernetes.io/last-change-trigger-time';

export interface ClusterSource {
  services(): readonly V1Service[];
  service(namespace: string, name: string): V1Service | undefined;
  slices(): readonly V1EndpointSlice[];
  /** This node. */
  node(): V1Node | undefined;
  /** Every node (this one too). */
  nodes(): readonly V1Node[];
}

/** What the reconciler needs of the node-address writer. */
export interface NodeAddressSink {
  apply(addresses: Iterable<string>): { added: number; removed: number };
}

/** What the reconciler needs of the service writer. */
export interface FrontendWriter {
  apply(desired: DesiredState['frontends']): ApplyStats;
}

/** After a failed sync, the next try comes this much later. */
export const SYNC_RETRY_MS = 1000;

export interface ReconcilerDeps {
  source: ClusterSource;
  writer: FrontendWriter;
  nodeAddresses?: NodeAddressSink;
  maps: Pick<DatapathMaps, 'ct4' | 'nat4'>;
  health: ProxyHealth;
  serviceHealth: ServiceHealthServers;
  metrics: AgentMetrics;
  log: Logger;
  events?: EventSink;
  minSyncPeriodMs: number;
  syncPeriodMs: number;
  extraNodeAddresses: string[];
  nodeName: string;
  clock?: Clock;
  /** After every sync that programmed the datapath (announcements follow what it holds). */
  onSynced?: () => void;
}

export class Reconciler {
  private timer: Timer | undefined;
  private periodic: Timer | undefined;
  private retry: Timer | undefined;
  private readonly clock: Clock;
  /** When the last sync finished (ms since the epoch, by the clock). */
  lastSyncAt = 0;
  private running: Promise<void> | undefined;
  private pendingServices = 0;
  private pendingEndpoints = 0;
  private pendingFull = true;
  /** Trigger times of slices changed since the last sync. */
  private triggers: number[] = [];
  private reported = new Set<string>();
  private reportedFailures = new Set<string>();
  /** Services the last sync could not program (the maps were full). */
  failures: WriteFailure[] = [];
  /** Each Service's contribution, recomputed only when it or its slices changed. */
  private readonly outcomes = new Map<string, ServiceOutcome>();
  private readonly dirty = new Set<string>();
  private stopped = false;
  last: DesiredState | undefined;
  syncs = 0;

  constructor(private readonly d: ReconcilerDeps) {
    this.clock = d.clock ?? systemClock;
  }

  start(): void {
    this.periodic = this.clock.setInterval(() => {
      this.pendingFull = true;
      this.schedule();
    }, this.d.syncPeriodMs);
    this.periodic.unref?.();
  }

  serviceChanged(svc: V1Service): void {
    this.dirty.add(serviceName(svc));
    this.pendingServices++;
    this.d.metrics.serviceChangesTotal.inc();
    this.queue();
  }

  sliceChanged(slice: V1EndpointSlice): void {
    const owner = slice.metadata?.labels?.[LABEL_SERVICE_NAME];
    if (owner) this.dirty.add(`${slice.metadata?.namespace}/${owner}`);
    this.pendingEndpoints++;
    this.d.metrics.endpointChangesTotal.inc();
    const t = slice.metadata?.annotations?.[TRIGGER_TIME_ANNOTATION];
    if (t && !Number.isNaN(Date.parse(t))) this.triggers.push(Date.parse(t));
    this.queue();
  }

  nodeChanged(): void {
    const node = this.d.source.node();
    if (node) this.d.health.syncNode(node);
    this.pendingFull = true;
    this.queue();
  }

  private queue(): void {
    this.d.health.queuedUpdate();
    this.d.metrics.lastQueued.setToCurrentTime();
    this.d.metrics.serviceChangesPending.set(this.pendingServices);
    this.d.metrics.endpointChangesPending.set(this.pendingEndpoints);
    this.schedule();
  }

  private schedule(): void {
    if (this.timer || this.stopped) return;
    const wait = Math.max(0, this.lastSyncAt + this.d.minSyncPeriodMs - this.clock.now());
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      void this.syncNow();
    }, wait);
  }

  /** Sync now (waiting for a sync already running). Never throws: failures are logged and retried. */
  async syncNow(): Promise<void> {
    if (this.running) {
      await this.running;
      if (this.pendingServices + this.pendingEndpoints === 0 && !this.pendingFull) return;
    }
    this.running = this.sync().finally(() => (this.running = undefined));
    await this.running;
  }

  private async sync(): Promise<void> {
    const full = this.pendingFull;
    const triggers = this.triggers;
    this.pendingFull = false;
    this.pendingServices = 0;
    this.pendingEndpoints = 0;
    this.triggers = [];
    const t0 = process.hrtime.bigint();
    const node = this.d.source.node();
    if (!node) {
      this.d.log.warn({ node: this.d.nodeName }, 'sync: this node is not in the API yet; keeping the datapath as it is');
      return;
    }
    try {
      const view = nodeView(node, this.d.extraNodeAddresses, this.d.source.nodes());
      this.d.nodeAddresses?.apply(view.clusterNodeAddresses ?? []);
      const desired = this.desired(full, view);
      const stats = this.d.writer.apply(desired.frontends);
      // Flows to removed backends, found by the backend (local, SNAT, DSR at either end).
      const flushed = flushFlowsTo(this.d.maps, stats.removedBackends, new Set(stats.removedBackendIds));
      this.failures = stats.failures;
      await this.d.serviceHealth.sync(desired.healthChecks);
      this.last = desired;
      this.syncs++;
      this.lastSyncAt = this.clock.now();
      this.d.health.updated();
      const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
      this.d.metrics.syncDuration.observe(seconds);
      (full ? this.d.metrics.syncFullDuration : this.d.metrics.syncPartialDuration).observe(seconds);
      this.d.metrics.lastSync.setToCurrentTime();
      this.d.metrics.serviceChangesPending.set(this.pendingServices);
      this.d.metrics.endpointChangesPending.set(this.pendingEndpoints);
      this.d.metrics.noLocalEndpoints.set({ traffic_policy: 'internal' }, desired.noLocalEndpoints.internal);
      this.d.metrics.noLocalEndpoints.set({ traffic_policy: 'external' }, desired.noLocalEndpoints.external);
      const now = this.clock.now();
      for (const t of triggers) this.d.metrics.programmingDuration.observe(Math.max(0, now - t) / 1000);
      this.report(desired);
      this.reportFailures(stats.failures);
      this.d.onSynced?.();
      // A Service that did not fit may fit once this sync's removals freed room.
      if (stats.failures.length > 0 && stats.frontendsRemoved + stats.backendsRemoved > 0) this.retryLater();
      if (stats.entriesWritten + stats.entriesDeleted > 0 || flushed.ct + flushed.nat > 0) {
        this.d.log.info({ full, frontends: desired.frontends.length, ...stats, removedBackends: stats.removedBackends.length, flushedFlows: flushed.ct, seconds }, 'datapath synced');
      }
    } catch (e) {
      const code = e instanceof FerryError ? e.code : 'FERRY_INTERNAL';
      this.d.metrics.syncErrors.inc({ code });
      this.d.log.error({ err: e, code }, 'sync failed; will retry');
      this.pendingFull = true; // recompute everything: the failed sync consumed the dirty set
      this.retryLater();
    }
  }

  private retryLater(): void {
    if (this.retry) this.clock.clearTimeout(this.retry);
    this.retry = this.clock.setTimeout(() => {
      this.retry = undefined;
      this.schedule();
    }, SYNC_RETRY_MS);
    this.retry.unref?.();
  }

  /** A Service as an Event's subject (with its uid, so kubectl describe shows the Event). */
  private serviceRef(key: string): EventObject {
    const [namespace = '', name = ''] = key.split('/');
    const uid = this.d.source.service(namespace, name)?.metadata?.uid;
    return { kind: 'Service', namespace, name, ...(uid ? { uid } : {}) };
  }

  /** Services the maps could not take: logged and evented once each, counted, kept for /status. */
  private reportFailures(failures: WriteFailure[]): void {
    const seen = new Set<string>();
    for (const f of failures) {
      const key = `${f.service}: ${f.error}`;
      seen.add(key);
      if (this.reportedFailures.has(key)) continue;
      this.d.log.error({ service: f.service, code: f.code, error: f.error }, 'Service not programmed: the maps cannot take it; it keeps what it had, every other Service is programmed');
      this.d.events?.warn(this.serviceRef(f.service), 'FerryNotProgrammed', `ferry cannot program this Service on this node: ${f.error}`).catch((e: Error) => this.d.log.debug({ err: e.message }, 'could not post an event'));
    }
    this.reportedFailures = seen;
    this.d.metrics.servicesUnprogrammed.set(failures.length);
  }

  /** Recompute what changed (everything on a full sync) and merge. */
  private desired(full: boolean, node: ReturnType<typeof nodeView>): DesiredState {
    const dirty = [...this.dirty];
    this.dirty.clear();
    if (full) {
      const bySvc = slicesByService(this.d.source.slices());
      this.outcomes.clear();
      for (const svc of this.d.source.services()) {
        const name = serviceName(svc);
        this.outcomes.set(name, serviceOutcome(svc, bySvc.get(name) ?? [], node));
      }
    } else if (dirty.length > 0) {
      const slices = this.d.source.slices();
      for (const name of dirty) {
        const [ns, n] = name.split('/') as [string, string];
        const svc = this.d.source.service(ns, n);
        if (!svc) {
          this.outcomes.delete(name);
          continue;
        }
        const mine = slices.filter((s) => s.metadata?.namespace === ns && s.metadata?.labels?.[LABEL_SERVICE_NAME] === n);
        this.outcomes.set(name, serviceOutcome(svc, mine, node));
      }
    }
    return combine(this.outcomes.values());
  }

  private report(desired: DesiredState): void {
    const seen = new Set<string>();
    for (const r of desired.rejected) {
      const key = `${r.kind}/${r.namespace}/${r.name}: ${r.error}`;
      seen.add(key);
      if (this.reported.has(key)) continue;
      this.d.metrics.rejectedObjects.inc({ kind: r.kind });
      this.d.log.warn({ kind: r.kind, namespace: r.namespace, name: r.name, error: r.error }, 'skipping a malformed object; everything else keeps working');
      this.d.events?.warn(r, 'FerryRejected', `ferry skips this ${r.kind}: ${r.error}`).catch((e: Error) => this.d.log.debug({ err: e.message }, 'could not post an event'));
    }
    const conflicts = { service: 0, 'node-address': 0 };
    for (const c of desired.conflicts) {
      const text = conflictText(c);
      conflicts[c.ownerKind === 'NodeAddress' ? 'node-address' : 'service']++;
      seen.add(text);
      if (this.reported.has(text)) continue;
      this.d.log.warn({ service: c.service, frontend: c.frontend, kind: c.kind, owner: c.owner, ownerKind: c.ownerKind }, text);
      this.d.events?.warn(this.serviceRef(c.service), c.ownerKind === 'NodeAddress' ? 'FerryNodeAddress' : 'FerryFrontendConflict', text).catch((e: Error) => this.d.log.debug({ err: e.message }, 'could not post an event'));
    }
    for (const [kind, n] of Object.entries(conflicts)) this.d.metrics.frontendConflicts.set({ kind }, n);
    for (const i of desired.ignored) {
      if (!this.reported.has(i)) this.d.log.info({ ignored: i }, 'not programmed');
      seen.add(i);
    }
    this.reported = seen;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) this.clock.clearTimeout(this.timer);
    if (this.retry) this.clock.clearTimeout(this.retry);
    if (this.periodic) this.clock.clearInterval(this.periodic);
    await this.running;
  }
}
