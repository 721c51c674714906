// Agent restarts under load: node-1's agent stopped by SIGTERM, killed by SIGKILL (a moment
// with no agent at all each time), and killed while it starts, then started again.
import { startSteadyLoad, waitFor, type LoadReport, type ReliabilityCluster, type Steps, sleep } from './cluster.js';

export interface RestartsResult {
  rows: Array<{ how: string; count: number; readyMs: number[] }>;
  load: LoadReport;
  /** When each stop and start happened, and the router's route changes (epoch ms), to place a failure in. */
  steps: Steps;
}

export async function restartsScenario(c: ReliabilityCluster, opts: { restarts: number; crashes: number }): Promise<RestartsResult> {
  const { sb, node1: node } = c;
  const load = startSteadyLoad(c);
  const rows: RestartsResult['rows'] = [];
  const steps: Steps = [];
  const step = (what: string) => steps.push({ at: Date.now(), step: what });
  const kill = async () => {
    const p = sb.agents.get(node.name)!;
    process.kill(p.pid, 'SIGKILL');
    await waitFor('the agent gone', () => p.child.exitCode !== null || p.child.signalCode !== null, Boolean, 10_000, 20);
    sb.agents.delete(node.name);
  };
  try {
    await sleep(2000);
    for (const how of ['SIGTERM', 'SIGKILL'] as const) {
      const readyMs: number[] = [];
      for (let i = 0; i < opts.restarts / 2; i++) {
        step(`${how} ${i + 1}: stopping`);
        if (how === 'SIGTERM') await sb.stopAgent(node);
        else await kill();
        step(`${how} ${i + 1}: no agent`);
        await sleep(300); // no agent at all for a moment: the datapath alone
        const t0 = Date.now();
        step(`${how} ${i + 1}: starting`);
        await sb.startAgent(node, 60_000);
        readyMs.push(Date.now() - t0);
        step(`${how} ${i + 1}: synced`);
        await sleep(700);
      }
      rows.push({ how, count: opts.restarts / 2, readyMs });
    }
    // Killed while it lists and syncs: the next start must still come up whole.
    const readyMs: number[] = [];
    for (let i = 0; i < opts.crashes; i++) {
      step(`mid-start ${i + 1}: stopping`);
      await sb.stopAgent(node);
      step(`mid-start ${i + 1}: starting, to be killed`);
      const started = sb.startAgent(node, 60_000).catch(() => undefined);
      await sleep(150 + 100 * (i % 5));
      const p = sb.agents.get(node.name);
      if (p && p.child.exitCode === null) process.kill(p.pid, 'SIGKILL');
      step(`mid-start ${i + 1}: killed`);
      await started;
      sb.agents.delete(node.name);
      const t0 = Date.now();
      step(`mid-start ${i + 1}: starting`);
      await sb.startAgent(node, 60_000);
      readyMs.push(Date.now() - t0);
      step(`mid-start ${i + 1}: synced`);
      await sleep(700);
    }
    rows.push({ how: 'SIGKILL mid-start, then a start', count: opts.crashes, readyMs });
    await sleep(2000);
  } catch (e) {
    await load.stop();
    throw e;
  }
  return { rows, load: await load.stop(), steps: [...steps, ...sb.routeChanges()] };
}
