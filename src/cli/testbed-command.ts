// `ferry testbed cleanup`: remove network-namespace testbeds left by crashed runs.
import { Command } from 'commander';
import { cleanupTestbeds } from '../sandbox/netns/cleanup.js';

export function registerTestbed(program: Command): void {
  const tb = program.command('testbed').description('network-namespace testbeds used by the tests and the sandbox');
  tb.command('cleanup')
    .description('remove testbeds whose owning process is gone (or all, with --all)')
    .option('--all', 'also remove testbeds whose owner is still running')
    .action(async (opts: { all?: boolean }) => {
      const r = await cleanupTestbeds({ all: Boolean(opts.all) });
      const removed = r.testbeds.length + r.strayNamespaces.length + r.strayCgroups.length + r.strayPins.length;
      for (const p of r.testbeds) process.stdout.write(`removed testbed ${p}\n`);
      for (const n of r.strayNamespaces) process.stdout.write(`removed stray namespace ${n}\n`);
      for (const c of r.strayCgroups) process.stdout.write(`removed stray cgroup ${c}\n`);
      for (const d of r.strayPins) process.stdout.write(`removed stray BPF pins ${d}\n`);
      if (removed === 0) process.stdout.write('nothing to clean up\n');
    });
}
