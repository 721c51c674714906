// The agent: the composition root that replaces kube-proxy on a node. Config → datapath
// (adopting pinned maps and links, so a restart neither flushes nor drops) → watchers →
// first sync only after every cache is complete → health and metrics servers → periodic
// conntrack GC. On stop it leaves the datapath running for the next agent.
import { mkdirSync } from 'node:fs';
import type { Server } from 'node:http';
import { join } from 'node:path';
import type { V1EndpointSlice, V1Lease, V1Node, V1Service } from '@kubernetes/client-node';
import { pino, type Logger } from 'pino';
import { collectGarbage, collectOrphanFlows } from './garbage.js';
import { StaleUdpSockets } from './stale-sockets.js';
import { NetnsSourceScanner } from './netns-sources.js';
import { Datapath, defaultObjectsDir, type HandoverChainReport, type StrayReport } from '../datapath/loader.js';
import { LAYOUT_VERSION } from '../datapath/layouts.js';
import { chooseDevices } from './devices.js';
import { DeviceScanner } from './device-scanner.js';
import { xdpChoice } from './xdp-choice.js';
import { watchRouteChanges, type RouteChangesWatch } from './route-changes.js';
import { startCpuProfile } from './cpu-profile.js';
import { defaultRouteDevices, readLinks } from '../sys/links.js';
import { ServiceWriter } from '../datapath/writer.js';
import { NodeAddressWriter } from '../datapath/node-addresses.js';
import { snat4Pick, snat6Pick } from '../datapath/snat-address.js';
import { ErrorCode, FerryError } from '../errors.js';
import { apiAccess } from '../k8s/access.js';
import { JsonClient } from '../k8s/client.js';
import { HEARTBEAT_KIND, HEARTBEAT_LABEL } from '../announce/heartbeats.js';
import { L2_POLICY_PATH, type L2PolicyObject } from '../announce/policy.js';
import { L2AddressWriter } from '../datapath/l2-announcements.js';
import { interfaceInfos } from '../sys/interfaces.js';
import { FrameSender } from '../sys/packet-socket.js';
import { Announcer } from './announcer.js';
import { BgpSpeaker } from './bgp-speaker.js';
import { BGP_ADVERTISEMENT_PATH, BGP_PEER_PATH, type CustomObject } from '../announce/bgp.js';
import { Vtysh } from '../sys/vtysh.js';
import { HeartbeatWriter } from './heartbeat-writer.js';
import { netnsCookie } from '../sys/socket.js';
import { boundedEventSink, eventSink } from '../k8s/events.js';
import { secretValue } from '../k8s/secret.js';
import { Watcher } from '../k8s/watcher.js';
import { leanNode, leanService, leanSlice } from '../k8s/lean.js';
import { SliceIndex } from '../model/slice-index.js';
import { nodeView } from '../model/desired.js';
import type { AgentConfig } from './config.js';
import { ProxyHealth, ServiceHealthServers, startProxyHealthServer } from './health.js';
import { closeServer, serveRoutes } from '../sys/http-server.js';
import { AgentMetrics, refreshDatapathGauges } from './metrics.js';
import { Reconciler } from './reconciler.js';

export const agentLogger = (level: string): Logger => pino({ level, base: { component: 'ferry-agent' } });

const NODE_RETRY_MS = 1000;

export class Agent {
  private readonly servers: Server[] = [];
  private gcTimer: NodeJS.Timeout | undefined;
  private deviceScanner: DeviceScanner | undefined;
  private routeMonitor: RouteChangesWatch | undefined;
  private frameSender: FrameSender | undefined;
  private sampledFill: Record<string, number> = {}; // ct4 and nat4 fill as the last GC pass saw it
  private constructor(
    readonly cfg: AgentConfig,
    readonly log: Logger,
    readonly datapath: Datapath,
    readonly reconciler: Reconciler,
    readonly writer: ServiceWriter,
    readonly metrics: AgentMetrics,
    private readonly watchers: Watcher<never>[],
    private readonly serviceHealth: ServiceHealthServers,
    readonly announcer: Announcer,
    readonly bgp: BgpSpeaker,
    private readonly staleSockets: StaleUdpSockets,
    private readonly netnsSources: NetnsSourceScanner,
  ) {}

