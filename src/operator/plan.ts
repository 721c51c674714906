// One pass of the operator, pure: Services and pools as the API server has them in, what
// to write back (only what changes) and which Events to post out. The operator does the
// I/O; this decides, so that every rule is testable without an API server.
import type { V1Service, V1ServiceStatus } from '@kubernetes/client-node';
import { allocate, type Outcome, type PoolUsage } from '../ipam/allocator.js';
import { poolInput, type PoolObject } from '../ipam/pool-resource.js';
import { isOurs, serviceInput, serviceKey, type ClassPolicy } from '../ipam/service-request.js';
import { CONDITION_IP_ALLOCATED, clearedServiceStatus, poolStatusFor, serviceStatusFor, type PoolStatus } from '../ipam/status.js';

export interface ServiceWrite {
  key: string;
  service: V1Service;
  status: V1ServiceStatus;
}

export interface PoolWrite {
  name: string;
  pool: PoolObject;
  status: PoolStatus;
}

export interface PlannedEvent {
  namespace: string;
  name: string;
  uid?: string;
  type: 'Normal' | 'Warning';
  reason: 'IPAllocated' | 'AllocationFailed' | 'IPReleased';
  message: string;
}

export interface Plan {
  serviceWrites: ServiceWrite[];
  poolWrites: PoolWrite[];
  events: PlannedEvent[];
  /** Every Service LB-IPAM serves, and its outcome. */
  outcomes: Map<string, Outcome>;
  pools: Map<string, PoolUsage>;
}

const hasOurCondition = (s: V1Service) => (s.status?.conditions ?? []).some((c) => c.type === CONDITION_IP_ALLOCATED);

/** Does a change to this Service concern LB-IPAM (is it ours, or was it)? */
export const concernsIpam = (s: V1Service, policy: ClassPolicy) => isOurs(s, policy) || hasOurCondition(s);

/** `namespaceLabels`: each namespace's labels by name (pools' namespaceSelectors). */
export function plan(services: readonly V1Service[], pools: readonly PoolObject[], policy: ClassPolicy, now: Date, namespaceLabels: ReadonlyMap<string, Readonly<Record<string, string>>> = new Map()): Plan {
  const ours = services.filter((s) => isOurs(s, policy));
  // A namespace not in the cache yet (its event still on the way) leaves the labels unknown:
  // the allocator then waits where a pool selects by them.
  const allocation = allocate(pools.map(poolInput), ours.map((s) => serviceInput(s, namespaceLabels.get(s.metadata?.namespace ?? 'default'))));
  const out: Plan = { serviceWrites: [], poolWrites: [], events: [], outcomes: allocation.services, pools: allocation.pools };
  const event = (s: V1Service, type: PlannedEvent['type'], reason: PlannedEvent['reason'], message: string) =>
    out.events.push({ namespace: s.metadata?.namespace ?? 'default', name: s.metadata?.name ?? '', ...(s.metadata?.uid ? { uid: s.metadata.uid } : {}), type, reason, message });
  const released = new Map<string, string[]>();
  for (const r of allocation.released) released.set(r.service, [...(released.get(r.service) ?? []), `${r.ip} released: ${r.why}`]);

  for (const s of ours) {
    const key = serviceKey(s);
    const o = allocation.services.get(key)!;
    if (o.reason === 'NamespacePending') continue; // nothing to say yet: the namespace's event brings the next pass
    const status = serviceStatusFor(s.status, o, now);
    if (!status) continue;
    out.serviceWrites.push({ key, service: s, status });
    for (const m of released.get(key) ?? []) event(s, 'Warning', 'IPReleased', m);
    const before = (s.status?.loadBalancer?.ingress ?? []).map((i) => i.ip).join(',');
    const prev = (s.status?.conditions ?? []).find((c) => c.type === CONDITION_IP_ALLOCATED);
    if (o.reason === 'Allocated' && o.ips.join(',') !== before) event(s, 'Normal', 'IPAllocated', o.message);
    else if (o.reason !== 'Allocated' && (prev?.reason !== o.reason || prev?.message !== o.message)) event(s, 'Warning', 'AllocationFailed', `${o.reason}: ${o.message}`);
  }
  for (const s of services) {
    if (isOurs(s, policy)) continue;
    const status = clearedServiceStatus(s.status);
    if (!status) continue;
    out.serviceWrites.push({ key: serviceKey(s), service: s, status });
    const ips = (s.status?.loadBalancer?.ingress ?? []).map((i) => i.ip).filter(Boolean);
    if (ips.length) event(s, 'Normal', 'IPReleased', `${ips.join(', ')} released: the Service is no longer a LoadBalancer that ferry serves (type ${s.spec?.type ?? 'ClusterIP'}${s.spec?.loadBalancerClass ? `, class ${s.spec.loadBalancerClass}` : ''})`);
  }
  for (const p of pools) {
    const name = p.metadata?.name ?? '';
    const usage = allocation.pools.get(name);
    const status = usage && poolStatusFor(p.status, usage, now);
    if (status) out.poolWrites.push({ name, pool: p, status });
  }
  return out;
}
