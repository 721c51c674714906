// What is to be announced by ARP, and by whom: each address (a LoadBalancer address in a
// Service's status, or an externalIP where a policy asks for those) with the Services on it
// and its candidate nodes, each with the devices it would answer on. With
// externalTrafficPolicy Local only nodes with a ready endpoint of every Service on the
// address are candidates. Pure: the agent feeds it what its watches hold.
import { isIPv4 } from 'node:net';
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { LB_CLASS, serviceKey, serviceLabels } from '../ipam/service-request.js';
import { policyDevices, policySelectsService, type L2Policy } from './policy.js';

/** Nodes with this label never answer (the upstream label for external load balancers). */
export const EXCLUDE_LABEL = 'node.kubernetes.io/exclude-from-external-load-balancers';
const TO_BE_DELETED_TAINT = 'ToBeDeletedByClusterAutoscaler';

export interface Announcement {
  address: string;
  /** namespace/name of every Service on the address. */
  services: string[];
  /** Some Service on it has externalTrafficPolicy Local. */
  local: boolean;
  /** Node → the devices it would answer on. */
  candidates: Map<string, string[]>;
}

export interface AnnouncementInput {
  services: readonly V1Service[];
  slices: readonly V1EndpointSlice[];
  nodes: readonly V1Node[];
  policies: readonly L2Policy[];
  /** Node → its agent's devices (from the node's heartbeat). */
  devices: ReadonlyMap<string, readonly string[]>;
}

const nodeUsable = (n: V1Node) =>
  !n.metadata?.deletionTimestamp && !(EXCLUDE_LABEL in (n.metadata?.labels ?? {})) && !(n.spec?.taints ?? []).some((t) => t.key === TO_BE_DELETED_TAINT);

/** Nodes with a ready endpoint of the Service (as its EndpointSlices say). */
function readyNodes(svc: V1Service, slices: readonly V1EndpointSlice[]): Set<string> {
  const ns = svc.metadata?.namespace;
  const name = svc.metadata?.name;
  const out = new Set<string>();
  for (const s of slices) {
    if (s.metadata?.namespace !== ns || s.metadata?.labels?.['kubernetes.io/service-name'] !== name) continue;
    for (const e of s.endpoints ?? []) if (e.nodeName && e.conditions?.ready !== false) out.add(e.nodeName);
  }
  return out;
}

export function announcements(input: AnnouncementInput): Announcement[] {
  const nodeAddresses = new Set(input.nodes.flatMap((n) => (n.status?.addresses ?? []).map((a) => a.address)));
  const usable = input.nodes.filter(nodeUsable);
  const byAddress = new Map<string, Announcement>();
  for (const svc of input.services) {
    const labels = serviceLabels(svc);
    const policies = input.policies.filter((p) => policySelectsService(p, labels));
    if (policies.length === 0) continue;
    const cls = svc.spec?.loadBalancerClass;
    const lbIPs = svc.spec?.type === 'LoadBalancer' && (!cls || cls === LB_CLASS) ? (svc.status?.loadBalancer?.ingress ?? []).map((i) => i.ip ?? '') : [];
    const local = svc.spec?.externalTrafficPolicy === 'Local';
    const ready = local ? readyNodes(svc, input.slices) : undefined;
    // Candidates through any policy that selects the Service, and the kinds it announces.
    const wanted = new Map<string, Map<string, Set<string>>>(); // address → node → devices
    for (const p of policies) {
      const addresses = [...(p.loadBalancerIPs ? lbIPs : []), ...(p.externalIPs ? (svc.spec?.externalIPs ?? []) : [])];
      for (const address of addresses) {
        if (!isIPv4(address) || nodeAddresses.has(address)) continue;
        const nodes = wanted.get(address) ?? new Map<string, Set<string>>();
        wanted.set(address, nodes);
        for (const n of usable) {
          const name = n.metadata?.name ?? '';
          if (ready && !ready.has(name)) continue;
          const devs = policyDevices(p, n.metadata?.labels ?? {}, input.devices.get(name) ?? []);
          if (devs.length === 0) continue;
          const set = nodes.get(name) ?? new Set<string>();
          for (const d of devs) set.add(d);
          nodes.set(name, set);
        }
      }
    }
    for (const [address, nodes] of wanted) {
      const have = byAddress.get(address);
      const mine = new Map([...nodes].map(([n, d]) => [n, [...d].sort()]));
      if (!have) {
        byAddress.set(address, { address, services: [serviceKey(svc)], local, candidates: mine });
        continue;
      }
      // A shared address: the nodes every Service on it can use.
      have.services.push(serviceKey(svc));
      have.local ||= local;
      for (const n of [...have.candidates.keys()]) {
        const d = mine.get(n);
        if (!d) have.candidates.delete(n);
        else have.candidates.set(n, have.candidates.get(n)!.filter((x) => d.includes(x)));
      }
    }
  }
  return [...byAddress.values()].sort((a, b) => (a.address < b.address ? -1 : a.address > b.address ? 1 : 0));
}
