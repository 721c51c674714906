// What the API server does when a Service is written: defaults, a ClusterIP from the
// Service CIDR, NodePorts and the health check node port from 30000–32767, each unique.
import type { KObject, Store } from '../apiserver/store.js';
import { StoreError } from '../apiserver/store.js';

export const NODE_PORT_RANGE = { min: 30000, max: 32767 } as const;
/** 10.96.0.0/12; .1 is the kubernetes Service by convention, allocation starts at .10. */
const SERVICE_BASE = (10 << 24) | (96 << 16);
const SERVICE_SIZE = 1 << 20;

type Port = { name?: string; port: number; protocol?: string; targetPort?: number | string; nodePort?: number };
type Spec = {
  type?: string; clusterIP?: string; clusterIPs?: string[]; ipFamilies?: string[]; ipFamilyPolicy?: string; ports?: Port[];
  externalTrafficPolicy?: string; internalTrafficPolicy?: string; healthCheckNodePort?: number; sessionAffinity?: string;
};

const ipText = (n: number) => `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;

export function serviceAllocator(store: Store): (resource: string, obj: KObject, old: KObject | undefined) => void {
  return (resource, obj, old) => {
    if (resource !== 'services') return;
    const spec = ((obj.spec ??= {}) as Spec);
    const prev = (old?.spec ?? {}) as Spec;
    const others = store.list('services').filter((s) => !(s.metadata.namespace === obj.metadata.namespace && s.metadata.name === obj.metadata.name));
    const usedIPs = new Set(others.map((s) => (s.spec as Spec)?.clusterIP).filter(Boolean));
    const usedPorts = new Set(others.flatMap((s) => [...((s.spec as Spec)?.ports ?? []).map((p) => p.nodePort), (s.spec as Spec)?.healthCheckNodePort]).filter(Boolean));
    spec.type ??= 'ClusterIP';
    spec.sessionAffinity ??= 'None';
    spec.internalTrafficPolicy ??= 'Cluster';
    if (spec.type === 'ExternalName') return;
    if (!spec.clusterIP) spec.clusterIP = prev.clusterIP;
    if (!spec.clusterIP) {
      for (let i = 10; i < SERVICE_SIZE; i++) {
        const ip = ipText(SERVICE_BASE + i);
        if (!usedIPs.has(ip)) {
          spec.clusterIP = ip;
          break;
        }
      }
    } else if (spec.clusterIP !== 'None' && usedIPs.has(spec.clusterIP)) {
      throw new StoreError(422, 'Invalid', `spec.clusterIP: Invalid value: "${spec.clusterIP}": provided IP is already allocated`);
    }
    if (spec.clusterIP !== 'None') {
      spec.clusterIPs = [spec.clusterIP!];
      spec.ipFamilies = ['IPv4'];
      spec.ipFamilyPolicy ??= 'SingleStack';
    }
    const nodePorts = spec.type === 'NodePort' || spec.type === 'LoadBalancer';
    const take = (want: number | undefined, what: string): number => {
      if (want) {
        if (want < NODE_PORT_RANGE.min || want > NODE_PORT_RANGE.max) throw new StoreError(422, 'Invalid', `${what}: Invalid value: ${want}: provided port is not in the valid range. The range of valid ports is ${NODE_PORT_RANGE.min}-${NODE_PORT_RANGE.max}`);
        if (usedPorts.has(want)) throw new StoreError(422, 'Invalid', `${what}: Invalid value: ${want}: provided port is already allocated`);
        usedPorts.add(want);
        return want;
      }
      for (let p = NODE_PORT_RANGE.min; p <= NODE_PORT_RANGE.max; p++) {
        if (!usedPorts.has(p)) {
          usedPorts.add(p);
          return p;
        }
      }
      throw new StoreError(500, 'InternalError', 'no node ports left');
    };
    for (const [i, p] of (spec.ports ?? []).entries()) {
      p.protocol ??= 'TCP';
      p.targetPort ??= p.port;
      if (nodePorts) {
        const kept = prev.ports?.find((q) => q.port === p.port && (q.protocol ?? 'TCP') === p.protocol)?.nodePort;
        p.nodePort = take(p.nodePort ?? kept, `spec.ports[${i}].nodePort`);
      } else {
        delete p.nodePort;
      }
    }
    if (nodePorts) spec.externalTrafficPolicy ??= 'Cluster';
    else delete spec.externalTrafficPolicy;
    if (spec.type === 'LoadBalancer' && spec.externalTrafficPolicy === 'Local') {
      spec.healthCheckNodePort = take(spec.healthCheckNodePort ?? prev.healthCheckNodePort, 'spec.healthCheckNodePort');
    } else {
      delete spec.healthCheckNodePort;
    }
  };
}
