// The IPv6 family of a Service (kube-proxy's second pass, one per family): its frontends
// over the endpoints of its IPv6 slices, balanced by the socket hooks for this node's pods
// and host, and by tc for packets from outside where the backends are on this node (tc
// does not forward IPv6 to other nodes yet). Pure: no I/O.
import { isIPv6 } from 'node:net';
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { ipv6InCidr } from '../packet/addr.js';
import { flat } from './flat-string.js';
import { orNone, type BackendSpec, type FrontendKind, type FrontendSpec, type ProtoName } from './frontend.js';
import { backendsOn, clusterEndpoints, localEndpoints, mergeSlices, portKey, type Endpoint, type NodeContext } from './endpoints.js';

/** spec.clusterIPs[i] pairs with spec.ipFamilies[i]; spec.clusterIP is the fallback. */
export function ipv6ClusterIP(svc: V1Service): string | undefined {
  const spec = svc.spec;
  if (!spec) return undefined;
  const ips = spec.clusterIPs && spec.clusterIPs.length > 0 ? spec.clusterIPs : spec.clusterIP ? [spec.clusterIP] : [];
  return ips.find((ip, i) => isIPv6(ip) && (!spec.ipFamilies?.[i] || spec.ipFamilies[i] === 'IPv6'));
}

export interface IPv6Frontends {
  frontends: FrontendSpec[];
  ignored: string[];
  /** Ports whose ITP=Local selection found no local IPv6 endpoint. */
  noLocalEndpoints: number;
  /** Ports whose ETP=Local selection found no local IPv6 endpoint (with external frontends). */
  noLocalExternal: number;
  /** IPv6 LoadBalancer IPs and externalIPs that are a node's address: shared with the node. */
  nodeAddresses: Array<{ address: string; kind: 'LoadBalancer' | 'ExternalIP' }>;
  /** The health check node port's word from this family (LB + ETP=Local): its local Ready endpoints. */
  health?: { nodePort: number; localReadyEndpoints: number };
}

/** What the IPv6 pass needs of the node: its IPv6 NodePort addresses, every node's addresses. */
export interface Node6Context extends NodeContext {
  addresses6?: string[];
  clusterNodeAddresses?: ReadonlySet<string>;
}

/**
 * The IPv6 loadBalancerSourceRanges (trimmed; kube-proxy's IPv6 pass takes this family's
 * alone). If a node's IPv6 address is in one, traffic from the LB IP itself is allowed
 * too (`ip/128`), as IPv4's.
 */
function ipv6SourceRanges(svc: V1Service, node: Node6Context): { ranges: string[]; withSelf: boolean } {
  const ranges = (svc.spec?.loadBalancerSourceRanges ?? []).map((r) => r.trim()).filter((r) => isIPv6(r.split('/')[0] ?? ''));
  return { ranges, withSelf: ranges.length > 0 && (node.addresses6 ?? []).some((a) => ranges.some((r) => ipv6InCidr(a, r))) };
}

/** The IPv6 LoadBalancer IPs of a LoadBalancer Service (ipMode VIP or unset), the rest reported. */
function ipv6LoadBalancerIPs(svc: V1Service, ignored: string[]): string[] {
  if (svc.spec?.type !== 'LoadBalancer') return [];
  const out: string[] = [];
  for (const ing of svc.status?.loadBalancer?.ingress ?? []) {
    if (!ing.ip || !isIPv6(ing.ip)) continue;
    if (ing.ipMode && ing.ipMode !== 'VIP') ignored.push(`LoadBalancer ingress ${ing.ip} with ipMode ${ing.ipMode}`);
    else out.push(ing.ip);
  }
  return out;
}

/**
 * The IPv6 frontends of a Service whose ClusterIP in IPv6 is `clusterIP`: the ClusterIP,
 * and its NodePorts on this node's IPv6 addresses, IPv6 LoadBalancer IPs and externalIPs.
 * As IPv4's: external traffic (tc) gets the externalTrafficPolicy's backends, and with
 * ETP=Local this node's pods and host reach the same frontends through the cluster
 * endpoints (`internalBackends`: kube-proxy's short-circuit of in-cluster traffic).
 */
