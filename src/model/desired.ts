// The whole picture for one node: every Service and EndpointSlice → the frontends to
// program, the health-check servers to run, and what was skipped or refused and why.
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { isIPv4 } from 'node:net';
import type { FrontendSpec } from '../datapath/spec.js';
import { frontendId } from '../datapath/spec.js';
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

export function desiredState(services: V1Service[], slices: V1EndpointSlice[], node: NodeView): DesiredState {
  const out: DesiredState = { frontends: [], healthChecks: [], rejected: [], skipped: [], conflicts: [], ignored: [], noLocalEndpoints: { internal: 0, external: 0 } };
  const slicesBySvc = new Map<string, V1EndpointSlice[]>();
  for (const s of slices) {
    const v = validateEndpointSlice(s);
    if (!v.ok) {
      out.rejected.push({ kind: 'EndpointSlice', namespace: s.metadata?.namespace ?? '', name: s.metadata?.name ?? '', error: v.error });
      continue;
    }
    const owner = s.metadata?.labels?.[LABEL_SERVICE_NAME];
    if (!owner) continue;
    const key = `${s.metadata!.namespace}/${owner}`;
    if (!slicesBySvc.has(key)) slicesBySvc.set(key, []);
    slicesBySvc.get(key)!.push(s);
  }
  const taken = new Map<string, string>();
  const sorted = [...services].sort((a, b) => serviceName(a).localeCompare(serviceName(b)));
  for (const svc of sorted) {
    const v = validateService(svc);
    if (!v.ok) {
      out.rejected.push({ kind: 'Service', namespace: svc.metadata?.namespace ?? '', name: svc.metadata?.name ?? '', error: v.error });
      continue;
    }
    const name = serviceName(svc);
    const skip = skipReason(svc);
    if (skip) {
      out.skipped.push({ service: name, reason: skip });
      continue;
    }
    const r = serviceFrontends(svc, slicesBySvc.get(name) ?? [], node);
    for (const f of r.frontends) {
      const id = frontendId(f);
      const owner = taken.get(id);
      if (owner) {
        if (owner !== name) out.conflicts.push(`${id}: wanted by ${name}, already ${owner}'s`);
        continue;
      }
      taken.set(id, name);
      out.frontends.push(f);
    }
    if (r.health) out.healthChecks.push({ service: name, ...r.health });
    for (const p of r.noLocalEndpoints) out.noLocalEndpoints[p]++;
    out.ignored.push(...r.ignored.map((i) => `${name}: ${i}`));
  }
  return out;
}
