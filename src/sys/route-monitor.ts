// The kernel's route, link and neighbour changes, as `ip -4 monitor label route neigh link`
// reports them, sorted into those that can make a next hop a flow keeps wrong and those that
// cannot. Any route or link change can. A neighbour only when its MAC changes or it fails:
// its reachability states (REACHABLE, STALE, DELAY, PROBE) come and go every few seconds for
// every neighbour and change nothing a kept hop holds; a deletion forgets a MAC but does not
// change it.
import { spawn, type ChildProcess } from 'node:child_process';
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

/** Does one line of `ip -4 monitor label route neigh link` make kept hops possibly stale? */
export function staleningLine(line: string, neighbours: NeighbourMacs): boolean {
  if (line.startsWith('[ROUTE]') || line.startsWith('[LINK]')) return true;
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
}

const MAX_RESTART_MS = 30_000;

/**
 * Runs `ip monitor` for as long as it is started, and again when it ends (with backoff).
 * Each start counts as a change: whatever changed while nothing watched is covered. An
 * agent killed outright leaves its `ip monitor` to end with the agent's container (the
 * DaemonSet shares no PID namespace with the host), or at its next write (SIGPIPE).
 */
export class RouteMonitor {
  private child: ChildProcess | undefined;
  private stopped = true;
  private restartTimer: NodeJS.Timeout | undefined;
  private nextRestartMs: number;
  private readonly neighbours = new NeighbourMacs();

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
    this.child?.kill();
    this.child = undefined;
  }

  private ipArgs(...args: string[]): string[] {
    return this.opts.netns ? ['-n', this.opts.netns, ...args] : args;
  }

  private async run(): Promise<void> {
    const startedAt = Date.now();
    const child = spawn('ip', this.ipArgs('-4', 'monitor', 'label', 'route', 'neigh', 'link'), { stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = child;
    let rest = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      const lines = (rest + chunk).split('\n');
      rest = lines.pop()!;
      for (const line of lines) if (staleningLine(line, this.neighbours)) this.changed('kernel reported a change');
    });
    let stderr = '';
    child.stderr!.setEncoding('utf8').on('data', (s: string) => (stderr = (stderr + s).slice(-500)));
    child.on('close', (code, signal) => {
      if (this.child === child) this.child = undefined;
      if (this.stopped) return;
      // A monitor that ran for a while starts again at once; one that keeps failing, slower each time.
      if (Date.now() - startedAt > MAX_RESTART_MS) this.nextRestartMs = this.opts.restartMs ?? 1000;
      this.opts.log.warn({ code, signal, stderr: stderr.trim(), retryMs: this.nextRestartMs }, 'ip monitor ended: kept next hops follow route changes within a second until it runs again');
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
    if (!spawned || this.stopped) return;
    // ip subscribes first thing; by the time a second ip has listed the neighbours, the
    // first one hears every change. Learn the neighbours as they are, then count the start
    // as a change.
    const shown = await exec('ip', this.ipArgs('-4', 'neigh', 'show'), { timeoutMs: 10_000 });
    for (const line of shown.stdout.split('\n')) if (line) this.neighbours.seed(line);
    this.changed('route monitor started');
  }

  private changed(cause: string): void {
    if (!this.stopped) this.opts.onChange(cause);
  }
}