  static async start(cfg: AgentConfig, log: Logger = agentLogger(cfg.logLevel)): Promise<Agent> {
    const started = Date.now();
    const access = apiAccess(cfg.kubeconfig);
    const json = new JsonClient(access);
    // Health answers from the start: a liveness probe must not kill an agent that waits for
    // the API server or lists a large cluster (/readyz says when the first sync is done).
    const metrics = new AgentMetrics();
    const health = new ProxyHealth(2 * cfg.syncPeriodSeconds * 1000);
    const early: Server[] = cfg.healthzBindAddress ? [await startProxyHealthServer(health, cfg.healthzBindAddress, metrics)] : [];
    try {
      return await Agent.startWithHealth(cfg, log, { started, json, access, metrics, health, early });
    } catch (e) {
      for (const s of early) await closeServer(s);
      throw e;
    }
  }

  private static async startWithHealth(
    cfg: AgentConfig,
    log: Logger,
    { started, json, access, metrics, health, early }: { started: number; json: JsonClient; access: ReturnType<typeof apiAccess>; metrics: AgentMetrics; health: ProxyHealth; early: Server[] },
  ): Promise<Agent> {
    // The node's addresses decide the SNAT address and the NodePort frontends.
    let node: V1Node | undefined;
    for (;;) {
      try {
        node = await json.request<V1Node>('GET', `/api/v1/nodes/${encodeURIComponent(cfg.nodeName)}`);
        break;
      } catch (e) {
        log.warn({ node: cfg.nodeName, err: (e as Error).message }, 'cannot read this node yet; retrying');
        await new Promise((r) => setTimeout(r, NODE_RETRY_MS));
      }
    }
    const view = nodeView(node, cfg.nodePortAddresses);
    const snatIPv4 = cfg.snatIPv4 || snat4Pick(view.addresses);
    if (!snatIPv4) {
      throw new FerryError({ code: ErrorCode.Config, op: 'choose the SNAT address', cause: `node ${cfg.nodeName} has no IPv4 InternalIP or ExternalIP flows can leave from`, hint: 'set snatIPv4' });
    }

    const links = readLinks(), devices = chooseDevices(links, defaultRouteDevices(), view.addresses, cfg.devices), xdpPlan = xdpChoice(cfg.xdpDevices, links, devices);
    mkdirSync(cfg.pinDir, { recursive: true });
    let [switchAt, switchMs] = [0, 0];
    let [handover, strays]: [HandoverChainReport | undefined, StrayReport] = [undefined, { removed: [], failed: [] }];
    const datapath = Datapath.load({
      objectsDir: cfg.objectsDir || defaultObjectsDir(),
      pinDir: cfg.pinDir,
      snatIPv4, snatIPv6: cfg.snatIPv6 || snat6Pick(view.addresses6 ?? []), // the Node's is followed (reconciler)
      snatPortMin: cfg.snatPortMin,
      snatPortMax: cfg.snatPortMax,
      hashSeed: cfg.hashSeed,
      forwardingMode: cfg.forwardingMode,
      acceleration: cfg.acceleration, tcAttach: cfg.tcAttach,
      maglevTableSize: cfg.maglevTableSize,
      mapSizes: cfg.mapSizes,
      icmpRatePerSec: cfg.icmpRatePerSec,
      icmpBurst: cfg.icmpBurst,
      // The agent runs in the host's network namespace: NodePorts answer on loopback there.
      hostNetnsCookie: netnsCookie(),
    });
    try {
      // After an upgrade across layouts, flows the previous programs open until the switch
      // are copied on both sides of it; conntrack matters to the tc programs only.
      switchAt = Date.now();
      const switchStart = performance.now();
      handover = datapath.catchUpMigration(devices);
      strays = datapath.attachDevices(devices, links.map((l) => l.name), xdpPlan); // and off the devices an earlier agent served
      datapath.refreshSnatDevices(links); // before any flow: a tunnel's flows leave from its address
      datapath.completeMigration();
      // From the first catch-up to the last: flows the old programs made in it reach the
      // new ones before their entries do (upgrades only; a restart copies nothing).
      switchMs = Math.round(performance.now() - switchStart);
      datapath.attachCgroup({ path: cfg.cgroupRoot, expect: cfg.cgroupMustBeRoot ? 'hierarchy-root' : 'subtree' }, { pinLinks: true });
    } catch (e) {
      datapath.release();
      throw e;
    }
    for (const m of datapath.migrated) log.info({ ...m, toLayout: LAYOUT_VERSION }, m.fromLayout === LAYOUT_VERSION ? 'map resized, entries kept' : 'map migrated to the new layout');
    log.info({ pinDir: cfg.pinDir, devices, devicesFrom: cfg.devices.length ? 'config' : 'node addresses and default routes', cgroup: cfg.cgroupRoot, snatIPv4, snatIPv6: datapath.snat6.get() || 'none (IPv6 to remote backends dropped)', forwarding: cfg.forwardingMode, xdp: datapath.xdpModes(), ...(datapath.migrated.length ? { switchAt, switchMs } : {}), ...(handover ? { handover } : {}), ...(strays.removed.length ? { detachedElsewhere: strays.removed } : {}), ...(strays.failed.length ? { detachElsewhereFailed: strays.failed } : {}), adopted: datapath.tc.pinReport.adopted.length, created: datapath.tc.pinReport.created.length, hostPorts: datapath.hostPorts?.status() }, 'datapath loaded');

    health.syncNode(node);
    const serviceHealth = new ServiceHealthServers(health, cfg.healthCheckBindAddress, (svc, e) => log.error({ service: svc, err: e.message }, 'cannot serve the health check node port'));
    const writer = new ServiceWriter(datapath.maps, { maglevTableSize: datapath.maglevTableSize });
    // Flows a previous agent left may point at backend ids no backend owns now: keep those
    // ids from new backends until the flows are gone.
    writer.quarantineBackendIds(datapath.maps.ct4.entries().map(([, v]) => v.backendId));

    let reconciler: Reconciler | undefined;
    const staleSockets = StaleUdpSockets.start(datapath, log, metrics);
    // Before any Service is synced: the socket hooks refuse a pod at a ranged LB IP until its namespace is known.
    const netnsSources = NetnsSourceScanner.start(datapath.maps, log, metrics);
    let unfreeable = -1;
    let announcer: Announcer | undefined;
    const onError = (what: string) => (err: unknown, retryInMs: number) => log.warn({ watch: what, err: (err as Error)?.message ?? String(err), retryInMs }, 'watch failed; the datapath keeps its state');
    const sliceIndex = new SliceIndex();
    const services = new Watcher<V1Service>('services', json, '/api/v1/services', {
      onChange: (_k, svc) => {
        reconciler?.serviceChanged(svc);
        announcer?.kick();
        bgp?.kick();
      },
      onError: onError('services'),
    }, { transform: leanService });
    const slices = new Watcher<V1EndpointSlice>('endpointslices', json, '/apis/discovery.k8s.io/v1/endpointslices', {
      onChange: (kind, s) => {
        sliceIndex.update(kind, s);
        reconciler?.sliceChanged(s);
        announcer?.kick();
        bgp?.kick();
      },
      onError: onError('endpointslices'),
    }, { transform: leanSlice });
    // Every Node: this one's addresses and state, and every node's addresses (DSR options
    // naming them, LB IPs and externalIPs that are node addresses).
    const nodes = new Watcher<V1Node>('nodes', json, '/api/v1/nodes', {
      onChange: () => {
        reconciler?.nodeChanged();
        announcer?.kick();
        bgp?.kick();
      },
      onError: onError('nodes'),
    }, { transform: leanNode });
    // L2 announcements: the policies (a cluster without the CRD announces nothing) and every
    // node's heartbeat Lease. Neither holds up the datapath's first sync.
    const quietWhenMissing = (what: string) => {
      let missing = false;
      return (err: unknown, retryInMs: number) => {
        log[missing ? 'debug' : 'warn']({ watch: what, err: (err as Error)?.message, retryInMs, hint: `the ${what} CRD: kubectl apply -f deploy/crds/` }, 'watch failed');
        missing = true;
      };
    };
    const policies = new Watcher<L2PolicyObject & { metadata?: { name?: string } }>('l2announcementpolicies', json, L2_POLICY_PATH, {
      onChange: () => announcer?.kick(),
      onError: quietWhenMissing('l2announcementpolicies'),
    });
    // BGP: peers and advertisements (a cluster without the CRDs announces nothing).
    let bgp: BgpSpeaker | undefined;
    const bgpPeers = new Watcher<CustomObject & { metadata?: { name?: string } }>('bgppeers', json, BGP_PEER_PATH, { onChange: () => bgp?.kick(), onError: quietWhenMissing('bgppeers') });
    const bgpAds = new Watcher<CustomObject & { metadata?: { name?: string } }>('bgpadvertisements', json, BGP_ADVERTISEMENT_PATH, { onChange: () => bgp?.kick(), onError: quietWhenMissing('bgpadvertisements') });
    const leases = new Watcher<V1Lease>('heartbeats', json, `/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(cfg.namespace)}/leases`, {
      onChange: (kind, lease) => announcer?.leaseChanged(kind, lease),
      onError: onError('heartbeats'),
    }, { labelSelector: `${HEARTBEAT_LABEL}=${HEARTBEAT_KIND}` });

    reconciler = new Reconciler({
      source: { services: () => services.list(), service: (ns, name) => services.get(ns, name), slices: () => slices.list(), slicesOf: (ns, name) => sliceIndex.of(ns, name), node: () => nodes.get(undefined, cfg.nodeName), nodes: () => nodes.list() },
      writer,
      nodeAddresses: new NodeAddressWriter(datapath.maps.node4_addrs),
      ...(cfg.snatIPv4 ? {} : { snat4: datapath.snat4 }), ...(cfg.snatIPv6 ? {} : { snat6: datapath.snat6 }),
      maps: datapath.maps,
      health,
      serviceHealth,
      metrics,
      log,
      events: eventSink(access, 'ferry', cfg.nodeName),
      minSyncPeriodMs: cfg.minSyncPeriodMs,
      syncPeriodMs: cfg.syncPeriodSeconds * 1000,
      fullSyncPeriodMs: cfg.fullSyncPeriodSeconds * 1000,
      extraNodeAddresses: cfg.nodePortAddresses,
      nodeName: cfg.nodeName,
      // BGP announces a new Service's address once its frontends are in the maps, not what did not fit.
      onSynced: () => bgp?.kick(),
      onUdpBackendsRemoved: () => staleSockets.sweep('a UDP backend removed'),
      reclaimIds: () => {
        // A conntrack walk: not again while the retired ids are those a walk could not free
        // (their flows live on; the periodic GC frees them when they end).
        if (writer.retiredBackendIds === 0 || writer.retiredBackendIds === unfreeable) return 0;
        const o = collectOrphanFlows(datapath.maps, writer, metrics);
        const freed = writer.releaseRetiredBackends(o.backendIdsInFlows);
        unfreeable = writer.retiredBackendIds;
        return freed;
      },
    });
    const frameSender = new FrameSender();
    // Bounded: a thousand addresses taken over at once must not be a thousand requests at once.
    const announceEvents = boundedEventSink(eventSink(access, 'ferry', cfg.nodeName), (msg, err) => log.debug(err === undefined ? {} : { err: (err as Error).message }, msg));
    const l2Interfaces = (names: readonly string[]) => interfaceInfos(names, (device, err) => log.warn({ device, err: err.message }, 'this device answers no ARP for L2 announcements'));
    // The devices ARP is answered on follow the tc devices (hotplug: DeviceScanner).
    let l2Devices = l2Interfaces(devices);
    announcer = new Announcer({
      nodeName: cfg.nodeName,
      devices: () => l2Devices,
      source: { services: () => services.list(), service: (ns, name) => services.get(ns, name), slices: () => slices.list(), nodes: () => nodes.list(), policies: () => policies.list(), synced: () => policies.hasSynced && leases.hasSynced },
      heartbeat: new HeartbeatWriter(json, cfg.namespace, cfg.nodeName),
      l2: new L2AddressWriter(datapath.maps.l2_owned),
      sendFrames: (ifindex, frames) => void frameSender.send(ifindex, frames),
      events: announceEvents,
      metrics,
      log: log.child({ part: 'l2' }),
      leaseDurationMs: cfg.l2LeaseDurationSeconds * 1000,
      renewIntervalMs: cfg.l2RenewIntervalMs,
      stopHoldMs: cfg.l2StopHoldSeconds * 1000,
    });
    bgp = new BgpSpeaker({
      source: {
        node: () => nodes.get(undefined, cfg.nodeName), nodes: () => nodes.list(), services: () => services.list(), slices: () => slices.list(),
        peers: () => bgpPeers.list(), advertisements: () => bgpAds.list(),
        synced: () => bgpPeers.hasSynced && bgpAds.hasSynced && (reconciler?.syncs ?? 0) > 0,
        datapathHealthy: () => health.isHealthy(),
        unprogrammed: () => new Set(reconciler?.failures.map((f) => f.service) ?? []),
      },
      frr: new Vtysh({ path: cfg.vtyshPath, pathspace: cfg.frrPathspace }),
      password: (ref) => secretValue(json, cfg.namespace, ref),
      events: announceEvents,
      metrics,
      log: log.child({ part: 'bgp' }),
    });
    const synced = [services, slices, nodes] as unknown as Watcher<never>[];
    const watchers = [...synced, policies, leases, bgpPeers, bgpAds] as unknown as Watcher<never>[];
    const agent = new Agent(cfg, log, datapath, reconciler, writer, metrics, watchers, serviceHealth, announcer, bgp, staleSockets, netnsSources);
    agent.servers.push(...early.splice(0)); // the agent closes them from now on
    agent.frameSender = frameSender;
    try {
      // FERRY_CPU_PROFILE=file: a CPU profile of the list and first sync (node --cpu-prof
      // cannot be used: its timer signals interrupt the BPF verifier at load).
      const profile = process.env.FERRY_CPU_PROFILE ? await startCpuProfile() : undefined;
      const watching = Date.now();
      for (const w of watchers) w.start();
      // Never act on a partial cache.
      await Promise.all(synced.map((w) => w.synced));
      const listed = Date.now();
      await reconciler.syncNow();
      reconciler.start();
      const done = Date.now();
      if (profile) await profile.stopTo(process.env.FERRY_CPU_PROFILE!);
      // The start's garbage (list pages, the first plan) is most of the heap now: collect it
      // once, so the heap the agent keeps is near what it holds (AGENT_NODE_FLAGS exposes gc).
      (globalThis as { gc?: () => void }).gc?.();
      // ms: from the start; loadMs: the datapath loaded and attached, the maps read back (restoreMs of it); listMs: the caches listed; syncMs: the first sync.
      log.info({ ms: done - started, loadMs: watching - started, restoreMs: writer.restoreMs, listMs: listed - watching, syncMs: done - listed, services: services.list().length, slices: slices.list().length, frontends: reconciler.frontendCount }, 'initial sync done');
      health.markReady();
      if (cfg.metricsBindAddress) agent.servers.push(await agent.startMetricsServer(cfg.metricsBindAddress));
      agent.collect(); // and so the map fill is known before the first scrape
      agent.gcTimer = setInterval(() => agent.collect(), cfg.ctGcIntervalSeconds * 1000);
      agent.gcTimer.unref();
      agent.deviceScanner = new DeviceScanner(datapath, cfg, view.addresses, log, (attached) => {
        l2Devices = l2Interfaces(attached);
        announcer?.kick();
      });
      agent.deviceScanner.start(cfg.deviceScanSeconds * 1000);
      agent.routeMonitor = watchRouteChanges(datapath.hopEpoch, log.child({ part: 'routes' }), { metrics });
      announcer.start();
      bgp.start();
    } catch (e) {
      await agent.stop();
      throw e;
    }
    return agent;
  }

