// The estimators the per-packet benchmarks rest on (bench/report.ts, bench/interleave.ts).
import { describe, expect, it } from 'vitest';
import { CHUNK, interleaved, mainThreadCpus } from '../../bench/interleave.js';
import { interquartileMean, median } from '../../bench/report.js';

describe('interquartileMean', () => {
  it('tells apart values within one clock step, where the median jumps a whole step', () => {
    // Readings of a ~72 ns program on a 10 ns clock: 70 and 80 in proportion.
    const low = [...Array(700).fill(70), ...Array(300).fill(80)];
    const high = [...Array(450).fill(70), ...Array(550).fill(80)];
    expect(median(low)).toBe(70);
    expect(median(high)).toBe(80);
    expect(interquartileMean(low)).toBeCloseTo(71, 6);
    expect(interquartileMean(high)).toBeCloseTo(76, 6);
  });

  it('leaves out a quarter of outliers at either end', () => {
    const xs = [...Array(50).fill(100), ...Array(20).fill(5000), ...Array(20).fill(1)];
    expect(interquartileMean(xs)).toBe(100);
    expect(interquartileMean([42])).toBe(42);
  });
});

describe('interleaved', () => {
  it('times every column the same number of times on every CPU and keeps one CPU per batch', () => {
    const allowed = mainThreadCpus();
    const calls = { a: 0, b: 0 };
    const out = interleaved({ a: () => (++calls.a, 10), b: () => (++calls.b, 20) }, ['a'], 3, 150);
    // 150 runs round up to two chunks per column, CPU and batch.
    expect(calls).toEqual({ a: 3 * 2 * CHUNK * allowed.length, b: 3 * 2 * CHUNK * allowed.length });
    expect(out.columns.a).toEqual({ median: 10, min: 10, max: 10 });
    expect(out.columns.b).toEqual({ median: 20, min: 20, max: 20 });
    expect(out.cpus).toHaveLength(3);
    for (const c of out.cpus) expect(allowed).toContain(c);
    // The thread may run where it could before.
    expect(mainThreadCpus()).toEqual(allowed);
  });
});
