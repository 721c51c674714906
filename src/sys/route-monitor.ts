// The kernel's route, rule, link and neighbour changes of both families, as `ip monitor
// label route neigh link rule` reports them (IPv6's forwarded packets keep hops too), sorted into those that can make a next hop a flow keeps wrong and
// those that cannot. Any route, policy rule or link change can. A neighbour only when its
// MAC changes or it fails: its reachability states (REACHABLE, STALE, DELAY, PROBE) come and
// go every few seconds for every neighbour and change nothing a kept hop holds; a deletion
// forgets a MAC but does not change it.
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { exec } from './exec.js';

const NEIGH_LINE = /^(Deleted )?(\S+) dev (\S+)(?: lladdr (\S+))?/;

/** Each neighbour's MAC as last reported ('' when it failed or is unresolved). */
export class NeighbourMacs {
  private readonly macs = new Map<string, string>();

  /** At most this many neighbours are remembered; past it all are forgotten (each then counts as new once). */
  constructor(private readonly limit = 65536) {}

  get size(): number {
    return this.macs.size;
  }

  /** Learn a neighbour line (`ip neigh` format) without judging it. */
  seed(line: string): void {
    this.observe(line);
  }

  /** Does this neighbour line change a MAC a kept hop may hold? A line not understood may. */
  observe(line: string): boolean {
    const m = NEIGH_LINE.exec(line.trim());
    if (!m) return true;
    const [, deleted, address, device, lladdr] = m;
    const key = `${device} ${address}`;
    const known = this.macs.get(key);
    if (deleted) return false;
    const mac = lladdr?.toLowerCase() ?? '';
    if (known === mac) return false;
    if (known === undefined && this.macs.size >= this.limit) this.macs.clear();
    this.macs.set(key, mac);
    // Unresolved and never known with a MAC: no hop can hold one for it.
    return mac !== '' || (known !== undefined && known !== '');
  }
}

/** Does one line of `ip monitor label route neigh link rule` make kept hops possibly stale? */
export function staleningLine(line: string, neighbours: NeighbourMacs): boolean {
  if (line.startsWith('[ROUTE]') || line.startsWith('[LINK]') || line.startsWith('[RULE]')) return true;
  if (line.startsWith('[NEIGH]')) return neighbours.observe(line.slice('[NEIGH]'.length));
  return false; // a LINK message's continuation lines, other labels
}

export interface RouteMonitorOptions {
  /** Watch this network namespace's changes (`ip -n`); default: the agent's own. */
  netns?: string;
  /** The first wait before `ip monitor` is started again after it ended. */
  restartMs?: number;
  log: Logger;
  /** Called for each change that may make kept hops stale (a burst of lines: once per line). */
  onChange: (cause: string) => void;
  /** Called when `ip monitor` starts watching (true) or ends (false). */
  onWatching?: (watching: boolean) => void;
}

const MAX_RESTART_MS = 30_000;
/** The causes onChange is told that also may change whether routes depend on ports. */
export const MONITOR_STARTED = 'route monitor started';
export const RULE_CHANGED = 'policy rule changed';

/** What /status and `ferry status` show of the monitor. */
export interface RouteMonitorStatus {
  /** `ip monitor` runs: kept hops follow changes at once (else within a second). */
  watching: boolean;
  pid?: number;
  /** How often it was started (the first start included). */
  starts: number;
  /** How it last ended, when it did: exit code or signal, and its last words. */
  lastEnd?: { at: string; how: string; stderr: string };
  /** When it is started again, while it is not running. */
  retryAt?: string;
}

