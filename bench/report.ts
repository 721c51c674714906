// What every benchmark reports the same way: medians, the machine, the JSON under
// bench/results/.
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, release } from 'node:os';
import { join } from 'node:path';
import { REPO_ROOT } from '../test/harness/paths.js';

export const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export const machine = (): string => `${cpus().length} cores (${cpus()[0]?.model ?? '?'}), kernel ${release()}`;

/** Writes bench/results/<name>.json. */
export function writeResult(name: string, data: object): void {
  const dir = join(REPO_ROOT, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${name}.json`), JSON.stringify(data, null, 2));
}