  /**
   * Conntrack GC, in the background every ctGcIntervalSeconds: expired flows, flows of
   * backends or frontends that are gone, retired backend ids no flow uses any more; then
   * connected UDP sockets to backends their Service lost. The conntrack fill it sees is
   * what /metrics reports, so a scrape never walks a map.
   */
  collect(): void {
    try {
      this.sampledFill = collectGarbage(this.datapath.maps, this.writer, this.metrics);
    } catch (e) {
      this.log.error({ err: (e as Error).message }, 'conntrack GC failed');
    }
    // A backend can leave one Service while another keeps it (no removal for the sync to see).
    this.staleSockets.sweep('periodic');
    this.datapath.hostPorts?.recheck(); // a sysctl may move the ephemeral range into the SNAT range
  }

  /** The gauges a scrape reads (see refreshDatapathGauges: no map walk). */
  refreshDatapathMetrics(): void {
    refreshDatapathGauges(this.metrics, this.datapath.maps, { ...this.writer.entryCounts(), ...this.sampledFill });
  }

  /** What /status answers: the last sync, what could not be programmed, announcements, sockets, routes, XDP, devices. */
  status() {
    return {
      node: this.cfg.nodeName,
      lastSync: this.reconciler.syncs > 0 ? new Date(this.reconciler.lastSyncAt).toISOString() : undefined,
      unprogrammed: this.reconciler.failures.slice(0, 100),
      conflicts: this.reconciler.conflictCount,
      l2: this.announcer.status().slice(0, 1000),
      bgp: this.bgp.status(),
      udpSockets: this.staleSockets.status(),
      routes: this.routeMonitor?.status(),
      hostPorts: this.datapath.hostPorts?.status(),
      netnsSources: this.netnsSources.status(),
      xdp: this.datapath.xdpDevices(),
      snatDevices: this.datapath.snatDeviceList(), vlansNotServed: this.deviceScanner?.vlansNotServed() ?? [],
    };
  }

