// One part of the reliability suite (bench/reliability.ts) run again and again, each time
// in a fresh 2-node sandbox, with both cores kept busy by spinning processes (`--busy 0`
// for none), as the other suites of a full `make test` keep them: for failures too rare
// for one run to show.
//   exhaustion  node-1 on an overfull conntrack map: the long-lived connections it keeps
//   upgrade     the rolling upgrade from the previous release: the long-lived connections
//               kept, and the requests lost in the switches and outside them
// Run as root: npx tsx bench/reliability-repeat.mts --part exhaustion|upgrade [--runs 10] [--busy 2]
import { spawn, type ChildProcess } from 'node:child_process';
import { parseArgs } from 'node:util';
import { exhaustionScenario } from '../src/sandbox/reliability/exhaustion.js';
import { failuresInSwitches, heldBreaks, upgradeFailures, upgradeScenario, type UpgradeResult } from '../src/sandbox/reliability/upgrade.js';
import { reliabilityCluster, type ReliabilityCluster } from '../src/sandbox/reliability/cluster.js';
import { unpackRelease } from '../src/sandbox/previous-release.js';
import { markdownTable, progress, publish } from './report.js';

const { values } = parseArgs({ options: { part: { type: 'string' }, runs: { type: 'string' }, busy: { type: 'string' } } });
const PART = values.part ?? 'exhaustion';
if (PART !== 'exhaustion' && PART !== 'upgrade') throw new Error(`--part ${PART}: exhaustion or upgrade`);
const RUNS = Number(values.runs ?? 10);
const BUSY = Number(values.busy ?? 2);

interface Row {
  run: number;
  seconds: number;
  /** Long-lived connections held through the part, and how many survived it. */
  held: number;
  survived: number;
  breaks: string;
  loadFailed: number;
  loadRequests: number;
  other: string;
  error?: string;
  /** Upgrade: each failure placed in the swap, what the nodes' maps said about it, and
   * the router's route changes near it (in the JSON only). */
  diagnosis?: string[];
}
type Outcome = Omit<Row, 'run' | 'seconds' | 'error'>;

async function exhaustion(c: ReliabilityCluster): Promise<Outcome> {
  const r = await exhaustionScenario(c);
  return { held: r.conntrack.held, survived: r.conntrack.survived, breaks: r.conntrack.brokeAtMs.map((ms) => `${ms} ms`).join(', '), loadFailed: r.conntrack.load.failed, loadRequests: r.conntrack.load.requests, other: `services part: ${r.services.load.failed} of ${r.services.load.requests} failed; lost flows balanced again (ct_midstream): ${r.conntrack.midstream}` };
}

/** The first few failed requests: target and error. */
const named = (fs: Array<{ target: string; error: string }>) => (fs.length ? ` (${fs.slice(0, 3).map((f) => `${f.target} ${f.error}`).join('; ')})` : '');

/** The router's route changes within 3 s of a failed request (a path that moved moves flows). */
function routesNear(r: UpgradeResult): string[] {
  const clock = (at: number) => new Date(at).toISOString().slice(11, 23);
  const near = r.steps.filter((s) => s.step.includes(': route ') && r.load.failures.some((f) => Math.abs(s.at - f.at) <= 3000));
  return [...r.load.failures.map((f) => `${clock(f.at)} request: ${f.target} ${f.error}`), ...near.map((s) => `${clock(s.at)} ${s.step}`)];
}

async function upgrade(c: ReliabilityCluster, fromCommit: string): Promise<Outcome> {
  const r = await upgradeScenario(c, { fromCommit, held: 16 });
  const { inSwitch, outside } = failuresInSwitches(r);
  return { held: r.held.count, survived: r.held.survived, breaks: heldBreaks(r).join('; '), loadFailed: r.load.failed, loadRequests: r.load.requests, other: `lost in a switch: ${inSwitch.length}${named(inSwitch)}, outside: ${outside.length}${named(outside)}; dropped in the switch: ${r.nodes.map((n) => `${n.node} ${n.handoverDrops}${n.chained === true ? '' : ` (not chained: ${String(n.chained)})`}`).join(', ')}`, ...(r.load.failed || r.held.survived < r.held.count ? { diagnosis: [...upgradeFailures(r), ...routesNear(r)] } : {}) };
}

async function once(run: number, release: ReturnType<typeof unpackRelease> | undefined): Promise<Row> {
  const spinners: ChildProcess[] = Array.from({ length: BUSY }, () => spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }));
  const started = Date.now();
  const seconds = () => Math.round((Date.now() - started) / 1000);
  try {
    const c = await reliabilityCluster(`rr${PART.slice(0, 2)}${run}`, release ? { agentBin: release.bin } : {});
    try {
      const outcome = release ? await upgrade(c, release.commit) : await exhaustion(c);
      return { run, seconds: seconds(), ...outcome };
    } finally {
      await c.down();
    }
  } catch (e) {
    return { run, seconds: seconds(), held: 0, survived: 0, breaks: '', loadFailed: 0, loadRequests: 0, other: '', error: (e as Error).message };
  } finally {
    for (const s of spinners) s.kill('SIGKILL'); // by the handle spawn gave, never by name
  }
}

const release = PART === 'upgrade' ? unpackRelease() : undefined;
const rows: Row[] = [];
try {
  for (let i = 0; i < RUNS; i++) {
    rows.push(await once(i, release));
    progress(`${JSON.stringify(rows.at(-1))}\n`);
  }
} finally {
  release?.remove();
}
const what = PART === 'upgrade'
  ? `bench/reliability.ts's upgrade part (both agents from the previous release${release ? ` (${release.commit})` : ''}, then node by node this build over the same pins; 16 long-lived connections through node-1's NodePort; the steady load)`
  : "bench/reliability.ts's exhaustion part (node-1 on a 256-entry conntrack map, long-lived connections through its NodePort under twice the steady load)";
publish({
  name: `${PART}-repeat`,
  title: PART === 'upgrade' ? 'Reliability: the rolling upgrade, run after run' : 'Reliability: an overfull conntrack map, run after run',
  command: `npx tsx bench/reliability-repeat.mts --part ${PART} --runs ${RUNS} --busy ${BUSY}`,
  method: `${what} ${RUNS} times, each in a fresh 2-node sandbox, with ${BUSY} spinning processes started before and ended after each run.`,
  tables: [markdownTable(['run', 's', 'long-lived connections', 'survived', 'broke', 'load requests failed', 'other', 'error'],
    rows.map((r) => [r.run, r.seconds, r.held, r.survived, r.breaks || '-', `${r.loadFailed} of ${r.loadRequests}`, r.other || '-', r.error ?? '-']))],
  notes: [`${rows.length} runs: ${rows.filter((r) => !r.error && r.survived === r.held).length} kept every connection; ${rows.reduce((n, r) => n + r.held - r.survived, 0)} connections broke in all; ${rows.reduce((n, r) => n + r.loadFailed, 0)} load requests failed in all; ${rows.filter((r) => r.error).length} failed to run`],
  data: { part: PART, runs: rows },
});
