// EndpointSlices of one Service → its endpoints per port, as kube-proxy sees them:
// merged across slices, deduplicated by IP:port (a non-terminating copy wins), only
// addresses[0], nil ready/serving meaning true and nil terminating meaning false.
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { NONE, type BackendSpec } from './frontend.js';

export interface Endpoint {
  ip: string;
  port: number;
  ready: boolean;
  serving: boolean;
  terminating: boolean;
  nodeName: string | undefined;
  zone: string | undefined;
  /** topology hints: zones this endpoint is meant for (undefined: no hints). */
  hintZones: string[] | undefined;
  /** node hints (KEP-4444 "forNodes"), undefined when absent. */
  hintNodes: string[] | undefined;
}

/** Endpoints of one Service port, keyed by (port name, protocol). */
export type EndpointsByPort = Map<string, Endpoint[]>;

export function portKey(name: string | undefined, protocol: string | undefined): string {
  return `${name ?? ''}/${(protocol ?? 'TCP').toUpperCase()}`;
}

export function mergeSlices(slices: V1EndpointSlice[], family: 'IPv4' | 'IPv6' = 'IPv4'): EndpointsByPort {
  const out = new Map<string, Map<string, Endpoint>>();
  for (const slice of slices) {
    if (slice.addressType !== family) continue;
    for (const p of slice.ports ?? []) {
      if (p.port === undefined || p.port === null) continue; // no port number: ignored
      const key = portKey(p.name, p.protocol);
      if (!out.has(key)) out.set(key, new Map());
      const byAddr = out.get(key)!;
      for (const e of slice.endpoints ?? []) {
        const ip = e.addresses?.[0];
        if (!ip) continue;
        const ready = e.conditions?.ready ?? true;
        const serving = e.conditions?.serving ?? true;
        const terminating = e.conditions?.terminating ?? false;
        const ep: Endpoint = {
          ip,
          port: p.port,
          ready,
          serving,
          terminating,
          nodeName: e.nodeName ?? undefined,
          zone: e.zone ?? undefined,
          hintZones: e.hints?.forZones?.map((z) => z.name),
          hintNodes: (e.hints as { forNodes?: { name: string }[] } | undefined)?.forNodes?.map((n) => n.name),
        };
        const id = `${ip}:${p.port}`;
        const have = byAddr.get(id);
        if (!have || (have.terminating && !ep.terminating)) byAddr.set(id, ep);
      }
    }
  }
  return new Map([...out].map(([k, v]) => [k, [...v.values()]]));
}

export interface NodeContext {
  name: string;
  zone: string | undefined;
}

/**
 * Cluster endpoints: Ready ones (narrowed by topology hints when every Ready endpoint has
 * hints and some match this node); if none is Ready, the serving-and-terminating ones.
 */
export function clusterEndpoints(eps: Endpoint[], node: NodeContext, topologyAware = true): Endpoint[] {
  const ready = eps.filter((e) => e.ready);
  if (ready.length > 0) return topologyAware ? applyHints(ready, node) : ready;
  return eps.filter((e) => e.serving && e.terminating);
}

/** Local endpoints: Ready ones on this node; if none, local serving-and-terminating ones. */
export function localEndpoints(eps: Endpoint[], node: NodeContext): Endpoint[] {
  const mine = eps.filter((e) => e.nodeName === node.name);
  const ready = mine.filter((e) => e.ready);
  if (ready.length > 0) return ready;
  return mine.filter((e) => e.serving && e.terminating);
}

function applyHints(ready: Endpoint[], node: NodeContext): Endpoint[] {
  // Node hints first (when every endpoint has them and one names this node).
  if (ready.every((e) => e.hintNodes && e.hintNodes.length > 0)) {
    const forNode = ready.filter((e) => e.hintNodes!.includes(node.name));
    if (forNode.length > 0) return forNode;
  }
  if (!node.zone) return ready;
  if (!ready.every((e) => e.hintZones && e.hintZones.length > 0)) return ready;
  const forZone = ready.filter((e) => e.hintZones!.includes(node.zone!));
  return forZone.length > 0 ? forZone : ready;
}

/** The backends of endpoints as this node programs them (both families' passes). */
export function backendsOn(eps: Endpoint[], node: NodeContext): BackendSpec[] {
  if (eps.length === 0) return NONE;
  // `terminating` only where it is true: half a million backends at 50k Services, 8 bytes each.
  return eps.map((e) => (e.ready ? { address: e.ip, port: e.port, local: e.nodeName === node.name } : { address: e.ip, port: e.port, local: e.nodeName === node.name, terminating: true }));
}
