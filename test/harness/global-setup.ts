// Before any test: build the TypeScript (some tests run the CLI or a child process from
// dist/) and the BPF objects (cached by content hash, so cheap).
import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { compileAll } from '../../src/build/compile.js';

export default async function setup(): Promise<void> {
  const root = resolve(import.meta.dirname, '..', '..');
  execFileSync(resolve(root, 'node_modules', '.bin', 'tsc'), ['-p', resolve(root, 'tsconfig.json')], { stdio: 'inherit' });
  await compileAll({ root });
}
