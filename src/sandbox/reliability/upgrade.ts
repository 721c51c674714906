// A rolling upgrade across a map-layout change under load: every agent runs the previous
// release (layout 1), then node by node it is stopped and this build started over its pins.
// Long-lived connections through node-1's NodePort (to both backends: one local, one
// remote through SNAT) must survive, and no new request may fail.
import { FERRY_BIN } from '../sandbox.js';
import { WORKLOADS_BIN } from '../workloads/spawn.js';
import { ECHO_NODEPORT, startSteadyLoad, waitFor, type LoadReport, type ReliabilityCluster, sleep } from './cluster.js';

export interface UpgradeResult {
  fromCommit: string;
  nodes: Array<{ node: string; readyMs: number; migrated: Array<{ map: string; fromLayout: number; copied: number; caughtUp: number; dropped: number }> }>;
  held: { count: number; survived: number; brokeAtMs: number[] };
  load: LoadReport;
}

/** The cluster must have been started with the previous release's agents (`agentBin`). */
export async function upgradeScenario(c: ReliabilityCluster, opts: { fromCommit: string; held: number }): Promise<UpgradeResult> {
  const { sb } = c;
  const holdSeconds = 30;
  const hold = sb.net.client.spawn([process.execPath, WORKLOADS_BIN, 'hold', '--to', `${c.node1.ip}:${ECHO_NODEPORT}`, '--count', String(opts.held), '--seconds', String(holdSeconds)]);
  await waitFor('the connections are open', () => hold.output(), (o) => o.includes('holding'), 20_000);
  const started = Date.now();
  const load = startSteadyLoad(c);
  const nodes: UpgradeResult['nodes'] = [];
  try {
    await sleep(2000);
    for (const node of [c.node1, c.node2]) {
      await sb.stopAgent(node);
      const t0 = Date.now();
      const p = await sb.startAgent(node, 60_000, { bin: FERRY_BIN }); // this build
      const readyMs = Date.now() - t0;
      const migrated = p.output().split('\n').filter((l) => l.includes('"map migrated to the new layout"') || l.includes('"map resized, entries kept"')).map((l) => {
        const m = JSON.parse(l) as UpgradeResult['nodes'][number]['migrated'][number];
        return { map: m.map, fromLayout: m.fromLayout, copied: m.copied, caughtUp: m.caughtUp, dropped: m.dropped };
      });
      if (migrated.length === 0) throw new Error(`${node.name}: the upgraded agent migrated nothing:\n${p.output().slice(-2000)}`);
      nodes.push({ node: node.name, readyMs, migrated });
      await sleep(3000);
    }
  } catch (e) {
    await load.stop();
    throw e;
  }
  const report = await load.stop();
  await sleep(Math.max(0, holdSeconds * 1000 - (Date.now() - started)));
  const result = await waitFor('the held connections report', () => hold.output().split('\n').find((l) => l.startsWith('{"count"')), Boolean, 20_000);
  return { fromCommit: opts.fromCommit, nodes, held: JSON.parse(result!) as UpgradeResult['held'], load: report };
}
