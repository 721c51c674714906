// A record of every testbed on this machine, so leftovers of a crashed run can be found
// and removed: `/run/ferry/testbeds/<prefix>.json` names the owner PID and what it made.
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const REGISTRY_DIR = process.env.FERRY_TESTBED_REGISTRY ?? '/run/ferry/testbeds';
/** Every testbed prefix starts with this, so stray namespaces can be recognised. */
export const TESTBED_PREFIX = 'fy';

export interface TestbedRecord {
  prefix: string;
  ownerPid: number;
  createdAt: string;
  namespaces: string[];
  cgroups: string[];
  pids: number[];
  /** Files and directories (pins, state) to remove with the testbed. */
  paths?: string[];
  /** runc containers (state directory and id) to delete with the testbed. */
  containers?: Array<{ root: string; id: string }>;
}

export function recordPath(prefix: string): string {
  return join(REGISTRY_DIR, `${prefix}.json`);
}

export function writeRecord(r: TestbedRecord): void {
  mkdirSync(REGISTRY_DIR, { recursive: true });
  writeFileSync(recordPath(r.prefix), JSON.stringify(r, null, 2));
}

export function readRecords(): TestbedRecord[] {
  if (!existsSync(REGISTRY_DIR)) return [];
  const out: TestbedRecord[] = [];
  for (const f of readdirSync(REGISTRY_DIR)) {
    if (!f.endsWith('.json')) continue;
    try {
      out.push(JSON.parse(readFileSync(join(REGISTRY_DIR, f), 'utf8')) as TestbedRecord);
    } catch {
      // A half-written record: its namespaces are still found by prefix.
    }
  }
  return out;
}

export function removeRecord(prefix: string): void {
  rmSync(recordPath(prefix), { force: true });
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
