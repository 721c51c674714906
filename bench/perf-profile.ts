// A CPU profile of the whole machine while some work runs: `perf record -a -g`, then its
// top symbols (self time, every CPU) as text beside the bench's report. The work may block
// the event loop (a PROG_TEST_RUN run does): perf is its own process, started and ended by PID.
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execOk } from '../src/sys/exec.js';
import { RESULTS_DIR } from './report.js';

/** Runs `perf record -q -a <args> -o <file>` (every CPU) while `work` runs; throws if perf failed. */
export async function perfRecord(args: readonly string[], file: string, work: () => void | Promise<void>): Promise<void> {
  const perf = spawn('perf', ['record', '-q', '-a', ...args, '-o', file], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  perf.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((r) => perf.on('exit', (code) => r(code)));
  await new Promise((r) => setTimeout(r, 1500)); // perf's buffers set up on every CPU
  try {
    await work();
  } finally {
    perf.kill('SIGINT'); // by the PID we started
  }
  const code = await exited;
  if (code !== 0 && code !== null) throw new Error(`perf record exited ${code}: ${stderr.trim()}`);
}

/** Profiles `work`; writes `<name>.txt` (perf report: symbols over 0.3 % of the samples). */
export async function profileWhile(name: string, work: () => void | Promise<void>): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'ferry-perf-'));
  const file = join(dir, 'perf.data');
  try {
    await perfRecord(['-g', '-F', '4999'], file, work);
    const report = await execOk('perf', ['report', '-i', file, '--stdio', '--no-children', '--sort', 'symbol', '--percent-limit', '0.3', '-g', 'none'], { timeoutMs: 300_000 });
    mkdirSync(RESULTS_DIR, { recursive: true });
    const out = join(RESULTS_DIR, `${name}.txt`);
    writeFileSync(out, report);
    return out;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
