// The operator's metrics: leadership, reconcile passes, what Services got, pool usage,
// status writes, Events, and the announcement objects' acceptance.
import { Counter, Gauge, Histogram, Registry, exponentialBuckets } from 'prom-client';

export class OperatorMetrics {
  readonly registry = new Registry();
  readonly leader: Gauge;
  readonly reconcileDuration: Histogram;
  readonly reconciles: Counter;
  readonly services: Gauge;
  readonly poolAddresses: Gauge;
  readonly statusWrites: Counter;
  readonly eventsDropped: Counter;
  readonly eventErrors: Counter;
  readonly released: Counter;
  readonly announcementObjects: Gauge;

  constructor() {
    const r = [this.registry];
    this.leader = new Gauge({ name: 'ferry_operator_leader', help: '1 while this replica holds the leader Lease and allocates', registers: r });
    this.reconcileDuration = new Histogram({ name: 'ferry_operator_reconcile_duration_seconds', help: 'Time of one allocation pass (decision only, not the writes)', buckets: exponentialBuckets(0.0005, 2, 16), registers: r });
    this.reconciles = new Counter({ name: 'ferry_operator_reconciles_total', help: 'Allocation passes, by result', labelNames: ['result'], registers: r });
    this.services = new Gauge({ name: 'ferry_operator_services', help: 'LoadBalancer Services the operator serves, by the reason of their IPAllocated condition', labelNames: ['reason'], registers: r });
    this.poolAddresses = new Gauge({ name: 'ferry_operator_pool_addresses', help: 'Addresses of each pool, by state (total, used, available)', labelNames: ['pool', 'state'], registers: r });
    this.statusWrites = new Counter({ name: 'ferry_operator_status_writes_total', help: 'Status writes, by kind (service, pool, l2announcementpolicy, bgppeer, bgpadvertisement) and result (written, conflict, gone, failed)', labelNames: ['kind', 'result'], registers: r });
    this.eventsDropped = new Counter({ name: 'ferry_operator_events_dropped_total', help: 'Events not posted because too many were waiting', registers: r });
    this.eventErrors = new Counter({ name: 'ferry_operator_event_errors_total', help: 'Events the API server refused or did not take', registers: r });
    this.announcementObjects = new Gauge({ name: 'ferry_operator_announcement_objects', help: 'L2AnnouncementPolicy, BGPPeer and BGPAdvertisement objects, by kind and whether the agents accept them (the leader counts)', labelNames: ['kind', 'accepted'], registers: r });
    this.released = new Counter({ name: 'ferry_operator_addresses_released_total', help: 'Addresses taken back from Services (out of every pool, request changed, no longer ours)', registers: r });
  }
}