/** Is `cmd` an executable file in one of PATH's directories? */
function onPath(cmd: string): boolean {
  return (process.env.PATH ?? '').split(':').some((dir) => {
    try {
      accessSync(join(dir || '.', cmd), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

/**
 * Runs `ip monitor` for as long as it is started, and again when it ends (with backoff).
 * Each start counts as a change: whatever changed while nothing watched is covered. It runs
 * under `setpriv --pdeathsig KILL` (util-linux, in the image), so an agent killed outright
 * takes it along; without setpriv it ends with the agent's container or at its next write.
 */
export class RouteMonitor {
  private child: ChildProcess | undefined;
  private running = false;
  private stopped = true;
  private restartTimer: NodeJS.Timeout | undefined;
  private retryAt: number | undefined;
  private nextRestartMs: number;
  private starts = 0;
  private lastEnd: RouteMonitorStatus['lastEnd'];
  private readonly neighbours = new NeighbourMacs();
  private readonly withSetpriv = onPath('setpriv');

  constructor(private readonly opts: RouteMonitorOptions) {
    this.nextRestartMs = opts.restartMs ?? 1000;
  }

  /** Resolves once `ip monitor` runs and the neighbours are known (or it could not start). */
  start(): Promise<void> {
    this.stopped = false;
    return this.run();
  }

  stop(): void {
    this.stopped = true;
    if (this.restartTimer) clearTimeout(this.restartTimer);
    this.retryAt = undefined;
    this.child?.kill();
    this.child = undefined;
    this.setRunning(false);
  }

  private setRunning(running: boolean): void {
    if (running !== this.running) this.opts.onWatching?.(running);
    this.running = running;
  }

  status(): RouteMonitorStatus {
    return {
      watching: this.running,
      ...(this.running && this.child?.pid !== undefined ? { pid: this.child.pid } : {}),
      starts: this.starts,
      ...(this.lastEnd ? { lastEnd: this.lastEnd } : {}),
      ...(this.retryAt !== undefined ? { retryAt: new Date(this.retryAt).toISOString() } : {}),
    };
  }

  private ipArgs(...args: string[]): string[] {
    return this.opts.netns ? ['-n', this.opts.netns, ...args] : args;
  }

  private async run(): Promise<void> {
    const startedAt = Date.now();
    this.retryAt = undefined;
    this.starts++;
    const ipMonitor = ['ip', ...this.ipArgs('monitor', 'label', 'route', 'neigh', 'link', 'rule')];
    const [cmd, ...args] = this.withSetpriv ? ['setpriv', '--pdeathsig', 'KILL', '--', ...ipMonitor] : ipMonitor;
    const child = spawn(cmd!, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = child;
    let rest = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      const lines = (rest + chunk).split('\n');
      rest = lines.pop()!;
      for (const line of lines) if (staleningLine(line, this.neighbours)) this.changed(line.startsWith('[RULE]') ? RULE_CHANGED : `kernel reported: ${line.slice(0, 200)}`);
    });
    let stderr = '';
    child.stderr!.setEncoding('utf8').on('data', (s: string) => (stderr = (stderr + s).slice(-500)));
    child.on('close', (code, signal) => {
      if (this.child !== child) return;
      this.child = undefined;
      this.setRunning(false);
      if (this.stopped) return;
      this.lastEnd = { at: new Date().toISOString(), how: signal ? `killed by ${signal}` : `exit ${code}`, stderr: stderr.trim() };
      // A monitor that ran for a while starts again at once; one that keeps failing, slower each time.
      if (Date.now() - startedAt > MAX_RESTART_MS) this.nextRestartMs = this.opts.restartMs ?? 1000;
      this.opts.log.warn({ code, signal, stderr: stderr.trim(), retryMs: this.nextRestartMs }, 'ip monitor ended: kept next hops follow route changes within a second until it runs again');
      this.retryAt = Date.now() + this.nextRestartMs;
      this.restartTimer = setTimeout(() => void this.run(), this.nextRestartMs);
      this.restartTimer.unref();
      this.nextRestartMs = Math.min(this.nextRestartMs * 2, MAX_RESTART_MS);
    });
    const spawned = await new Promise<boolean>((resolve) => {
      child.once('spawn', () => resolve(true));
      child.once('error', (e) => {
        stderr = e.message;
        resolve(false);
      });
    });
    if (!spawned || this.stopped || this.child !== child) return;
    this.setRunning(true);
    // ip subscribes first thing; by the time a second ip has listed the neighbours, the
    // first one hears every change. Learn the neighbours as they are, then count the start
    // as a change.
    const shown = await exec('ip', this.ipArgs('neigh', 'show'), { timeoutMs: 10_000 });
    for (const line of shown.stdout.split('\n')) if (line) this.neighbours.seed(line);
    this.changed(MONITOR_STARTED);
  }

  private changed(cause: string): void {
    if (!this.stopped) this.opts.onChange(cause);
  }
}
