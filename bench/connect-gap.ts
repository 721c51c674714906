// Where a NodePort connection's extra time goes (issue 20): connect() latency from the
// external client, with the backend on the node, through several paths that differ in one
// thing each, and the time the tc programs themselves take per packet (the kernel's BPF
// run-time statistics, kernel.bpf_stats_enabled, over the same connects). The paths: see
// connect-paths.ts.
// Run as root: npx tsx bench/connect-gap.ts [--count 1000] [--repeat 5]
import { parseArgs } from 'node:util';
import { MiniCluster } from '../src/sandbox/mini-cluster.js';
import { exec, execOk } from '../src/sys/exec.js';
import { connectRun, setUpConnectPaths } from './connect-paths.js';
import { fmtStat, markdownTable, progress, publish, ratio, stat, type Stat } from './report.js';

const { values } = parseArgs({ options: { count: { type: 'string' }, repeat: { type: 'string' } } });
const COUNT = Number(values.count ?? 1000);
const REPEAT = Number(values.repeat ?? 5);
const COMMAND = `npx tsx bench/connect-gap.ts --count ${COUNT} --repeat ${REPEAT}`;

interface ProgStats { runNs: number; runs: number }
interface Row { path: string; p50: Stat; p90: Stat; programNsPerConnect: number; programRunsPerConnect: number; failures: number }

/** run_time_ns and run_cnt of ferry's tc programs (bpftool; kernel.bpf_stats_enabled must be 1). */
async function tcProgramStats(): Promise<ProgStats> {
  const progs = JSON.parse(await execOk('bpftool', ['-j', 'prog', 'show'])) as Array<{ name?: string; run_time_ns?: number; run_cnt?: number }>;
  const tc = progs.filter((p) => p.name === 'tc_ingress' || p.name === 'tc_egress');
  return { runNs: tc.reduce((a, p) => a + (p.run_time_ns ?? 0), 0), runs: tc.reduce((a, p) => a + (p.run_cnt ?? 0), 0) };
}

async function main(): Promise<void> {
  progress('connect-gap: 1-node testbed ');
  const c = await MiniCluster.create({ nodes: 1 });
  const statsWas = (await execOk('sysctl', ['-n', 'kernel.bpf_stats_enabled'])).trim();
  await execOk('sysctl', ['-qw', 'kernel.bpf_stats_enabled=1']);
  try {
    const paths = await setUpConnectPaths(c, { nodeSocket: true });
    const connect = async (to: string) => JSON.parse(await connectRun(c, to, COUNT)) as { p50: number; p90: number; failures: number };
    for (const p of paths) await connect(p.to); // warm-up: neighbours, first flows, CPU frequency
    const rows: Row[] = [];
    for (const p of paths) {
      progress(`\n${p.path} `);
      const runs = [];
      const before = await tcProgramStats();
      for (let r = 0; r < REPEAT; r++) {
        runs.push(await connect(p.to));
        progress('.');
      }
      const after = await tcProgramStats();
      const connects = COUNT * REPEAT;
      rows.push({ path: p.path, p50: stat(runs.map((x) => x.p50)), p90: stat(runs.map((x) => x.p90)), programNsPerConnect: (after.runNs - before.runNs) / connects, programRunsPerConnect: (after.runs - before.runs) / connects, failures: runs.reduce((a, x) => a + x.failures, 0) });
    }
    progress('\n');
    const direct = rows.find((r) => r.path === 'direct')!.p50.median;
    publish({
      name: 'connect-gap',
      title: 'Where a NodePort connection\'s time goes (backend on the node)',
      command: COMMAND,
      method: `a 1-node testbed (MiniCluster); the client connects ${COUNT} times per run (closing with a reset), ${REPEAT} runs per path after a warm-up, median [min–max] of the runs' percentiles. The tc programs' time comes from the kernel's BPF statistics (kernel.bpf_stats_enabled=1 for the run): run_time_ns and run_cnt of tc_ingress and tc_egress over all of a path's connects (SYN, SYN-ACK, ACK and the reset, both directions), divided by the connects.`,
      tables: [markdownTable(
        ['path', 'connect p50 µs', 'p90 µs', 'p50 − direct µs', 'p50 / direct', 'tc program runs per connect', 'tc program ns per connect', 'failed'],
        rows.map((r) => [r.path, fmtStat(r.p50), fmtStat(r.p90), (r.p50.median - direct).toFixed(1), ratio(r.p50.median, direct), r.programRunsPerConnect.toFixed(1), r.programNsPerConnect.toFixed(0), r.failures]),
      )],
      data: { count: COUNT, repeat: REPEAT, rows },
    });
  } finally {
    await exec('sysctl', ['-qw', `kernel.bpf_stats_enabled=${statsWas || '0'}`]);
    await c.close();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
