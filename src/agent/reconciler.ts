// Desired state → maps. Changes are debounced (minSyncPeriod) and coalesced into one sync.
// A sync recomputes only the Services that changed (or whose frontends another Service's
// change moved: frontend-table.ts) and has the writer write only those; a periodic full
// sync reads the maps back and puts right whatever differs. Flows to removed backends are
// flushed (kube-proxy's stale UDP flush), malformed objects reported once.
import { isIPv4 } from 'node:net';
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { flushFlowsTo } from '../datapath/ct-gc.js';
import type { DatapathMaps } from '../datapath/loader.js';
import { Proto } from '../datapath/layouts.js';
import type { ApplyStats } from '../datapath/writer.js';
import type { WriteFailure } from '../datapath/write-plan.js';
import { FerryError } from '../errors.js';
import type { EventObject, EventSink } from '../k8s/events.js';
import { conflictText, nodeView, serviceOutcome, slicesByService, type DesiredState } from '../model/desired.js';
import { FrontendTable } from '../model/frontend-table.js';
import { LABEL_SERVICE_NAME, serviceName } from '../model/service.js';
import type { ProxyHealth, ServiceHealthServers } from './health.js';
import type { AgentMetrics } from './metrics.js';
import { systemClock, type Clock, type Timer } from '../clock.js';
import type { SnatAddress } from '../datapath/snat-address.js';

export const TRIGGER_TIME_ANNOTATION = 'endpoints.kubernetes.io/last-change-trigger-time';

export interface ClusterSource {
  services(): readonly V1Service[];
  service(namespace: string, name: string): V1Service | undefined;
  slices(): readonly V1EndpointSlice[];
  /** A Service's slices (an index kept from the watch events); absent: found in slices(). */
  slicesOf?(namespace: string, name: string): readonly V1EndpointSlice[];
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
  apply(desired: DesiredState['frontends'], opts?: { reread?: boolean }): ApplyStats;
  /** Only these Services (each with all its frontends); absent: every sync is a full apply. */
  applyChanged?(changes: ReadonlyMap<string, DesiredState['frontends']>): ApplyStats;
}

/** After a failed sync, the next try comes this much later. */
export const SYNC_RETRY_MS = 1000;

export interface ReconcilerDeps {
  source: ClusterSource;
  writer: FrontendWriter;
  nodeAddresses?: NodeAddressSink;
  /** The node's SNAT addresses, following its Node's (absent: set in the config). */
  snat4?: Pick<SnatAddress, 'follow'>;
  snat6?: Pick<SnatAddress, 'follow'>;
  maps: Pick<DatapathMaps, 'ct4' | 'nat4'>;
  health: ProxyHealth;
  serviceHealth: ServiceHealthServers;
  metrics: AgentMetrics;
  log: Logger;
  events?: EventSink;
  minSyncPeriodMs: number;
  syncPeriodMs: number;
  /** How often the maps are read back and put right (default: an hour, as kube-proxy's full syncs). */
  fullSyncPeriodMs?: number;
  extraNodeAddresses: string[];
  nodeName: string;
  clock?: Clock;
  /** After every sync that programmed the datapath (announcements follow what it holds). */
  onSynced?: () => void;
  /**
   * When Services did not fit: free the ids of removed backends that no flow uses any more
   * (a conntrack pass, otherwise left to the periodic GC). Returns how many were freed.
   */
  reclaimIds?: () => number;
  /** After a sync that removed a UDP backend: its connected sockets are destroyed. */
  onUdpBackendsRemoved?: () => void;
}

export class Reconciler {
  private timer: Timer | undefined;
  private periodic: Timer | undefined;
  private periodicFull: Timer | undefined;
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
  private readonly table = new FrontendTable();
  private readonly dirty = new Set<string>();
  /** Every Service recomputed next sync (the node changed, or a sync failed). */
  private pendingRecompute = true;
  /** The next write is a full one, after reading the maps back (periodic, and the first). */
  private pendingRepair = true;
  private stopped = false;
  /**
   * Changes only queue until the first sync is asked for (the agent asks once every cache
   * is listed): a sync on partly listed caches would program Services without endpoints.
   */
  private armed = false;
  /** Services the maps could not take, by Service (they are tried again every sync). */
  private readonly failed = new Map<string, WriteFailure>();
  /** What was reported about each Service (reported once while it lasts). */
  private readonly reportedOf = new Map<string, Set<string>>();
  private readonly conflictCounts = new Map<string, { service: number; 'node-address': number }>();
  syncs = 0;

  constructor(private readonly d: ReconcilerDeps) {
    this.clock = d.clock ?? systemClock;
  }

