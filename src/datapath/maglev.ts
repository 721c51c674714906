// Maglev consistent hashing (Eisenbud et al., NSDI 2016): a lookup table of prime size M
// where each backend owns about M/N positions, built from each backend's name alone, so
// every node computes the same table, and removing one of N backends moves about 1/N of
// the positions (the flows that were on it), not more.
import { createHash } from 'node:crypto';

export const DEFAULT_MAGLEV_TABLE_SIZE = 16381;

export function isPrime(n: number): boolean {
  if (!Number.isInteger(n) || n < 2) return false;
  for (let d = 2; d * d <= n; d++) if (n % d === 0) return false;
  return true;
}

function hashes(name: string): [number, number] {
  const h = createHash('sha256').update(name).digest();
  return [h.readUInt32LE(0), h.readUInt32LE(4)];
}

/** For each table position, the index (into `names`) of the backend that owns it. */
export function maglevTable(names: readonly string[], m: number): Uint32Array {
  if (!isPrime(m)) throw new Error(`Maglev table size ${m} is not prime`);
  const n = names.length;
  const table = new Uint32Array(m);
  if (n === 0) return table;
  const owner = new Int32Array(m).fill(-1);
  const offset = new Array<number>(n);
  const skip = new Array<number>(n);
  const next = new Array<number>(n).fill(0);
  names.forEach((name, i) => {
    const [h1, h2] = hashes(name);
    offset[i] = h1 % m;
    skip[i] = (h2 % (m - 1)) + 1;
  });
  let filled = 0;
  for (;;) {
    for (let i = 0; i < n; i++) {
      let c = (offset[i]! + next[i]! * skip[i]!) % m;
      while (owner[c]! >= 0) {
        next[i]!++;
        c = (offset[i]! + next[i]! * skip[i]!) % m;
      }
      owner[c] = i;
      next[i]!++;
      if (++filled === m) {
        for (let p = 0; p < m; p++) table[p] = owner[p]!;
        return table;
      }
    }
  }
}
