// One Service (with its EndpointSlices) → the frontends this node programs, following
// kube-proxy rule for rule (../shared/reference/kube-proxy-semantics.md). Pure: no I/O.
import { isIPv4 } from 'node:net';
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { flat } from './flat-string.js';
import { orNone, type FrontendKind, type FrontendSpec, type ProtoName } from './frontend.js';
import { ipv4InCidr } from '../packet/addr.js';
import { backendsOn as backends, clusterEndpoints, localEndpoints, mergeSlices, portKey, type Endpoint, type NodeContext } from './endpoints.js';
import { ipv6ClusterIP, ipv6Frontends } from './service6.js';

export const LABEL_SERVICE_PROXY_NAME = 'service.kubernetes.io/service-proxy-name';
export const LABEL_HEADLESS = 'service.kubernetes.io/headless';
export const LABEL_SERVICE_NAME = 'kubernetes.io/service-name';
export const DEFAULT_AFFINITY_TIMEOUT = 10800;
/** Per-Service override of the node's forwarding mode for remote backends: snat or dsr. */
export const ANNOTATION_FORWARDING = 'ferry.dev/forwarding';

export interface NodeView extends NodeContext {
  /** This node's IPv4 addresses that serve NodePorts. */
  addresses: string[];
  /** This node's IPv6 addresses that serve NodePorts (from this node's pods and host). */
  addresses6?: string[];
  /** Every node's addresses, this one's included: an LB IP or externalIP that is one of them
   * is shared with that node's own services. */
  clusterNodeAddresses?: ReadonlySet<string>;
}

export type SkipReason = 'service-proxy-name' | 'headless' | 'external-name' | 'no-cluster-ip';

export interface ServiceFrontends {
  /** namespace/name */
  service: string;
  frontends: FrontendSpec[];
  /** kube-proxy's health check node port, when the Service has one (LB + ETP=Local). */
  health?: { nodePort: number; localReadyEndpoints: number };
  /** Ports whose ETP/ITP=Local selection found no local endpoint (for the metric). */
  noLocalEndpoints: Array<'internal' | 'external'>;
  /** Things ignored, for the log (Proxy ipMode, SCTP…). */
  ignored: string[];
  /** LoadBalancer IPs and externalIPs that are a node's address: shared with the node. */
  nodeAddresses: Array<{ address: string; kind: 'LoadBalancer' | 'ExternalIP' }>;
}

export function serviceName(svc: V1Service): string {
  return flat(`${svc.metadata?.namespace}/${svc.metadata?.name}`);
}

/** Why kube-proxy would not program this Service at all (undefined: it would). */
export function skipReason(svc: V1Service): SkipReason | undefined {
  const labels = svc.metadata?.labels ?? {};
  if (LABEL_SERVICE_PROXY_NAME in labels) return 'service-proxy-name';
  if (LABEL_HEADLESS in labels) return 'headless';
  if (svc.spec?.type === 'ExternalName') return 'external-name';
  if (!ipv4ClusterIP(svc) && !ipv6ClusterIP(svc)) return 'no-cluster-ip';
  return undefined;
}

/** An EndpointSlice kube-proxy would ignore. */
export function sliceIgnored(slice: V1EndpointSlice): boolean {
  const labels = slice.metadata?.labels ?? {};
  return LABEL_SERVICE_PROXY_NAME in labels || LABEL_HEADLESS in labels || !labels[LABEL_SERVICE_NAME];
}

/** spec.clusterIPs[i] pairs with spec.ipFamilies[i]; spec.clusterIP is the fallback. */
export function ipv4ClusterIP(svc: V1Service): string | undefined {
  const spec = svc.spec;
  if (!spec) return undefined;
  const ips = spec.clusterIPs && spec.clusterIPs.length > 0 ? spec.clusterIPs : spec.clusterIP ? [spec.clusterIP] : [];
  return ips.find((ip, i) => isIPv4(ip) && (!spec.ipFamilies?.[i] || spec.ipFamilies[i] === 'IPv4'));
}



/**
 * loadBalancerSourceRanges per LB IP (IPv4 ranges, trimmed). If a node address is in a
 * range, traffic whose source is the LB IP itself is allowed too, as kube-proxy does.
 */
