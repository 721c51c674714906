// Per-packet cost of this checkout against another commit, in alternating runs of
// bench/packet-cost.ts: on a machine that is noisy in bursts, two builds timed an hour apart
// (or one after the other, once) can differ by more than the change between them. The base
// commit is checked out beside this one (a git worktree, removed at the end), built, and
// given this checkout's bench/ so that both builds are timed the same way. Pairs run in
// ABBA order (base first in even pairs) so that a drift over the run weighs on both; each
// case's result is the per-pair ratio head / base, its median and spread.
// Run as root: npx tsx bench/compare-builds.ts --base REV [--pairs 6] [--services 1000] [--runs 2000] [--cases REGEX]
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { fmtStat, markdownTable, progress, publish, stat, type Stat } from './report.js';

const { values } = parseArgs({ options: { base: { type: 'string' }, pairs: { type: 'string' }, services: { type: 'string' }, runs: { type: 'string' }, cases: { type: 'string' } } });
if (!values.base) throw new Error('--base REV: the commit to compare this checkout with');
const PAIRS = Number(values.pairs ?? 6);
const SERVICES = Number(values.services ?? 1000);
const RUNS = Number(values.runs ?? 2000);
const HEAD_DIR = resolve(import.meta.dirname, '..');

const git = (...args: string[]): string => execFileSync('git', ['-C', HEAD_DIR, ...args], { encoding: 'utf8' }).trim();

interface CostRow { case: string; one: Stat; many?: Stat }
type Side = 'base' | 'head';

/** The base commit checked out and built beside this checkout, with this checkout's bench/. */
function checkoutBase(rev: string, dir: string): void {
  git('worktree', 'add', '--detach', dir, rev);
  symlinkSync(join(HEAD_DIR, 'node_modules'), join(dir, 'node_modules'));
  for (const f of ['packet-cost.ts', 'interleave.ts', 'new-flow.ts', 'report.ts', 'map-sizes.ts', 'plot.ts']) cpSync(join(HEAD_DIR, 'bench', f), join(dir, 'bench', f));
  build(dir);
}

function build(dir: string): void {
  execFileSync('make', ['-C', dir, 'build-ts'], { stdio: 'ignore' });
  execFileSync(process.execPath, [join(dir, 'bin', 'ferry.js'), 'compile'], { cwd: dir, stdio: 'ignore' });
}

/** One packet-cost run in `dir`: each case's cost with 1 Service and with SERVICES more (its batches' median). */
function runCost(dir: string, out: string): Map<string, number> {
  const only = values.cases === undefined ? [] : ['--cases', values.cases];
  execFileSync('npx', ['tsx', 'bench/packet-cost.ts', '--services', String(SERVICES), '--runs', String(RUNS), ...only], { cwd: dir, stdio: 'ignore', env: { ...process.env, FERRY_BENCH_RESULTS: out } });
  const data = JSON.parse(readFileSync(join(out, 'packet-cost.json'), 'utf8')) as { baselineNs: Record<string, Stat>; rows: CostRow[] };
  const costs = new Map(data.rows.map((r) => [r.case, r.one.median]));
  for (const r of data.rows) if (r.many) costs.set(`${r.case}, ${SERVICES} Services`, r.many.median);
  for (const [hook, s] of Object.entries(data.baselineNs)) costs.set(`${hook}: empty program`, s.median);
  return costs;
}

function main(): void {
  const baseSha = git('rev-parse', '--verify', `${values.base!}^{commit}`);
  const headSha = git('rev-parse', 'HEAD');
  const dirty = git('status', '--porcelain', '--', 'bpf', 'src') !== '';
  const scratch = mkdtempSync(join(tmpdir(), 'ferry-compare-'));
  const baseDir = join(scratch, 'base');
  const runs: Record<Side, Array<Map<string, number>>> = { base: [], head: [] };
  try {
    progress(`building ${baseSha.slice(0, 12)} in ${baseDir}\n`);
    checkoutBase(baseSha, baseDir);
    build(HEAD_DIR);
    for (let i = 0; i < PAIRS; i++) {
      const order: Side[] = i % 2 === 0 ? ['base', 'head'] : ['head', 'base'];
      for (const side of order) runs[side].push(runCost(side === 'base' ? baseDir : HEAD_DIR, join(scratch, `${side}-${i}`)));
      progress(`pair ${i + 1}/${PAIRS}\n`);
    }
  } finally {
    if (existsSync(baseDir)) git('worktree', 'remove', '--force', baseDir);
    rmSync(scratch, { recursive: true, force: true });
  }
  const cases = [...runs.head[0]!.keys()].filter((c) => runs.base.every((r) => r.has(c)));
  const rows = cases.map((c) => {
    const base = runs.base.map((r) => r.get(c)!);
    const head = runs.head.map((r) => r.get(c)!);
    return { case: c, base: stat(base), head: stat(head), ratio: stat(head.map((h, i) => h / base[i]!)) };
  });
  const table = markdownTable(
    ['case (1 Service, unless it says more)', `base ns (${PAIRS} runs)`, `head ns (${PAIRS} runs)`, 'head / base, per pair'],
    rows.map((r) => [r.case, fmtStat(r.base, 0), fmtStat(r.head, 0), fmtStat(r.ratio, 2)]),
  );
  publish({
    name: 'compare-builds',
    title: `Per-packet cost, ${headSha.slice(0, 12)}${dirty ? ' (with uncommitted changes)' : ''} against ${baseSha.slice(0, 12)} (alternating runs)`,
    command: `npx tsx bench/compare-builds.ts --base ${values.base!} --pairs ${PAIRS} --services ${SERVICES} --runs ${RUNS}`,
    method: `bench/packet-cost.ts (${SERVICES} Services, ${RUNS} single PROG_TEST_RUN runs per batch) run ${PAIRS} times in each build, alternating in ABBA order; the base built from its own checkout with this checkout's bench/ so both time the same cases the same way. A cell is the median (min–max) over the runs of each run's median for the case (its node with 1 Service, or with ${SERVICES} more); the ratio is taken within each pair (runs seconds apart), then its median and spread. Below 1: the head is faster.`,
    tables: [table],
    ratios: rows.filter((r) => !r.case.includes('empty')).map((r) => `${r.case}: ${r.ratio.median.toFixed(2)}× the base (pairs ${r.ratio.min.toFixed(2)}–${r.ratio.max.toFixed(2)})`),
    data: { base: baseSha, head: headSha, dirty, pairs: PAIRS, services: SERVICES, runs: RUNS, rows },
  });
}

main();
