// A Kubernetes Service as LB-IPAM sees it: whether it is ours at all (type LoadBalancer,
// our class or none), and what it asks for. Pure.
import { isIPv4, isIPv6 } from 'node:net';
import type { V1Service } from '@kubernetes/client-node';
import type { ServiceInput } from './allocator.js';

export const LB_CLASS = 'ferry.dev/lb';
export const ANNOTATION_IPS = 'ferry.dev/load-balancer-ips';
export const ANNOTATION_POOL = 'ferry.dev/pool';
export const ANNOTATION_SHARING_KEY = 'ferry.dev/sharing-key';
/** Pseudo-labels a pool's serviceSelector can match besides the Service's own labels. */
export const LABEL_SERVICE_NAMESPACE = 'ferry.dev/service-namespace';
export const LABEL_SERVICE_NAME = 'ferry.dev/service-name';
/** A Service asks for at most this many addresses (one per family, with room to spare). */
export const MAX_REQUESTED_IPS = 8;

export interface ClassPolicy {
  /** Take Services without spec.loadBalancerClass (default true). */
  handleUnclassed: boolean;
}

/** Is this Service LB-IPAM's to give an address? */
export function isOurs(svc: V1Service, policy: ClassPolicy): boolean {
  if (svc.spec?.type !== 'LoadBalancer') return false;
  const cls = svc.spec.loadBalancerClass;
  return cls ? cls === LB_CLASS : policy.handleUnclassed;
}

export const serviceKey = (svc: V1Service) => `${svc.metadata?.namespace ?? 'default'}/${svc.metadata?.name ?? ''}`;

/** The Service's labels and the pseudo-labels. */
export function serviceLabels(svc: V1Service): Record<string, string> {
  return { ...svc.metadata?.labels, [LABEL_SERVICE_NAMESPACE]: svc.metadata?.namespace ?? 'default', [LABEL_SERVICE_NAME]: svc.metadata?.name ?? '' };
}

/** The IPv4 addresses its status holds. */
export const ingressIPs = (svc: V1Service): string[] => (svc.status?.loadBalancer?.ingress ?? []).map((i) => i.ip ?? '').filter((ip) => isIPv4(ip));

/** A creationTimestamp as sortable text (client-node hands Dates, raw JSON strings). */
export function isoTime(t: Date | string | undefined): string {
  return t instanceof Date ? t.toISOString() : (t ?? '');
}

/** `namespaceLabels`: the labels of the Service's namespace (a pool's namespaceSelector). */
export function serviceInput(svc: V1Service, namespaceLabels?: Readonly<Record<string, string>>): ServiceInput {
  const annotations = svc.metadata?.annotations ?? {};
  const asked = [
    ...(svc.spec?.loadBalancerIP ? [svc.spec.loadBalancerIP] : []),
    ...(annotations[ANNOTATION_IPS] ?? '').split(',').map((s) => s.trim()).filter(Boolean),
  ];
  const bad = asked.filter((a) => !isIPv4(a) && !isIPv6(a));
  const requestedIPs = [...new Set(asked.filter((a) => isIPv4(a)))];
  const selector = Object.entries(svc.spec?.selector ?? {}).sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, v]) => `${k}=${v}`).join(',');
  return {
    key: serviceKey(svc),
    namespace: svc.metadata?.namespace ?? 'default',
    created: isoTime(svc.metadata?.creationTimestamp),
    labels: serviceLabels(svc),
    ...(namespaceLabels ? { namespaceLabels } : {}),
    requestedIPs,
    ...(annotations[ANNOTATION_POOL] ? { requestedPool: annotations[ANNOTATION_POOL] } : {}),
    ...(annotations[ANNOTATION_SHARING_KEY] ? { sharingKey: annotations[ANNOTATION_SHARING_KEY] } : {}),
    ports: (svc.spec?.ports ?? []).map((p) => `${(p.protocol ?? 'TCP').toUpperCase()}/${p.port}`),
    etpLocal: svc.spec?.externalTrafficPolicy === 'Local',
    selector,
    current: ingressIPs(svc),
    ...(asked.length > MAX_REQUESTED_IPS ? { requestError: `${asked.length} addresses requested: at most ${MAX_REQUESTED_IPS}` }
      : bad.length ? { requestError: `${bad.slice(0, 3).map((b) => JSON.stringify(b.slice(0, 64))).join(', ')} ${bad.length > 1 ? 'are not IP addresses' : 'is not an IP address'}` } : {}),
  };
}
