// What the agent's caches keep of Services, EndpointSlices and Nodes: only the fields
// ferry reads. At 50k Services the caches are most of the agent's memory; a real
// cluster's objects also carry pod references, node images and annotations by the KiB.
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';

const TRIGGER_TIME = 'endpoints.kubernetes.io/last-change-trigger-time';
/** Service annotations ferry (or kube-proxy's semantics) may read. */
const SERVICE_ANNOTATION_PREFIXES = ['ferry.dev/', 'service.kubernetes.io/', 'metallb.', 'io.cilium/', 'lbipam.cilium.io/'];

function pick(annotations: Record<string, string> | undefined, keep: (k: string) => boolean): Record<string, string> | undefined {
  if (!annotations) return undefined;
  const out: Record<string, string> = {};
  let any = false;
  for (const [k, v] of Object.entries(annotations)) {
    if (keep(k)) {
      out[k] = v;
      any = true;
    }
  }
  return any ? out : undefined;
}

export function leanService(s: V1Service): V1Service {
  const m = s.metadata ?? {};
  return {
    metadata: { name: m.name, namespace: m.namespace, uid: m.uid, resourceVersion: m.resourceVersion, labels: m.labels, annotations: pick(m.annotations, (k) => SERVICE_ANNOTATION_PREFIXES.some((p) => k.startsWith(p))) },
    spec: s.spec,
    status: s.status,
  };
}

export function leanSlice(s: V1EndpointSlice): V1EndpointSlice {
  const m = s.metadata ?? {};
  return {
    metadata: { name: m.name, namespace: m.namespace, resourceVersion: m.resourceVersion, labels: m.labels, annotations: pick(m.annotations, (k) => k === TRIGGER_TIME) },
    addressType: s.addressType,
    ports: s.ports,
    // Without targetRef (the pod), deprecatedTopology and the like.
    endpoints: (s.endpoints ?? []).map((e) => ({ addresses: e.addresses, conditions: e.conditions, nodeName: e.nodeName, zone: e.zone, hints: e.hints })),
  };
}

export function leanNode(n: V1Node): V1Node {
  const m = n.metadata ?? {};
  return {
    metadata: { name: m.name, uid: m.uid, resourceVersion: m.resourceVersion, labels: m.labels, deletionTimestamp: m.deletionTimestamp },
    spec: { taints: n.spec?.taints, podCIDR: n.spec?.podCIDR, podCIDRs: n.spec?.podCIDRs },
    // Not images, conditions, capacity or nodeInfo: only the addresses.
    status: { addresses: n.status?.addresses },
  };
}
