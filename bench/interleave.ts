// Timing several programs' single PROG_TEST_RUN runs against each other on this machine,
// whose two vCPUs take turns being slow: for minutes at a time one of them runs a
// program that touches many cache lines at about half speed (an empty program hardly
// slower), and which one changes. So the columns are timed interleaved in short chunks,
// on every CPU in turn (the main thread pinned with taskset), and each batch keeps the CPU
// its columns ran fastest on: the program's cost, not the host's spell.
import { execFileSync } from 'node:child_process';
import { interquartileMean, stat, type Stat } from './report.js';

/** How many single runs of one column in a row before the next column's. */
export const CHUNK = 100;

/** The CPUs this process's main thread (its TID is its PID) may run on: taskset's list,
 * e.g. "pid 7's current affinity list: 0,2-3". */
export function mainThreadCpus(): number[] {
  const list = execFileSync('taskset', ['-pc', String(process.pid)], { encoding: 'utf8' }).split(':').pop()!.trim();
  return list.split(',').flatMap((part) => {
    const [lo, hi] = part.split('-').map(Number);
    return Array.from({ length: (hi ?? lo!) - lo! + 1 }, (_, i) => lo! + i);
  });
}

/** Pin the main thread, where the timed runs are made. */
function pinMainThread(cpus: number[]): void {
  execFileSync('taskset', ['-pc', cpus.join(','), String(process.pid)], { stdio: 'ignore' });
}

export interface Interleaved<K extends string> {
  /** Per column: the median and spread (min–max) over the batches of each batch's
   * interquartile mean (report.ts). */
  columns: Record<K, Stat>;
  /** The CPU each batch kept. */
  cpus: number[];
}

/**
 * `batches` batches of `runs` single runs of every column (rounded up to whole chunks) per
 * CPU. Within a batch each CPU runs all columns in turn, CHUNK runs at a time; the batch
 * keeps the CPU on which the columns named by `judge` took least time together (their
 * interquartile means summed), and every column's from that CPU, so the columns compared
 * stay from one CPU in the same seconds.
 */
export function interleaved<K extends string>(run: Record<K, () => number>, judge: NoInfer<K>[], batches: number, runs: number): Interleaved<K> {
  const names = Object.keys(run) as K[];
  const rounds = Math.max(1, Math.ceil(runs / CHUNK));
  const kept: Record<string, number[]> = Object.fromEntries(names.map((k) => [k, []]));
  const cpus: number[] = [];
  const allowed = mainThreadCpus();
  try {
    for (let b = 0; b < batches; b++) {
      const xs = allowed.map(() => Object.fromEntries(names.map((k) => [k, [] as number[]])) as Record<K, number[]>);
      for (let r = 0; r < rounds; r++) {
        for (const [at, cpu] of allowed.entries()) {
          pinMainThread([cpu]);
          // Every other round in reverse order: no column always follows the same one.
          for (const k of r % 2 ? [...names].reverse() : names) for (let i = 0; i < CHUNK; i++) xs[at]![k].push(run[k]());
        }
      }
      const means = xs.map((byCol) => Object.fromEntries(names.map((k) => [k, interquartileMean(byCol[k])])) as Record<K, number>);
      const cost = (at: number) => judge.reduce((sum, k) => sum + means[at]![k], 0);
      const best = means.reduce((a, _, at) => (cost(at) < cost(a) ? at : a), 0);
      cpus.push(allowed[best]!);
      for (const k of names) kept[k]!.push(means[best]![k]);
    }
  } finally {
    pinMainThread(allowed); // as it was
  }
  return { columns: Object.fromEntries(names.map((k) => [k, stat(kept[k]!)])) as Record<K, Stat>, cpus };
}