export function ipv6Frontends(svc: V1Service, slices: V1EndpointSlice[], node: Node6Context, name: string, clusterIP: string, affinity: number): IPv6Frontends {
  const spec = svc.spec!;
  const out: IPv6Frontends = { frontends: [], ignored: [], noLocalEndpoints: 0, noLocalExternal: 0, nodeAddresses: [] };
  const etpLocal = spec.externalTrafficPolicy === 'Local';
  const byPort = mergeSlices(slices, 'IPv6');
  const itpLocal = spec.internalTrafficPolicy === 'Local';
  const isNodePortType = spec.type === 'NodePort' || spec.type === 'LoadBalancer';
  const lbIPs = ipv6LoadBalancerIPs(svc, out.ignored);
  const sourceRanges = ipv6SourceRanges(svc, node);
  const externalIPs = (spec.externalIPs ?? []).filter((ip) => isIPv6(ip));
  const nodeAddress = (a: string) => node.clusterNodeAddresses?.has(a) || (node.addresses6 ?? []).includes(a);
  for (const ip of lbIPs) if (nodeAddress(ip)) out.nodeAddresses.push({ address: ip, kind: 'LoadBalancer' });
  for (const ip of externalIPs) if (nodeAddress(ip)) out.nodeAddresses.push({ address: ip, kind: 'ExternalIP' });
  const localReady = new Set<string>();
  const backends = (eps: Endpoint[]): BackendSpec[] => backendsOn(eps, node);
  for (const p of spec.ports ?? []) {
    const proto = (p.protocol ?? 'TCP').toUpperCase() as ProtoName;
    if (proto === 'SCTP') {
      out.ignored.push(`port ${p.port}/SCTP (SCTP is not supported)`);
      continue;
    }
    // A slice's addressType is the API's word, its addresses a user's: only IPv6 ones count.
    const eps = (byPort.get(portKey(p.name, proto)) ?? []).filter((e) => isIPv6(e.ip));
    for (const e of eps) if (e.ready && e.nodeName === node.name) localReady.add(e.ip);
    const cluster = clusterEndpoints(eps, node);
    const internal = itpLocal ? localEndpoints(eps, node) : cluster;
    if (itpLocal && internal.length === 0) out.noLocalEndpoints++;
    // Serving-terminating endpoints not chosen for new flows stay for the sockets they have.
    const draining = (chosen: Endpoint[]) => orNone(backends(eps.filter((e) => e.serving && e.terminating && !chosen.includes(e))));
    const service = flat(`${name}:${p.name ?? ''}`);
    const clusterBackends = backends(cluster);
    const clusterDraining = draining(cluster);
    const external = etpLocal ? localEndpoints(eps, node) : cluster;
    const externalBackends = etpLocal ? backends(external) : clusterBackends;
    const externalDraining = etpLocal ? draining(external) : clusterDraining;
    if (etpLocal && external.length === 0 && ((isNodePortType && p.nodePort) || lbIPs.length > 0 || externalIPs.length > 0)) out.noLocalExternal++;
    // One literal of one shape for every frontend (no spreads: see service.ts).
    const frontend = (kind: FrontendKind, address: string, port: number, list = clusterBackends, drain = clusterDraining, dropWhenEmpty = false): FrontendSpec => ({
      proto,
      affinityTimeout: affinity,
      service,
      dropWhenEmpty,
      drainingBackends: drain,
      address,
      port,
      kind,
      backends: list,
    });
    // An external frontend: the policy's backends from outside; with ETP=Local the cluster's from inside.
    const outside = (kind: FrontendKind, address: string, port: number): FrontendSpec => {
      const f = frontend(kind, address, port, externalBackends, externalDraining, etpLocal && cluster.length > 0);
      if (etpLocal) f.internalBackends = clusterBackends;
      return f;
    };
    if (itpLocal) out.frontends.push(frontend('ClusterIP', clusterIP, p.port, backends(internal), draining(internal), cluster.length > 0));
    else out.frontends.push(frontend('ClusterIP', clusterIP, p.port));
    if (isNodePortType && p.nodePort) for (const a of node.addresses6 ?? []) out.frontends.push(outside('NodePort', a, p.nodePort));
    for (const ip of lbIPs) {
      const f = outside('LoadBalancer', ip, p.port);
      if (nodeAddress(ip)) f.serviceOnlyAddress = false;
      if (sourceRanges.ranges.length > 0) f.sourceRanges = sourceRanges.withSelf ? [...sourceRanges.ranges, `${ip}/128`] : sourceRanges.ranges;
      out.frontends.push(f);
    }
    for (const ip of externalIPs) out.frontends.push(outside('ExternalIP', ip, p.port));
  }
  if (spec.type === 'LoadBalancer' && spec.externalTrafficPolicy === 'Local' && spec.healthCheckNodePort) {
    out.health = { nodePort: spec.healthCheckNodePort, localReadyEndpoints: localReady.size };
  }
  return out;
}
