// The agent's conntrack GC: expired flows and bindings, flows of backends or frontends the
// writer no longer holds, and retired backend ids no flow uses any more.
import { collectConntrack, collectConntrack6, collectNat6, collectOrphans } from '../datapath/ct-gc.js';
import type { DatapathMaps } from '../datapath/loader.js';
import type { ServiceWriter } from '../datapath/writer.js';
import type { AgentMetrics } from './metrics.js';

/** Flows whose backend or frontend is gone, counted; the backend ids flows still use. */
export function collectOrphanFlows(maps: DatapathMaps, writer: ServiceWriter, metrics: AgentMetrics): ReturnType<typeof collectOrphans> {
  const o = collectOrphans(maps, writer.externalFrontends());
  metrics.ctCollected.inc({ map: 'ct4' }, o.ctDeleted);
  metrics.ctCollected.inc({ map: 'nat4' }, o.natDeleted);
  return o;
}

/** One GC pass; returns the map fill it saw (what /metrics reports until the next). */
export function collectGarbage(maps: DatapathMaps, writer: ServiceWriter, metrics: AgentMetrics): Record<string, number> {
  const r = collectConntrack(maps);
  metrics.ctCollected.inc({ map: 'ct4' }, r.ctDeleted);
  metrics.ctCollected.inc({ map: 'nat4' }, r.natDeleted);
  const o = collectOrphanFlows(maps, writer, metrics);
  writer.quarantineBackendIds(o.backendIdsInFlows);
  writer.releaseRetiredBackends(o.backendIdsInFlows);
  const r6 = collectConntrack6(maps.ct6, undefined, (f, b) => writer.servesFlow6(f, b));
  metrics.ctCollected.inc({ map: 'ct6' }, r6.deleted);
  const n6 = collectNat6(maps.nat6, undefined, (f, b) => writer.servesFlow6(f, b));
  metrics.ctCollected.inc({ map: 'nat6' }, n6.deleted);
  return { ct4: r.ctScanned - r.ctDeleted - o.ctDeleted, nat4: r.natScanned - r.natDeleted - o.natDeleted, ct6: r6.scanned - r6.deleted, nat6: n6.scanned - n6.deleted, lb4_sock_rev: [...maps.lb4_sock_rev.keys()].length };
}
