// What bpf and e2e tests need from the machine. Outside CI a missing requirement skips
// the suite with the reason; under CI=true it fails it, so CI can never pass by skipping.
import { existsSync, statfsSync } from 'node:fs';
import { describe, it } from 'vitest';

export type Requirement = 'root' | 'bpffs' | 'cgroup2' | 'netns' | 'btf';

const BPF_FS_MAGIC = 0xcafe4a11;

function missing(req: Requirement): string | undefined {
  switch (req) {
    case 'root':
      return process.getuid?.() === 0 ? undefined : 'needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN)';
    case 'bpffs':
      try {
        return Number(statfsSync('/sys/fs/bpf').type) === BPF_FS_MAGIC ? undefined : 'bpffs is not mounted at /sys/fs/bpf (make setup mounts it)';
      } catch {
        return 'no /sys/fs/bpf';
      }
    case 'cgroup2':
      return existsSync('/sys/fs/cgroup/unified/cgroup.procs') || existsSync('/sys/fs/cgroup/cgroup.procs') ? undefined : 'no cgroup v2 mount';
    case 'netns':
      return existsSync('/proc/self/ns/net') ? undefined : 'no network namespaces';
    case 'btf':
      return existsSync('/sys/kernel/btf/vmlinux') ? undefined : 'kernel without BTF (/sys/kernel/btf/vmlinux)';
  }
}

export const inCi = process.env.CI === 'true';

/** describe() that runs only where `reqs` hold: skipped locally, failed under CI=true. */
export function describeWith(reqs: Requirement[], name: string, fn: () => void): void {
  const why = reqs.map(missing).filter((x): x is string => Boolean(x));
  if (why.length === 0) {
    describe(name, fn);
  } else if (inCi) {
    describe(name, () => {
      it('has what it needs from the machine', () => {
        throw new Error(`cannot run under CI=true: ${why.join('; ')}`);
      });
    });
  } else {
    // Outside CI only: say why, loudly, and do not pretend to pass.
    process.stderr.write(`SKIPPED suite "${name}": ${why.join('; ')}\n`);
    describe.skip(name, fn);
  }
}
