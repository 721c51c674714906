// The whole picture for one node: every Service and EndpointSlice → the frontends to
// program, the health-check servers to run, and what was skipped or refused and why.
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { isIPv4 } from 'node:net';
import type { FrontendSpec } from './frontend.js';
import { frontendId } from './frontend.js';
import { LABEL_SERVICE_NAME, serviceFrontends, serviceName, skipReason, type NodeView, type SkipReason } from './service.js';
import { validateEndpointSlice, validateService } from './validate.js';

export interface Rejected {
  kind: 'Service' | 'EndpointSlice';
  namespace: string;
  name: string;
  error: string;
}

export interface HealthCheck {
  service: string; // namespace/name
  nodePort: number;
  localReadyEndpoints: number;
}

export interface DesiredState {
  frontends: FrontendSpec[];
  healthChecks: HealthCheck[];
  rejected: Rejected[];
  skipped: Array<{ service: string; reason: SkipReason }>;
  /** Frontend conflicts: a later Service asking for a frontend an earlier one has. */
  conflicts: string[];
  ignored: string[];
  noLocalEndpoints: { internal: number; external: number };
}

export const ZONE_LABEL = 'topology.kubernetes.io/zone';

/** This node as the model needs it: name, zone, IPv4 InternalIP/ExternalIP addresses. */
export function nodeView(node: V1Node, extraAddresses: string[] = []): NodeView {
  const addrs = (node.status?.addresses ?? []).filter((a) => (a.type === 'InternalIP' || a.type === 'ExternalIP') && isIPv4(a.address)).map((a) => a.address);
  return { name: node.metadata?.name ?? '', zone: node.metadata?.labels?.[ZONE_LABEL], addresses: [...new Set([...addrs, ...extraAddresses])] };
}

/** What one Service contributes, computed on its own so a sync can redo only what changed. */
export interface ServiceOutcome {
  service: string;
  rejected: Rejected[];
  skipped?: SkipReason;
  result?: ReturnType<typeof serviceFrontends>;
}

export function serviceOutcome(svc: V1Service, slices: V1EndpointSlice[], node: NodeView): ServiceOutcome {
  const name = serviceName(svc);
  const out: ServiceOutcome = { service: name, rejected: [] };
  const good: V1EndpointSlice[] = [];
  for (const s of slices) {
    const v = validateEndpointSlice(s);
    if (v.ok) good.push(s);
    else out.rejected.push({ kind: 'EndpointSlice', namespace: s.metadata?.namespace ?? '', name: s.metadata?.name ?? '', error: v.error });
  }
  const v = validateService(svc);
  if (!v.ok) {
    out.rejected.push({ kind: 'Service', namespace: svc.metadata?.namespace ?? '', name: svc.metadata?.name ?? '', error: v.error });
    return out;
  }
  out.skipped = skipReason(svc);
  if (!out.skipped) out.result = serviceFrontends(svc, good, node);
  return out;
}

/** Merge per-Service outcomes, in name order: the first Service to claim a frontend keeps it. */
export function combine(outcomes: Iterable<ServiceOutcome>, orphanRejections: Rejected[] = []): DesiredState {
  const out: DesiredState = { frontends: [], healthChecks: [], rejected: [...orphanRejections], skipped: [], conflicts: [], ignored: [], noLocalEndpoints: { internal: 0, external: 0 } };
  const taken = new Map<string, string>();
  const sorted = [...outcomes].sort((a, b) => (a.service < b.service ? -1 : a.service > b.service ? 1 : 0));
  for (const o of sorted) {
    out.rejected.push(...o.rejected);
    if (o.skipped) out.skipped.push({ service: o.service, reason: o.skipped });
    const r = o.result;
    if (!r) continue;
    for (const f of r.frontends) {
      const id = frontendId(f);
      const owner = taken.get(id);
      if (owner) {
        if (owner !== o.service) out.conflicts.push(`${id}: wanted by ${o.service}, already ${owner}'s`);
        continue;
      }
      taken.set(id, o.service);
      out.frontends.push(f);
    }
    if (r.health) out.healthChecks.push({ service: o.service, ...r.health });
    for (const p of r.noLocalEndpoints) out.noLocalEndpoints[p]++;
    out.ignored.push(...r.ignored.map((i) => `${o.service}: ${i}`));
  }
  return out;
}

/** The slices of each Service, by `namespace/name` (from the service-name label). */
export function slicesByService(slices: readonly V1EndpointSlice[]): Map<string, V1EndpointSlice[]> {
  const m = new Map<string, V1EndpointSlice[]>();
  for (const s of slices) {
    const owner = s.metadata?.labels?.[LABEL_SERVICE_NAME];
    if (!owner) continue;
    const key = `${s.metadata?.namespace}/${owner}`;
    if (!m.has(key)) m.set(key, []);
    m.get(key)!.push(s);
  }
  return m;
}

export function desiredState(services: V1Service[], slices: V1EndpointSlice[], node: NodeView): DesiredState {
  const bySvc = slicesByService(slices);
  return combine(services.map((svc) => serviceOutcome(svc, bySvc.get(serviceName(svc)) ?? [], node)));
}
