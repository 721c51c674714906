// The whole picture for one node: every Service and EndpointSlice → the frontends to
// program, the health-check servers to run, and what was skipped or refused and why.
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { isIP, isIPv4, isIPv6 } from 'node:net';
import { orNone, type FrontendSpec } from './frontend.js';
import { FrontendTable } from './frontend-table.js';
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
  /** Frontends two Services asked for: the one that lost, and to whom. */
  conflicts: FrontendConflict[];
  ignored: string[];
  noLocalEndpoints: { internal: number; external: number };
}

export interface FrontendConflict {
  /** namespace/name of the Service that does not get the frontend. */
  service: string;
  frontend: string;
  kind: FrontendSpec['kind'];
  /** namespace/name of the Service that has it, and as what; or a node, whose address it is. */
  owner: string;
  ownerKind: FrontendSpec['kind'] | 'NodeAddress';
}

export function conflictText(c: FrontendConflict): string {
  if (c.ownerKind === 'NodeAddress') return `${c.kind} ${c.frontend} of ${c.service} is a node's address: the Service gets its own ports there, the node keeps every other`;
  return `${c.frontend} (${c.kind}) of ${c.service} is already ${c.owner}'s ${c.ownerKind}: not programmed for ${c.service}`;
}

export const ZONE_LABEL = 'topology.kubernetes.io/zone';

/** A Node's InternalIP and ExternalIP addresses of one family (none with a zone). */
function nodeAddressesOf(node: V1Node, family: (a: string) => boolean): string[] {
  return (node.status?.addresses ?? []).filter((a) => (a.type === 'InternalIP' || a.type === 'ExternalIP') && family(a.address) && !a.address.includes('%')).map((a) => a.address);
}

/** A Node's IPv4 InternalIP and ExternalIP addresses. */
export const nodeAddresses = (node: V1Node): string[] => nodeAddressesOf(node, isIPv4);

/** This node as the model needs it (name, zone, its NodePort addresses of each family:
 * its InternalIP and ExternalIP ones and `extraAddresses`), and every node's addresses. */
export function nodeView(node: V1Node, extraAddresses: string[] = [], allNodes: readonly V1Node[] = []): NodeView {
  const addresses = [...new Set([...nodeAddresses(node), ...extraAddresses.filter((a) => isIPv4(a))])];
  const addresses6 = [...new Set([...nodeAddressesOf(node, isIPv6), ...extraAddresses.filter((a) => isIPv6(a))])];
  return {
    name: node.metadata?.name ?? '',
    zone: node.metadata?.labels?.[ZONE_LABEL],
    addresses,
    addresses6,
    clusterNodeAddresses: new Set([...addresses, ...addresses6, ...allNodes.flatMap((n) => nodeAddressesOf(n, (a) => isIP(a) !== 0))]),
  };
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
    else out.rejected.push({ kind: 'EndpointSlice', namespace: String(s.metadata?.namespace ?? ''), name: String(s.metadata?.name ?? ''), error: v.error });
  }
  const v = validateService(svc);
  if (!v.ok) {
    out.rejected.push({ kind: 'Service', namespace: String(svc.metadata?.namespace ?? ''), name: String(svc.metadata?.name ?? ''), error: v.error });
    return out;
  }
  try {
    out.skipped = skipReason(svc);
    if (!out.skipped) out.result = serviceFrontends(svc, good, node, name);
  } catch (e) {
    // A shape the checks above did not foresee: this Service is refused, never the sync.
    out.skipped = undefined;
    out.rejected.push({ kind: 'Service', namespace: String(svc.metadata?.namespace ?? ''), name: String(svc.metadata?.name ?? ''), error: `cannot be read: ${(e as Error).message}` });
  }
  out.rejected = orNone(out.rejected);
  return out;
}

/** Merge per-Service outcomes: allocated addresses first (frontend-table.ts), then name order. */
export function combine(outcomes: Iterable<ServiceOutcome>, orphanRejections: Rejected[] = []): DesiredState {
  const table = new FrontendTable();
  for (const o of outcomes) table.set(o.service, o);
  return table.snapshot(orphanRejections);
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
