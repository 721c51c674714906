import { describe, expect, it } from 'vitest';
import { isPrime, maglevTable } from '../../src/datapath/maglev.js';

const names = (n: number) => Array.from({ length: n }, (_, i) => `10.244.${i >> 8}.${i & 255}:8080/tcp`);

describe('Maglev tables', () => {
  it('give each backend about M/N positions', () => {
    const t = maglevTable(names(10), 16381);
    const counts = new Array(10).fill(0);
    for (const i of t) counts[i]++;
    for (const c of counts) expect(Math.abs(c - 1638.1) / 1638.1).toBeLessThan(0.02);
  });

  it('are the same wherever they are computed (names only)', () => {
    expect(maglevTable(names(7), 1021)).toEqual(maglevTable(names(7), 1021));
  });

  it('move only about the removed backend\'s share when one of N goes', () => {
    for (const n of [3, 10, 50]) {
      const before = maglevTable(names(n), 16381);
      const kept = names(n).filter((_, i) => i !== 1);
      const after = maglevTable(kept, 16381);
      const nameBefore = (p: number) => names(n)[before[p]!];
      const nameAfter = (p: number) => kept[after[p]!];
      let moved = 0;
      for (let p = 0; p < 16381; p++) if (nameBefore(p) !== nameAfter(p)) moved++;
      expect(moved / 16381).toBeLessThanOrEqual(1 / n + 0.05);
    }
  });

  it('want a prime size', () => {
    expect(isPrime(16381)).toBe(true);
    expect(() => maglevTable(names(2), 16384)).toThrow(/not prime/);
  });
});
