// FRR through vtysh: configuration applied from a file (merged into the running
// configuration: no restart, no reload script), and `show` commands, text or JSON. With a
// pathspace (vtysh -N), one of several FRR instances on the machine (the sandbox runs one
// per node namespace).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ErrorCode, FerryError } from '../errors.js';
import { exec } from './exec.js';

export interface VtyshOptions {
  /** The vtysh binary. */
  path: string;
  /** FRR's pathspace (-N): '' for the default instance. */
  pathspace: string;
  timeoutMs?: number;
}

export class Vtysh {
  constructor(private readonly o: VtyshOptions) {}

  private args(): string[] {
    return this.o.pathspace ? ['-N', this.o.pathspace] : [];
  }

  /** Apply configuration commands (a vtysh -f file). The file may hold passwords: it is private and removed. */
  async apply(commands: string): Promise<void> {
    const dir = mkdtempSync(join(tmpdir(), 'ferry-frr-'));
    const file = join(dir, 'apply.conf');
    try {
      writeFileSync(file, commands, { mode: 0o600 });
      const r = await exec(this.o.path, [...this.args(), '-f', file], { timeoutMs: this.o.timeoutMs ?? 30_000 });
      // vtysh goes on after a failing line and says so on stdout: any "%" line is an error.
      const errors = `${r.stdout}\n${r.stderr}`.split('\n').filter((l) => /^%|line \d+: %/.test(l.trim()));
      if (r.code !== 0 || errors.length) {
        throw new FerryError({ code: ErrorCode.Config, op: 'apply FRR configuration', cause: errors.join('; ') || r.stderr.trim() || `vtysh exited with ${r.code}`, hint: this.o.pathspace ? `vtysh -N ${this.o.pathspace} -c "show running-config"` : 'vtysh -c "show running-config"' });
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  async show(command: string): Promise<string> {
    const r = await exec(this.o.path, [...this.args(), '-c', command], { timeoutMs: this.o.timeoutMs ?? 30_000 });
    // vtysh says "bgpd is not running" also when it may not open the daemon's socket.
    if (r.code !== 0) throw new FerryError({ code: ErrorCode.Config, op: `vtysh -c "${command}"`, cause: (r.stderr || r.stdout).trim() || `exit ${r.code}`, hint: 'is FRR running beside the agent (bgpd, zebra, bfdd), and may the agent open its sockets in /var/run/frr (mode 0770, group frrvty: the DaemonSet\'s supplementalGroups)?' });
    return r.stdout;
  }

  async showJson<T>(command: string): Promise<T> {
    const text = await this.show(command);
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new FerryError({ code: ErrorCode.Config, op: `vtysh -c "${command}"`, cause: `not JSON: ${text.slice(0, 200)}` });
    }
  }
}
