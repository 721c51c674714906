// Start a built-in workload (whoami, udp-echo, tcp-echo) in a host and wait until it listens.
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Host, Proc } from '../netns/testbed.js';

export const WORKLOADS_BIN = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'dist', 'sandbox', 'workloads', 'main.js');

export type Workload = { kind: 'whoami'; port: number; name: string } | { kind: 'udp-echo' | 'tcp-echo'; port: number };

export function workloadArgs(w: Workload): string[] {
  return w.kind === 'whoami' ? ['whoami', '--port', String(w.port), '--name', w.name] : [w.kind, '--port', String(w.port)];
}

/**
 * Spawn the workloads in `host` and resolve once every one reports it is listening.
 * `cpus` (taskset's list, e.g. "1") pins them, as benchmarks do.
 */
export async function startWorkloads(host: Host, workloads: Workload[], opts: { timeoutMs?: number; cpus?: string } = {}): Promise<Proc[]> {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const pin = opts.cpus ? ['taskset', '-c', opts.cpus] : [];
  const procs = workloads.map((w) => host.spawn([...pin, process.execPath, WORKLOADS_BIN, ...workloadArgs(w)]));
  const end = Date.now() + timeoutMs;
  while (!procs.every((p) => p.output().includes('listening'))) {
    if (Date.now() > end || procs.some((p) => p.child.exitCode !== null)) {
      throw new Error(`workloads in ${host.name} did not start: ${procs.map((p) => p.output()).join(' | ')}`);
    }
    await new Promise((r) => setTimeout(r, 25));
  }
  return procs;
}