  private startMetricsServer(addr: string): Promise<Server> {
    return serveRoutes(addr, {
      '/proxyMode': (_req, res) => res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8' }).end('ebpf'),
      '/status': (_req, res) => res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify(this.status())),
      '/metrics': (_req, res) => {
        try {
          this.refreshDatapathMetrics();
        } catch (e) {
          this.log.warn({ err: (e as Error).message }, 'cannot read datapath counters');
        }
        this.metrics.registry.metrics().then(
          (body) => res.writeHead(200, { 'Content-Type': this.metrics.registry.contentType }).end(body),
          (e: Error) => res.writeHead(500).end(e.message),
        );
      },
    });
  }

  /** Stop watching and serving; leave the datapath running (pinned) for the next agent. */
  async stop(): Promise<void> {
    if (this.gcTimer) clearInterval(this.gcTimer);
    this.deviceScanner?.stop();
    this.routeMonitor?.stop();
    this.netnsSources.stop();
    // First, so the addresses this node answers for are held over the restart.
    await this.announcer.stop();
    await this.bgp.stop();
    this.frameSender?.close();
    await Promise.all(this.watchers.map((w) => w.stop()));
    await this.reconciler.stop();
    await this.serviceHealth.close();
    for (const s of this.servers.splice(0)) await closeServer(s);
    this.staleSockets.close();
    this.datapath.release();
  }
}
