// Build the BPF objects once before any test (cached by content hash, so cheap).
import { resolve } from 'node:path';
import { compileAll } from '../../src/build/compile.js';

export default async function setup(): Promise<void> {
  const root = resolve(import.meta.dirname, '..', '..');
  await compileAll({ root });
}
