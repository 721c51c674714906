// Metrics, with kube-proxy's names (so dashboards and alerts keep working after the switch)
// and ferry's own (ferry_*): map fill, datapath drops and forwarded traffic, CT/NAT fill.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics, exponentialBuckets } from 'prom-client';
import { counterTotal } from '../datapath/counters.js';
import { DropReason, Stat, type MapName } from '../datapath/layouts.js';
import type { DatapathReader } from '../datapath/pinned-view.js';

export class AgentMetrics {
  readonly registry = new Registry();
  private readonly p = 'kubeproxy_';
  readonly syncDuration: Histogram;
  readonly syncFullDuration: Histogram;
  readonly syncPartialDuration: Histogram;
  readonly lastSync: Gauge;
  readonly lastQueued: Gauge;
  readonly programmingDuration: Histogram;
  readonly endpointChangesPending: Gauge;
  readonly endpointChangesTotal: Counter;
  readonly serviceChangesPending: Gauge;
  readonly serviceChangesTotal: Counter;
  readonly noLocalEndpoints: Gauge;
  readonly healthz: Counter;
  readonly livez: Counter;
  readonly mapEntries: Gauge;
  readonly mapCapacity: Gauge;
  readonly datapathDrops: Gauge;
  readonly datapathForwarded: Gauge;
  readonly rejectedObjects: Counter;
  readonly ctCollected: Counter;
  readonly routeChanges: Counter;
  readonly routeMonitorUp: Gauge;
  readonly syncErrors: Counter;
  readonly frontendConflicts: Gauge;
  readonly servicesUnprogrammed: Gauge;
  readonly l2Owned: Gauge;
  readonly garpSent: Counter;
  readonly l2Moves: Counter;
  readonly heartbeats: Counter;
  readonly bgpPrefixes: Gauge;
  readonly bgpApplyDuration: Histogram;
  readonly bgpApplyErrors: Counter;
  readonly bgpSessions: Gauge;
  readonly bgpConfigLost: Counter;
  readonly udpSocketsTerminated: Counter;
  readonly netnsSources: Gauge;
  readonly netnsSourcesFull: Gauge;

