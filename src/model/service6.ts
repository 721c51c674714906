// The IPv6 family of a Service (kube-proxy's second pass, one per family): its ClusterIP
// frontends over the endpoints of its IPv6 slices, balanced by the socket hooks for this
// node's pods and host. IPv6 NodePorts, LoadBalancer IPs and externalIPs need the tc path,
// which is IPv4 only so far: they are reported as ignored. Pure: no I/O.
import { isIPv6 } from 'node:net';
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { flat } from './flat-string.js';
import { orNone, type BackendSpec, type FrontendSpec, type ProtoName } from './frontend.js';
import { clusterEndpoints, localEndpoints, mergeSlices, portKey, type Endpoint, type NodeContext } from './endpoints.js';

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
}

/** The IPv6 ClusterIP frontends of a Service whose ClusterIP in IPv6 is `clusterIP`. */
export function ipv6Frontends(svc: V1Service, slices: V1EndpointSlice[], node: NodeContext, name: string, clusterIP: string, affinity: number): IPv6Frontends {
  const spec = svc.spec!;
  const out: IPv6Frontends = { frontends: [], ignored: [], noLocalEndpoints: 0 };
  const byPort = mergeSlices(slices, 'IPv6');
  const itpLocal = spec.internalTrafficPolicy === 'Local';
  const backends = (eps: Endpoint[]): BackendSpec[] =>
    eps.map((e) => (e.ready ? { address: e.ip, port: e.port, local: e.nodeName === node.name } : { address: e.ip, port: e.port, local: e.nodeName === node.name, terminating: true }));
  for (const p of spec.ports ?? []) {
    const proto = (p.protocol ?? 'TCP').toUpperCase() as ProtoName;
    if (proto === 'SCTP') {
      out.ignored.push(`port ${p.port}/SCTP (SCTP is not supported)`);
      continue;
    }
    // A slice's addressType is the API's word, its addresses a user's: only IPv6 ones count.
    const eps = (byPort.get(portKey(p.name, proto)) ?? []).filter((e) => isIPv6(e.ip));
    const cluster = clusterEndpoints(eps, node);
    const internal = itpLocal ? localEndpoints(eps, node) : cluster;
    if (itpLocal && internal.length === 0) out.noLocalEndpoints++;
    out.frontends.push({
      proto,
      affinityTimeout: affinity,
      service: flat(`${name}:${p.name ?? ''}`),
      dropWhenEmpty: itpLocal && cluster.length > 0,
      address: clusterIP,
      port: p.port,
      kind: 'ClusterIP',
      backends: backends(internal),
      // Serving-terminating endpoints not chosen for new flows stay for the sockets they have.
      drainingBackends: orNone(backends(eps.filter((e) => e.serving && e.terminating && !internal.includes(e)))),
    });
  }
  const external = [
    ...(spec.type === 'NodePort' || spec.type === 'LoadBalancer' ? (spec.ports ?? []).filter((p) => p.nodePort).map((p) => `IPv6 NodePort ${p.nodePort}`) : []),
    ...(spec.externalIPs ?? []).filter((ip) => isIPv6(ip)).map((ip) => `IPv6 externalIP ${ip}`),
  ];
  for (const what of external) out.ignored.push(`${what} (IPv6 reaches ClusterIPs only, from this node's pods and host)`);
  // As the IPv4 pass words it (a dual-stack Service reports it once).
  if (spec.type === 'LoadBalancer') for (const ing of svc.status?.loadBalancer?.ingress ?? []) if (ing.ip && isIPv6(ing.ip)) out.ignored.push(`IPv6 LoadBalancer ingress ${ing.ip}`);
  return out;
}
