// What a failed request left in the nodes' maps, read right after the load stops (before
// the cluster goes): each node's drops and the counters of paths that mean trouble, and
// the flows and reply bindings of the failed requests' client ports. A failure in any
// scenario is then read by what the datapath held for it, not guessed at later.
import { dumpMap, listFlows, readCounters } from '../../datapath/inspect.js';
import type { LoadReport, ReliabilityCluster } from './cluster.js';

/** Counted paths that name a lost, remapped or contested flow (the others are the normal ones). */
export const TELLING = ['ct_rebalanced', 'ct_midstream', 'local_remapped', 'local_contested', 'dsr_contested', 'nat_early_drop'];

export function diagnoseFailures(c: ReliabilityCluster, failures: LoadReport['failures']): string[] {
  const ports = [...new Set(failures.map((f) => /from port (\d+)/.exec(f.error)?.[1]).filter((p): p is string => Boolean(p)))];
  const out: string[] = [];
  for (const node of [c.node1, c.node2]) {
    const pins = c.sb.pinDir(node);
    try {
      const counters = readCounters(pins);
      const telling = counters.forwarded.filter((r) => TELLING.includes(r.name));
      out.push(`${node.name} drops: ${counters.drops.map((d) => `${d.name} ${d.packets}`).join(', ') || 'none'}; ${telling.map((r) => `${r.name} ${r.packets}`).join(', ') || 'no lost or contested flow counted'}`);
      // One walk of each map, whatever the number of failed ports.
      const flows = listFlows(pins);
      const bindings = dumpMap(pins, 'nat4');
      for (const port of ports) {
        for (const f of flows) if (f.flow.includes(`:${port} `)) out.push(`${node.name} ct4: ${JSON.stringify(f)}`);
        for (const r of bindings) if (String(r.clientPort) === port) out.push(`${node.name} nat4: ${JSON.stringify(r)}`);
      }
    } catch (e) {
      out.push(`${node.name}: cannot read its maps: ${(e as Error).message}`);
    }
  }
  return out;
}
