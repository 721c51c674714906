// Remove testbeds left behind by runs that died: their owner PID is gone, or (with `all`)
// every testbed on this machine. Also namespaces, cgroups and BPF pin directories with the
// testbed prefix that no live testbed owns (a dead run's pinned maps hold their memory).
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { exec } from '../../sys/exec.js';
import { TESTBED_PREFIX, pidAlive, readRecords, type TestbedRecord } from './registry.js';
import { CGROUP2_MOUNT, destroyResources } from './testbed.js';
import { join } from 'node:path';

export interface CleanupReport {
  testbeds: string[];
  strayNamespaces: string[];
  strayCgroups: string[];
  strayPins: string[];
}

/** Where the datapath tests and benchmarks pin a testbed node's maps: `<prefix>-<node>`. */
export const BPFFS = process.env.FERRY_BPFFS ?? '/sys/fs/bpf';

export async function cleanupTestbeds(opts: { all?: boolean } = {}): Promise<CleanupReport> {
  const records = readRecords();
  const report: CleanupReport = { testbeds: [], strayNamespaces: [], strayCgroups: [], strayPins: [] };
  const livePrefixes = new Set<string>();
  for (const r of records) {
    if (!opts.all && pidAlive(r.ownerPid)) {
      livePrefixes.add(r.prefix);
      continue;
    }
    await destroyResources(r);
    report.testbeds.push(r.prefix);
  }
  const owned = (name: string) => [...livePrefixes].some((p) => name === p || name.startsWith(`${p}-`));
  const list = await exec('ip', ['netns', 'list']);
  for (const line of list.stdout.split('\n')) {
    const ns = line.split(' ')[0] ?? '';
    if (ns.startsWith(TESTBED_PREFIX) && /^fy[0-9a-z]+-/.test(ns) && !owned(ns)) {
      await exec('ip', ['netns', 'del', ns]);
      report.strayNamespaces.push(ns);
    }
  }
  if (existsSync(CGROUP2_MOUNT)) {
    for (const d of readdirSync(CGROUP2_MOUNT)) {
      if (!/^fy[0-9a-z-]+$/.test(d) || owned(d)) continue;
      const root = join(CGROUP2_MOUNT, d);
      const children = readdirSync(root, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => join(root, e.name));
      const stray: TestbedRecord = { prefix: d, ownerPid: 0, createdAt: '', namespaces: [], cgroups: [root, ...children], pids: [] };
      await destroyResources(stray);
      report.strayCgroups.push(root);
    }
  }
  if (existsSync(BPFFS)) {
    for (const d of readdirSync(BPFFS)) {
      if (!/^fy[0-9a-z]+-/.test(d) || owned(d)) continue;
      rmSync(join(BPFFS, d), { recursive: true, force: true });
      report.strayPins.push(join(BPFFS, d));
    }
  }
  return report;
}
