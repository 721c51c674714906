// FRR in a sandbox host (a network namespace): zebra, bgpd and bfdd in the foreground as
// the testbed's processes (ended by PID, like everything a run starts), with FRR's
// pathspace (-N) set to the namespace's name, so several instances run side by side with
// their own /etc/frr/<ns> and /var/run/frr/<ns>, and `vtysh -N <ns>` reaches each.
import { existsSync, mkdirSync, rmSync, writeFileSync, chownSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { Vtysh } from '../sys/vtysh.js';
import type { Host, Proc, Testbed } from './netns/testbed.js';

export const FRR_DAEMONS_DIR = '/usr/lib/frr';
export const VTYSH = '/usr/bin/vtysh';
type Daemon = 'zebra' | 'bgpd' | 'bfdd';

export interface FrrInstance {
  pathspace: string;
  vtysh: Vtysh;
  procs: Proc[];
  /** End a daemon and start it again (empty: FRR's configuration file is the one given at the start). */
  restart(daemon: Daemon): Promise<void>;
  stop(): Promise<void>;
}

function frrIds(): { uid: number; gid: number } {
  const id = (flag: string) => Number(execFileSync('id', [flag, 'frr'], { encoding: 'utf8' }).trim());
  return { uid: id('-u'), gid: id('-g') };
}

/** Start FRR in `host`, its daemons logging to /var/run/frr/<ns>/, then apply `config`. */
export async function startFrr(tb: Testbed, host: Host, config: string, daemons: Daemon[] = ['zebra', 'bgpd', 'bfdd']): Promise<FrrInstance> {
  const ns = host.netns;
  const etc = join('/etc/frr', ns);
  const run = join('/var/run/frr', ns);
  const { uid, gid } = frrIds();
  for (const d of [etc, run]) {
    mkdirSync(d, { recursive: true });
    chownSync(d, uid, gid);
    tb.ownPath(d);
  }
  writeFileSync(join(etc, 'vtysh.conf'), 'service integrated-vtysh-config\n');
  writeFileSync(join(etc, 'frr.conf'), config);
  const procs: Proc[] = [];
  const start = async (d: Daemon): Promise<Proc> => {
    const extra = d === 'zebra' ? ['-s', '90000000'] : [];
    // -P 0: no TCP vty; the vtysh socket in /var/run/frr/<ns> is enough.
    const p = host.spawn([join(FRR_DAEMONS_DIR, d), '-N', ns, '-F', 'datacenter', '-P', '0', '--log', `file:${join(run, `${d}.log`)}`, ...extra]);
    for (let i = 0; i < 200 && !existsSync(join(run, `${d}.vty`)); i++) {
      if (p.child.exitCode !== null) throw new Error(`FRR ${d} in ${ns} exited: ${p.output().slice(-2000)}`);
      await new Promise((r) => setTimeout(r, 25));
    }
    if (!existsSync(join(run, `${d}.vty`))) throw new Error(`FRR ${d} in ${ns} did not start`);
    return p;
  };
  // zebra first: the others connect to it.
  for (const d of daemons) procs.push(await start(d));
  const vtysh = new Vtysh({ path: VTYSH, pathspace: ns });
  await vtysh.apply(config);
  return {
    pathspace: ns,
    vtysh,
    procs,
    restart: async (d) => {
      const i = daemons.indexOf(d);
      if (i < 0) throw new Error(`FRR ${d} does not run in ${ns}`);
      await procs[i]!.stop(2000);
      rmSync(join(run, `${d}.vty`), { force: true });
      procs[i] = await start(d);
    },
    stop: async () => {
      await Promise.all(procs.map((p) => p.stop(2000)));
      for (const d of [etc, run]) rmSync(d, { recursive: true, force: true });
    },
  };
}
