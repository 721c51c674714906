// What the caches keep of Services, EndpointSlices and Nodes (the agent) and of namespaces
// (the operator): only the fields ferry reads. At 50k Services the caches are most of the agent's memory; a real
// cluster's objects also carry pod references, node images and annotations by the KiB.
import type { V1EndpointSlice, V1Namespace, V1Node, V1Service } from '@kubernetes/client-node';

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
    // Without targetRef (the pod), deprecatedTopology and the like; zone and hints only
    // when there are any (half a million endpoints at 50k Services).
    endpoints: (s.endpoints ?? []).map((e) =>
      e.zone === undefined && e.hints === undefined
        ? { addresses: e.addresses, conditions: sharedConditions(e.conditions), nodeName: e.nodeName }
        : { addresses: e.addresses, conditions: sharedConditions(e.conditions), nodeName: e.nodeName, zone: e.zone, hints: e.hints }),
  };
}

type Conditions = NonNullable<V1EndpointSlice['endpoints'][number]['conditions']>;
const CONDITIONS = ['ready', 'serving', 'terminating'] as const;
const conditionShapes = new Map<number, Conditions>();

/**
 * Endpoint conditions come in a few shapes ({ready: true}, {ready, serving, terminating}…):
 * one shared, frozen object per shape instead of one per endpoint. Conditions with other
 * fields, or values that are not booleans, are kept as they came (the model judges them).
 */
function sharedConditions(c: Conditions | undefined): Conditions | undefined {
  // Not a plain object (an array, say): kept, so that validation still refuses it.
  if (c === undefined || c === null || typeof c !== 'object' || Array.isArray(c)) return c;
  let shape = 0;
  let fields = 0;
  for (const name of CONDITIONS) {
    const v = c[name];
    if (v !== undefined && typeof v !== 'boolean') return c;
    shape = shape * 3 + (v === undefined ? 0 : v ? 1 : 2);
    if (v !== undefined) fields++;
  }
  let keys = 0;
  for (const _ in c) keys++;
  if (keys !== fields) return c;
  let shared = conditionShapes.get(shape);
  if (!shared) {
    const fresh: Conditions = {};
    for (const name of CONDITIONS) if (c[name] !== undefined) fresh[name] = c[name];
    conditionShapes.set(shape, (shared = Object.freeze(fresh)));
  }
  return shared;
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

/** The operator's namespaces: their labels (pools' namespaceSelectors), nothing else. */
export function leanNamespace(n: V1Namespace): V1Namespace {
  const m = n.metadata ?? {};
  return { metadata: { name: m.name, uid: m.uid, resourceVersion: m.resourceVersion, labels: m.labels } };
}