function lbSourceRanges(svc: V1Service, lbIPs: string[], node: NodeView): Map<string, string[]> {
  const ranges = (svc.spec?.loadBalancerSourceRanges ?? []).map((r) => r.trim()).filter((r) => isIPv4(r.split('/')[0] ?? ''));
  const out = new Map<string, string[]>();
  if (ranges.length === 0) return out;
  const nodeInRange = node.addresses.some((a) => ranges.some((r) => ipv4InCidr(a, r)));
  for (const ip of lbIPs) out.set(ip, nodeInRange ? [...ranges, `${ip}/32`] : ranges);
  return out;
}

export function serviceFrontends(svc: V1Service, slices: V1EndpointSlice[], node: NodeView, name = serviceName(svc)): ServiceFrontends {
  const spec = svc.spec!;
  const out: ServiceFrontends = { service: name, frontends: [], noLocalEndpoints: [], ignored: [], nodeAddresses: [] };
  const clusterIP = ipv4ClusterIP(svc);
  const clusterIP6 = ipv6ClusterIP(svc);
  const affinity = spec.sessionAffinity === 'ClientIP' ? (spec.sessionAffinityConfig?.clientIP?.timeoutSeconds ?? DEFAULT_AFFINITY_TIMEOUT) : 0;
  const usable = slices.filter((s) => !sliceIgnored(s));
  if (!clusterIP) return clusterIP6 ? withIPv6(out, ipv6Frontends(svc, usable, node, name, clusterIP6, affinity)) : out;

  const byPort = mergeSlices(usable, 'IPv4');
  const etpLocal = spec.externalTrafficPolicy === 'Local';
  const itpLocal = spec.internalTrafficPolicy === 'Local';
  const isNodePortType = spec.type === 'NodePort' || spec.type === 'LoadBalancer';
  const lbIPs = spec.type === 'LoadBalancer'
    ? (svc.status?.loadBalancer?.ingress ?? []).flatMap((ing) => {
        if (!ing.ip) return [];
        if (!isIPv4(ing.ip)) {
          // The IPv6 pass takes it (kube-proxy's IPv6 proxier), if the Service has that family.
          if (!clusterIP6) out.ignored.push(`IPv6 LoadBalancer ingress ${ing.ip} (the Service has no IPv6 ClusterIP)`);
          return [];
        }
        if (ing.ipMode && ing.ipMode !== 'VIP') {
          out.ignored.push(`LoadBalancer ingress ${ing.ip} with ipMode ${ing.ipMode}`);
          return [];
        }
        return [ing.ip];
      })
    : [];
  const externalIPs = (spec.externalIPs ?? []).filter((ip) => isIPv4(ip));

  const sourceRanges = lbSourceRanges(svc, lbIPs, node);
  const fwdAnnotation = svc.metadata?.annotations?.[ANNOTATION_FORWARDING];
  const forwarding: 'dsr' | 'snat' | undefined = fwdAnnotation === 'dsr' || fwdAnnotation === 'snat' ? fwdAnnotation : undefined;
  if (fwdAnnotation !== undefined && !forwarding) out.ignored.push(`annotation ${ANNOTATION_FORWARDING}="${fwdAnnotation}" (use snat or dsr)`);
  const allLocalReady = new Set<string>();
  const nodeAddress = (a: string) => node.clusterNodeAddresses?.has(a) || node.addresses.includes(a);
  for (const ip of lbIPs) if (nodeAddress(ip)) out.nodeAddresses.push({ address: ip, kind: 'LoadBalancer' });
  for (const ip of externalIPs) if (nodeAddress(ip)) out.nodeAddresses.push({ address: ip, kind: 'ExternalIP' });
  for (const p of spec.ports ?? []) {
    const proto = (p.protocol ?? 'TCP').toUpperCase() as ProtoName;
    if (proto === 'SCTP') {
      // Not NATed on the tc path (its CRC32c would need recomputing) and not balanced by
      // the socket hooks: not programmed at all, rather than half.
      out.ignored.push(`port ${p.port}/SCTP (SCTP is not supported)`);
      continue;
    }
    const eps = byPort.get(portKey(p.name, proto)) ?? [];
    const cluster = clusterEndpoints(eps, node);
    const local = localEndpoints(eps, node);
    for (const e of eps) if (e.ready && e.nodeName === node.name) allLocalReady.add(e.ip);
    const internal = itpLocal ? local : cluster;
    const external = etpLocal ? local : cluster;
    // Serving-terminating endpoints not chosen for new flows stay for the flows they have.
    const draining = (chosen: Endpoint[]) => backends(eps.filter((e) => e.serving && e.terminating && !chosen.includes(e)), node);
    if (itpLocal && local.length === 0) out.noLocalEndpoints.push('internal');
    if (etpLocal && local.length === 0 && (isNodePortType || lbIPs.length > 0 || externalIPs.length > 0)) out.noLocalEndpoints.push('external');
    const svcPort = flat(`${name}:${p.name ?? ''}`);
    // kube-proxy drops (not rejects) when a Local policy leaves no endpoint on this node
    // while the Service has endpoints elsewhere.
    // ETP=Local restricts only truly external traffic: this node's pods and host reach the
    // same frontends through the cluster endpoints (kube-proxy's short-circuit).
    // One list per endpoint selection, shared by the frontends that use it (read-only from
    // here on): a LoadBalancer port's NodePorts, LB IPs and externalIPs hold the same one.
    const clusterBackends = backends(cluster, node);
    const externalBackends = etpLocal ? backends(external, node) : clusterBackends;
    const internalBackendList = itpLocal ? backends(internal, node) : clusterBackends;
    const internalDraining = draining(internal);
    const externalDraining = external === internal ? internalDraining : draining(external);
    // Every frontend is one literal of one shape, its optional fields added after: Node 20's
    // V8 gives each object made by `{ ...base, more }` a hidden class of its own once the
    // site is hot (~300 bytes per frontend at 50k Services, and megamorphic reads in the writer).
    const frontend = (kind: FrontendKind, address: string, port: number, scope: 'internal' | 'external'): FrontendSpec => {
      const ext = scope === 'external';
      const f: FrontendSpec = {
        proto,
        affinityTimeout: affinity,
        service: svcPort,
        dropWhenEmpty: (ext ? etpLocal : itpLocal) && cluster.length > 0,
        drainingBackends: ext ? externalDraining : internalDraining,
        address,
        port,
        kind,
        backends: ext ? externalBackends : internalBackendList,
      };
      if (forwarding) f.forwarding = forwarding;
      if (ext && etpLocal) f.internalBackends = clusterBackends;
      return f;
    };
    out.frontends.push(frontend('ClusterIP', clusterIP, p.port, 'internal'));
    if (isNodePortType && p.nodePort) {
      for (const addr of node.addresses) out.frontends.push(frontend('NodePort', addr, p.nodePort, 'external'));
      const any = frontend('NodePort', '0.0.0.0', p.nodePort, 'external');
      any.nodePortAny = true;
      out.frontends.push(any);
    }
    for (const ip of lbIPs) {
      const f = frontend('LoadBalancer', ip, p.port, 'external');
      if (nodeAddress(ip)) f.serviceOnlyAddress = false;
      const ranges = sourceRanges.get(ip);
      if (ranges) f.sourceRanges = ranges;
      out.frontends.push(f);
    }
    for (const ip of externalIPs) out.frontends.push(frontend('ExternalIP', ip, p.port, 'external'));
  }
  if (spec.type === 'LoadBalancer' && etpLocal && spec.healthCheckNodePort) {
    out.health = { nodePort: spec.healthCheckNodePort, localReadyEndpoints: allLocalReady.size };
  }
  return clusterIP6 ? withIPv6(out, ipv6Frontends(svc, usable, node, name, clusterIP6, affinity)) : finish(out);
}

/** A Service's outcome with its IPv6 family added (after its IPv4 one, if any). */
function withIPv6(out: ServiceFrontends, v6: ReturnType<typeof ipv6Frontends>): ServiceFrontends {
  out.frontends.push(...v6.frontends);
  // The two passes report an SCTP port alike: once is enough.
  for (const why of v6.ignored) if (!out.ignored.includes(why)) out.ignored.push(why);
  for (let i = 0; i < v6.noLocalEndpoints; i++) out.noLocalEndpoints.push('internal');
  for (let i = 0; i < v6.noLocalExternal; i++) out.noLocalEndpoints.push('external');
  out.nodeAddresses.push(...v6.nodeAddresses);
  // One health check node port for both families: healthy while either has a local
  // endpoint (a pod of both families counts once).
  if (v6.health) out.health = { nodePort: v6.health.nodePort, localReadyEndpoints: Math.max(out.health?.localReadyEndpoints ?? 0, v6.health.localReadyEndpoints) };
  return finish(out);
}

function finish(out: ServiceFrontends): ServiceFrontends {
  out.noLocalEndpoints = orNone(out.noLocalEndpoints);
  out.ignored = orNone(out.ignored);
  out.nodeAddresses = orNone(out.nodeAddresses);
  return out;
}
