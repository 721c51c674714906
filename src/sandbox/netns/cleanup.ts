// Remove testbeds left behind by runs that died: their owner PID is gone, or (with `all`)
// every testbed on this machine. Also namespaces and cgroups with the testbed prefix that
// no record names.
import { existsSync, readdirSync } from 'node:fs';
import { exec } from '../../sys/exec.js';
import { TESTBED_PREFIX, pidAlive, readRecords, type TestbedRecord } from './registry.js';
import { CGROUP2_MOUNT, destroyResources } from './testbed.js';
import { join } from 'node:path';

export interface CleanupReport {
  testbeds: string[];
  strayNamespaces: string[];
  strayCgroups: string[];
}

export async function cleanupTestbeds(opts: { all?: boolean } = {}): Promise<CleanupReport> {
  const records = readRecords();
  const report: CleanupReport = { testbeds: [], strayNamespaces: [], strayCgroups: [] };
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
  return report;
}
