// What every benchmark reports the same way: median and spread of repeated runs, the
// machine, the command, and the files under bench/results/<set>/ (<name>.json, <name>.md
// and the SVG plots the Markdown links to).
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, release, totalmem } from 'node:os';
import { join, resolve } from 'node:path';

const REPO_ROOT = resolve(import.meta.dirname, '..');

/** Where results go: FERRY_BENCH_RESULTS (relative to the repository), else bench/results/tmp/. */
export const RESULTS_DIR = resolve(REPO_ROOT, process.env.FERRY_BENCH_RESULTS ?? join('bench', 'results', 'tmp'));

export const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** The mean of the middle half: as robust as the median to a few outliers, and able to
 * tell values apart finer than a clock's step (this machine's kvm-clock: about 10 ns),
 * where the median of readings within a step or two jumps a whole step. */
export function interquartileMean(xs: number[]): number {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = sorted.slice(Math.floor(sorted.length / 4), Math.max(1, Math.ceil((3 * sorted.length) / 4)));
  return mid.reduce((a, b) => a + b, 0) / mid.length;
}

/** The median of repeated runs and their spread (min to max). */
export interface Stat { median: number; min: number; max: number }
export const stat = (xs: number[]): Stat => ({ median: median(xs), min: Math.min(...xs), max: Math.max(...xs) });

/** "54.2 (53.1–56.0)": median, then the spread of the runs. */
export const fmtStat = (s: Stat, digits = 1): string =>
  s.min === s.max ? s.median.toFixed(digits) : `${s.median.toFixed(digits)} (${s.min.toFixed(digits)}–${s.max.toFixed(digits)})`;

export const ratio = (a: number, b: number): string => (b > 0 && Number.isFinite(a) ? (a / b).toFixed(2) : '-');

export const machine = (): string =>
  `${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${Math.round(totalmem() / 2 ** 30)} GiB, kernel ${release()}`;

export function markdownTable(header: string[], rows: Array<Array<string | number>>): string {
  const line = (cells: Array<string | number>) => `| ${cells.map((c) => String(c).replace(/\|/g, '\\|')).join(' | ')} |`;
  return [line(header), line(header.map(() => '---')), ...rows.map(line)].join('\n');
}

/** Progress on stderr, so stdout stays the report. */
export const progress = (msg: string): void => void process.stderr.write(msg);

export interface Plot { file: string; caption: string; svg: string }

export interface Report {
  /** File stem under bench/results/. */
  name: string;
  title: string;
  command: string;
  /** One paragraph: what runs where, how many repeats, what a cell is. */
  method: string;
  tables: string[];
  /** The ratios that matter, one line each. */
  ratios?: string[];
  notes?: string[];
  plots?: Plot[];
  data: object;
}

/** Prints the report as Markdown and writes the JSON, the Markdown and the plots. */
export function publish(r: Report): void {
  const m = machine();
  const md = [
    `## ${r.title}`,
    '',
    ...r.tables.flatMap((t) => [t, '']),
    ...(r.ratios?.length ? [...r.ratios.map((x) => `- ${x}`), ''] : []),
    ...(r.notes?.length ? [...r.notes.map((x) => `> ${x}`), ''] : []),
    ...(r.plots ?? []).flatMap((p) => [`![${p.caption}](${p.file})`, '']),
    `Method: ${r.method}`,
    '',
    `Machine: ${m}. Command: \`${r.command}\``,
    '',
  ].join('\n');
  process.stdout.write(`${md}\n`);
  mkdirSync(RESULTS_DIR, { recursive: true });
  writeFileSync(join(RESULTS_DIR, `${r.name}.md`), md);
  for (const p of r.plots ?? []) writeFileSync(join(RESULTS_DIR, p.file), p.svg);
  writeFileSync(join(RESULTS_DIR, `${r.name}.json`), `${JSON.stringify({ machine: m, command: r.command, date: new Date().toISOString(), ...r.data }, null, 2)}\n`);
}

/** Busy CPU time of the whole machine so far, in nanoseconds (all cores, /proc/stat; USER_HZ 100). */
export function busyCpuNs(): number {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const [user, nice, system, , , irq, softirq, steal] = f as number[];
  return ((user! + nice! + system! + irq! + softirq! + steal!) * 1e9) / 100;
}