  start(): void {
    this.armed = true;
    // Every syncPeriod a sync runs (changes missed by no event are none: it costs nothing
    // then); every fullSyncPeriod the maps are read back and compared whole.
    this.periodic = this.clock.setInterval(() => this.schedule(), this.d.syncPeriodMs);
    this.periodic.unref?.();
    this.periodicFull = this.clock.setInterval(() => {
      this.pendingFull = true;
      this.pendingRepair = true;
      this.schedule();
    }, this.d.fullSyncPeriodMs ?? 3_600_000);
    this.periodicFull.unref?.();
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
    this.pendingRecompute = true;
    this.queue();
  }

  /** Frontends programmed, and frontends lost to another Service or a node address. */
  get frontendCount(): number {
    return this.table.frontendCount;
  }

  get conflictCount(): number {
    let n = 0;
    for (const c of this.conflictCounts.values()) n += c.service + c['node-address'];
    return n;
  }

  private queue(): void {
    this.d.health.queuedUpdate();
    this.d.metrics.lastQueued.setToCurrentTime();
    this.d.metrics.serviceChangesPending.set(this.pendingServices);
    this.d.metrics.endpointChangesPending.set(this.pendingEndpoints);
    this.schedule();
  }

  private schedule(): void {
    if (this.timer || this.stopped || !this.armed) return;
    const wait = Math.max(0, this.lastSyncAt + this.d.minSyncPeriodMs - this.clock.now());
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      void this.syncNow();
    }, wait);
  }

  /** Sync now (waiting for a sync already running). Never throws: failures are logged and retried. */
  async syncNow(): Promise<void> {
    this.armed = true;
    if (this.running) {
      await this.running;
      if (this.pendingServices + this.pendingEndpoints === 0 && !this.pendingFull) return;
    }
    this.running = this.sync().finally(() => (this.running = undefined));
    await this.running;
  }

  private async sync(): Promise<void> {
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
    const recompute = this.pendingRecompute;
    const repair = this.pendingRepair;
    this.pendingRecompute = false;
    this.pendingRepair = false;
    try {
      const view = nodeView(node, this.d.extraNodeAddresses, this.d.source.nodes());
      this.d.nodeAddresses?.apply([...(view.clusterNodeAddresses ?? [])].filter((a) => isIPv4(a))); // node4_addrs: DSR's IPv4 options
      const moved4 = this.d.snat4?.follow(view.addresses);
      if (moved4) this.d.log.info(moved4, 'the IPv4 address flows to remote backends leave from changed (flows on the old one end)');
      const moved = this.d.snat6?.follow(view.addresses6 ?? []);
      if (moved) this.d.log.info(moved, 'the IPv6 address flows to remote backends leave from changed (none: they are dropped)');
      this.recompute(recompute, view);
      const changed = this.table.takeChanged();
      const whole = repair || recompute || !this.d.writer.applyChanged;
      let stats: ApplyStats;
      if (whole) {
        stats = this.d.writer.apply(this.table.snapshot().frontends, { reread: repair });
        this.failed.clear();
      } else {
        // Services that did not fit are tried again with every sync.
        for (const name of this.failed.keys()) changed.add(name);
        stats = this.d.writer.applyChanged!(new Map([...changed].map((name) => [name, this.table.frontendsOf(name)])));
        for (const name of changed) this.failed.delete(name);
      }
      for (const f of stats.failures) this.failed.set(f.service, f);
      // Flows to removed backends, found by the backend (local, SNAT, DSR at either end), and to removed frontends.
      const flushed = flushFlowsTo(this.d.maps, stats.removedBackends, new Set(stats.removedBackendIds), stats.removedFrontends);
      if (stats.removedBackends.some((b) => b.proto === Proto.UDP) || stats.ipv6UdpSlotsReplaced) this.d.onUdpBackendsRemoved?.();
      this.failures = [...this.failed.values()];
      await this.d.serviceHealth.sync(this.table.healthChecks());
      this.syncs++;
      this.lastSyncAt = this.clock.now();
      this.d.health.updated();
      const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
      this.d.metrics.syncDuration.observe(seconds);
      (whole ? this.d.metrics.syncFullDuration : this.d.metrics.syncPartialDuration).observe(seconds);
      this.d.metrics.lastSync.setToCurrentTime();
      this.d.metrics.serviceChangesPending.set(this.pendingServices);
      this.d.metrics.endpointChangesPending.set(this.pendingEndpoints);
      const noLocal = this.table.noLocalEndpoints();
      this.d.metrics.noLocalEndpoints.set({ traffic_policy: 'internal' }, noLocal.internal);
      this.d.metrics.noLocalEndpoints.set({ traffic_policy: 'external' }, noLocal.external);
      const now = this.clock.now();
      for (const t of triggers) this.d.metrics.programmingDuration.observe(Math.max(0, now - t) / 1000);
      this.report(whole ? [...this.table.services(), ...this.reportedOf.keys()] : changed);
      this.reportFailures(this.failures);
      this.d.onSynced?.();
      // A Service that did not fit may fit once this sync's removals, or ids reclaimed now, freed room.
      if (stats.failures.length > 0 && (stats.frontendsRemoved + stats.backendsRemoved > 0 || (this.d.reclaimIds?.() ?? 0) > 0)) this.retryLater();
      if (stats.entriesWritten + stats.entriesDeleted > 0 || flushed.ct + flushed.nat > 0) {
        this.d.log.info({ full: whole, frontends: this.table.frontendCount, ...stats, removedBackends: stats.removedBackends.length, removedFrontends: stats.removedFrontends.length, flushedFlows: flushed.ct, seconds }, 'datapath synced');
      }
    } catch (e) {
      const code = e instanceof FerryError ? e.code : 'FERRY_INTERNAL';
      this.d.metrics.syncErrors.inc({ code });
      this.d.log.error({ err: e, code }, 'sync failed; will retry');
      this.pendingFull = true; // recompute everything: the failed sync consumed the dirty set
      this.pendingRecompute = true;
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

  /** Recompute what changed (everything when asked) into the table. */
  private recompute(all: boolean, node: ReturnType<typeof nodeView>): void {
    const dirty = [...this.dirty];
    this.dirty.clear();
    if (all) {
      const bySvc = slicesByService(this.d.source.slices());
      const present = new Set<string>();
      for (const svc of this.d.source.services()) {
        const name = serviceName(svc);
        present.add(name);
        this.table.set(name, serviceOutcome(svc, bySvc.get(name) ?? [], node));
      }
      for (const name of [...this.table.services()]) if (!present.has(name)) this.table.set(name, undefined);
      return;
    }
    let everySlice: readonly V1EndpointSlice[] | undefined;
    for (const name of dirty) {
      const [ns, n] = name.split('/') as [string, string];
      const svc = this.d.source.service(ns, n);
      if (!svc) {
        this.table.set(name, undefined);
        continue;
      }
      const mine = this.d.source.slicesOf
        ? [...this.d.source.slicesOf(ns, n)]
        : (everySlice ??= this.d.source.slices()).filter((s) => s.metadata?.namespace === ns && s.metadata?.labels?.[LABEL_SERVICE_NAME] === n);
      this.table.set(name, serviceOutcome(svc, mine, node));
    }
  }

  /** Problems of these Services (malformed objects, conflicts, what is ignored), each reported once while it lasts. */
  private report(services: Iterable<string>): void {
    for (const name of new Set(services)) {
      const p = this.table.problemsOf(name);
      const before = this.reportedOf.get(name) ?? new Set<string>();
      const seen = new Set<string>();
      for (const r of p.rejected) {
        const key = `${r.kind}/${r.namespace}/${r.name}: ${r.error}`;
        seen.add(key);
        if (before.has(key)) continue;
        this.d.metrics.rejectedObjects.inc({ kind: r.kind });
        this.d.log.warn({ kind: r.kind, namespace: r.namespace, name: r.name, error: r.error }, 'skipping a malformed object; everything else keeps working');
        this.d.events?.warn(r, 'FerryRejected', `ferry skips this ${r.kind}: ${r.error}`).catch((e: Error) => this.d.log.debug({ err: e.message }, 'could not post an event'));
      }
      const counts = { service: 0, 'node-address': 0 };
      for (const c of p.conflicts) {
        const text = conflictText(c);
        counts[c.ownerKind === 'NodeAddress' ? 'node-address' : 'service']++;
        seen.add(text);
        if (before.has(text)) continue;
        this.d.log.warn({ service: c.service, frontend: c.frontend, kind: c.kind, owner: c.owner, ownerKind: c.ownerKind }, text);
        this.d.events?.warn(this.serviceRef(c.service), c.ownerKind === 'NodeAddress' ? 'FerryNodeAddress' : 'FerryFrontendConflict', text).catch((e: Error) => this.d.log.debug({ err: e.message }, 'could not post an event'));
      }
      for (const i of p.ignored) {
        if (!before.has(i)) this.d.log.info({ ignored: i }, 'not programmed');
        seen.add(i);
      }
      if (seen.size) this.reportedOf.set(name, seen);
      else this.reportedOf.delete(name);
      if (counts.service + counts['node-address']) this.conflictCounts.set(name, counts);
      else this.conflictCounts.delete(name);
    }
    const total = { service: 0, 'node-address': 0 };
    for (const c of this.conflictCounts.values()) {
      total.service += c.service;
      total['node-address'] += c['node-address'];
    }
    for (const [kind, n] of Object.entries(total)) this.d.metrics.frontendConflicts.set({ kind }, n);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) this.clock.clearTimeout(this.timer);
    if (this.retry) this.clock.clearTimeout(this.retry);
    if (this.periodic) this.clock.clearInterval(this.periodic);
    if (this.periodicFull) this.clock.clearInterval(this.periodicFull);
    await this.running;
  }
}
