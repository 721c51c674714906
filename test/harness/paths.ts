import { resolve } from 'node:path';

export const REPO_ROOT = resolve(import.meta.dirname, '..', '..');

/** The compiled object for a source under bpf/: `tests/pkt_counter` → build/bpf/tests/pkt_counter.bpf.o */
export function bpfObject(name: string): string {
  return resolve(REPO_ROOT, 'build', 'bpf', `${name}.bpf.o`);
}
