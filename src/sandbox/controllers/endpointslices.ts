// The sandbox's EndpointSlice controller: one slice per Service with a selector, kept in
// step with the pods (ready / serving / terminating, nodeName, named target ports resolved
// per pod), stamped with endpoints.kubernetes.io/last-change-trigger-time.
import type { KObject, Store } from '../apiserver/store.js';

type Port = { name?: string; port: number; protocol?: string; targetPort?: number | string };
type ServiceSpec = { selector?: Record<string, string>; ports?: Port[]; publishNotReadyAddresses?: boolean; type?: string };
type PodStatus = { podIP?: string; conditions?: { type: string; status: string }[] };
type PodSpec = { nodeName?: string; containers?: Array<{ ports?: Array<{ name?: string; containerPort: number; protocol?: string }> }> };

export const MANAGED_BY = 'endpointslice-controller.sandbox.ferry.dev';

const matches = (labels: Record<string, string> | undefined, sel: Record<string, string>) => Object.entries(sel).every(([k, v]) => labels?.[k] === v);

/** Resolve a Service port's targetPort for one pod (a name looks up the container port). */
function targetPortFor(p: Port, pod: KObject): number | undefined {
  const t = p.targetPort ?? p.port;
  if (typeof t === 'number') return t;
  if (/^\d+$/.test(t)) return Number(t);
  for (const c of (pod.spec as PodSpec)?.containers ?? []) {
    for (const cp of c.ports ?? []) if (cp.name === t && (cp.protocol ?? 'TCP') === (p.protocol ?? 'TCP')) return cp.containerPort;
  }
  return undefined;
}

export function reconcileEndpointSlices(store: Store, now: () => Date = () => new Date()): void {
  const services = store.list('services').filter((s) => (s.spec as ServiceSpec)?.selector && (s.spec as ServiceSpec).type !== 'ExternalName');
  const want = new Set<string>();
  for (const svc of services) {
    const spec = svc.spec as ServiceSpec;
    const ns = svc.metadata.namespace!;
    const pods = store.list('pods', ns).filter((p) => matches(p.metadata.labels, spec.selector!) && (p.status as PodStatus)?.podIP);
    // Pods whose named ports resolve differently need separate slices: group by the port list.
    const groups = new Map<string, { ports: object[]; endpoints: object[] }>();
    for (const pod of pods) {
      const ports = (spec.ports ?? []).map((p) => ({ name: p.name ?? '', port: targetPortFor(p, pod), protocol: p.protocol ?? 'TCP' }));
      const key = JSON.stringify(ports);
      const podReady = (pod.status as PodStatus).conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
      const terminating = Boolean(pod.metadata.deletionTimestamp);
      const g = groups.get(key) ?? { ports, endpoints: [] };
      g.endpoints.push({
        addresses: [(pod.status as PodStatus).podIP],
        conditions: { ready: spec.publishNotReadyAddresses ? true : podReady && !terminating, serving: spec.publishNotReadyAddresses ? true : podReady, terminating },
        nodeName: (pod.spec as PodSpec).nodeName,
        targetRef: { kind: 'Pod', namespace: ns, name: pod.metadata.name },
      });
      groups.set(key, g);
    }
    if (groups.size === 0) groups.set('[]', { ports: (spec.ports ?? []).map((p) => ({ name: p.name ?? '', port: typeof p.targetPort === 'number' ? p.targetPort : p.port, protocol: p.protocol ?? 'TCP' })), endpoints: [] });
    [...groups.values()].forEach((g, i) => {
      const name = `${svc.metadata.name}-${i === 0 ? 'ferry' : `ferry${i}`}`;
      want.add(`${ns}/${name}`);
      const body = { addressType: 'IPv4', ports: g.ports, endpoints: g.endpoints };
      const have = store.get('endpointslices', ns, name);
      const strip = (o: KObject | undefined) => (o ? JSON.stringify({ addressType: o.addressType, ports: o.ports, endpoints: o.endpoints }) : '');
      if (have && strip(have) === JSON.stringify(body)) return;
      const metadata = {
        name,
        namespace: ns,
        labels: { 'kubernetes.io/service-name': svc.metadata.name!, 'endpointslice.kubernetes.io/managed-by': MANAGED_BY },
        annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': now().toISOString().replace(/\.\d+Z$/, 'Z') },
      };
      if (have) store.update('endpointslices', { apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata, ...body });
      else store.create('endpointslices', { apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata, ...body });
    });
  }
  for (const s of store.list('endpointslices')) {
    if (s.metadata.labels?.['endpointslice.kubernetes.io/managed-by'] !== MANAGED_BY) continue;
    if (!want.has(`${s.metadata.namespace}/${s.metadata.name}`)) store.delete('endpointslices', s.metadata.namespace, s.metadata.name!);
  }
}