  constructor() {
    const r = [this.registry];
    // Process, heap, event-loop lag and GC pauses (nodejs_gc_duration_seconds), as every Node service has.
    collectDefaultMetrics({ register: this.registry });
    const buckets = exponentialBuckets(0.001, 2, 15);
    this.syncDuration = new Histogram({ name: `${this.p}sync_proxy_rules_duration_seconds`, help: 'SyncProxyRules latency in seconds', buckets, registers: r });
    this.syncFullDuration = new Histogram({ name: `${this.p}sync_full_proxy_rules_duration_seconds`, help: 'SyncProxyRules latency in seconds for full resyncs', buckets, registers: r });
    this.syncPartialDuration = new Histogram({ name: `${this.p}sync_partial_proxy_rules_duration_seconds`, help: 'SyncProxyRules latency in seconds for partial resyncs', buckets, registers: r });
    this.lastSync = new Gauge({ name: `${this.p}sync_proxy_rules_last_timestamp_seconds`, help: 'The last time proxy rules were successfully synced', registers: r });
    this.lastQueued = new Gauge({ name: `${this.p}sync_proxy_rules_last_queued_timestamp_seconds`, help: 'The last time a sync of proxy rules was queued', registers: r });
    this.programmingDuration = new Histogram({
      name: `${this.p}network_programming_duration_seconds`,
      help: 'In Cluster Network Programming Latency in seconds',
      buckets: [0.25, 0.5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 90, 120, 150, 180, 210, 240, 270, 300],
      registers: r,
    });
    this.endpointChangesPending = new Gauge({ name: `${this.p}sync_proxy_rules_endpoint_changes_pending`, help: 'Pending proxy rules Endpoint changes', registers: r });
    this.endpointChangesTotal = new Counter({ name: `${this.p}sync_proxy_rules_endpoint_changes_total`, help: 'Cumulative proxy rules Endpoint changes', registers: r });
    this.serviceChangesPending = new Gauge({ name: `${this.p}sync_proxy_rules_service_changes_pending`, help: 'Pending proxy rules Service changes', registers: r });
    this.serviceChangesTotal = new Counter({ name: `${this.p}sync_proxy_rules_service_changes_total`, help: 'Cumulative proxy rules Service changes', registers: r });
    this.noLocalEndpoints = new Gauge({ name: `${this.p}sync_proxy_rules_no_local_endpoints_total`, help: 'Number of services with a Local traffic policy and no endpoints', labelNames: ['traffic_policy'], registers: r });
    this.healthz = new Counter({ name: `${this.p}proxy_healthz_total`, help: 'Cumulative proxy healthz HTTP status', labelNames: ['code'], registers: r });
    this.livez = new Counter({ name: `${this.p}proxy_livez_total`, help: 'Cumulative proxy livez HTTP status', labelNames: ['code'], registers: r });
    this.mapEntries = new Gauge({ name: 'ferry_map_entries', help: 'Entries in each datapath map', labelNames: ['map'], registers: r });
    this.mapCapacity = new Gauge({ name: 'ferry_map_capacity', help: 'Capacity (max entries) of each datapath map', labelNames: ['map'], registers: r });
    this.datapathDrops = new Gauge({ name: 'ferry_datapath_drops_total', help: 'Packets dropped by the datapath, by reason (read from the BPF counters)', labelNames: ['reason'], registers: r });
    this.datapathForwarded = new Gauge({ name: 'ferry_datapath_packets_total', help: 'Packets handled by the datapath, by path (read from the BPF counters)', labelNames: ['path'], registers: r });
    this.rejectedObjects = new Counter({ name: 'ferry_rejected_objects_total', help: 'Services and EndpointSlices skipped as malformed', labelNames: ['kind'], registers: r });
    this.routeChanges = new Counter({ name: 'ferry_route_changes_total', help: 'Route, link or neighbour changes after which flows route again by their next packet (kept next hops dropped)', registers: r });
    this.routeMonitorUp = new Gauge({ name: 'ferry_route_monitor_up', help: '1 while ip monitor runs (kept next hops follow route changes at once); 0 while not (within a second)', registers: r });
    this.ctCollected = new Counter({ name: 'ferry_conntrack_collected_total', help: 'Expired conntrack and NAT entries removed', labelNames: ['map'], registers: r });
    this.frontendConflicts = new Gauge({ name: 'ferry_frontend_conflicts', help: 'Frontends two Services ask for (kind=service: one is not programmed) and LoadBalancer IPs or externalIPs that are node addresses (kind=node-address)', labelNames: ['kind'], registers: r });
    this.servicesUnprogrammed = new Gauge({ name: 'ferry_services_unprogrammed', help: 'Services the datapath maps could not take in the last sync (each keeps what it had; see ferry status)', registers: r });
    this.l2Owned = new Gauge({ name: 'ferry_l2_owned_addresses', help: 'Addresses this node answers ARP for (L2 announcements)', registers: r });
    this.garpSent = new Counter({ name: 'ferry_l2_gratuitous_arps_total', help: 'Gratuitous ARPs sent after taking an address over', registers: r });
    this.l2Moves = new Counter({ name: 'ferry_l2_takeovers_total', help: 'Addresses this node took over from another node', registers: r });
    this.heartbeats = new Counter({ name: 'ferry_l2_heartbeats_total', help: 'Heartbeat Lease renewals, by result (ok, failed)', labelNames: ['result'], registers: r });
    this.bgpPrefixes = new Gauge({ name: 'ferry_bgp_prefixes', help: 'Prefixes this node announces over BGP', registers: r });
    this.bgpApplyDuration = new Histogram({ name: 'ferry_bgp_apply_duration_seconds', help: 'Time to apply a change of the BGP configuration to FRR', buckets: exponentialBuckets(0.005, 2, 12), registers: r });
    this.bgpApplyErrors = new Counter({ name: 'ferry_bgp_apply_errors_total', help: 'Failed applies of the BGP configuration to FRR', registers: r });
    this.bgpSessions = new Gauge({ name: 'ferry_bgp_sessions', help: 'BGP sessions by peer and state (1 for the current state)', labelNames: ['peer', 'state'], registers: r });
    this.bgpConfigLost = new Counter({ name: 'ferry_bgp_frr_config_lost_total', help: 'Times FRR was found without peers ferry configured (a daemon restarted empty) and the configuration was applied again', registers: r });
    this.udpSocketsTerminated = new Counter({ name: 'ferry_udp_sockets_terminated_total', help: 'Connected UDP sockets destroyed because their backend left their Service', registers: r });
    this.netnsSources = new Gauge({ name: 'ferry_netns_sources', help: 'Network namespaces whose address the socket hooks know (loadBalancerSourceRanges)', registers: r });
    this.netnsSourcesFull = new Gauge({ name: 'ferry_netns_sources_left_out', help: 'Network namespaces left out of lb4_netns_sources because it is full (their pods are refused at ranged LoadBalancer IPs)', registers: r });
    this.syncErrors = new Counter({ name: 'ferry_sync_errors_total', help: 'Failed syncs of the datapath maps, by error code', labelNames: ['code'], registers: r });
  }
}

/** The maps whose fill /metrics reports. */
export const FILL_MAPS: MapName[] = ['lb4_services', 'lb4_backends', 'lb4_reverse_nat', 'lb4_sock_rev', 'lb6_services', 'ct4', 'nat4', 'ct6'];

/**
 * Per scrape: the datapath's counters (two per-CPU arrays, one lookup per path and reason)
 * and the map fill as last known (`fill`: the writer's own count of what it wrote, the
 * conntrack GC's of what it scanned). A scrape never walks a map: with 131k flows that
 * would be a stall of the event loop per scrape.
 */
export function refreshDatapathGauges(metrics: AgentMetrics, maps: Pick<DatapathReader, 'ferry_stats' | 'ferry_drops'> & Partial<Record<MapName, { maxEntries: number }>>, fill: Record<string, number>): void {
  for (const name of Object.keys(Stat)) if (name !== 'STAT_MAX') metrics.datapathForwarded.set({ path: name.slice(5).toLowerCase() }, Number(counterTotal(maps, name).packets));
  for (const name of Object.keys(DropReason)) if (name !== 'DROP_NONE' && name !== 'DROP_REASON_MAX') metrics.datapathDrops.set({ reason: name.slice(5).toLowerCase() }, Number(counterTotal(maps, name).packets));
  for (const name of FILL_MAPS) {
    const capacity = maps[name]?.maxEntries;
    if (capacity !== undefined) metrics.mapCapacity.set({ map: name }, capacity);
    if (fill[name] !== undefined) metrics.mapEntries.set({ map: name }, fill[name]);
  }
}
