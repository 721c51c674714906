// Every IPv4 route change a host's kernel makes, as `ip monitor` reports it, whoever made
// it: the sandbox's own LoadBalancer routes, or FRR's zebra installing what BGP learned.
// What a failed reliability run is read by: a request that failed when the router had no
// route to a LoadBalancer IP shows up right after its removal.
import type { Host, Proc } from './netns/testbed.js';

/** The parsed changes kept (the process's raw output is kept too, a line or two per change). */
const KEPT = 200;

export interface RouteChange {
  /** Epoch ms. */
  at: number;
  step: string;
}

export class RouteLog {
  private readonly kept: RouteChange[] = [];
  private pending = '';
  /** The message being read is one not kept (its continuation lines go with it). */
  private skipping = false;

  private constructor(
    private readonly host: Host,
    private readonly proc: Proc,
  ) {
    proc.child.stdout?.on('data', (d: Buffer) => this.take(d.toString()));
  }

  /** Start watching `host`'s IPv4 routes (local, broadcast and multicast routes, its own addresses', are left out). */
  static start(host: Host): RouteLog {
    return new RouteLog(host, host.spawn(['ip', '-4', '-ts', 'monitor', 'route']));
  }

  /** The changes so far, oldest first. */
  changes(): RouteChange[] {
    return [...this.kept];
  }

  stop(): Promise<void> {
    return this.proc.stop(1000);
  }

  /** One message per line that starts with a timestamp; a multipath route continues on indented lines. */
  private take(text: string): void {
    this.pending += text;
    const lines = this.pending.split('\n');
    this.pending = lines.pop() ?? '';
    for (const line of lines) {
      const m = /^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,3})?)\d*\] (.*)$/.exec(line);
      if (m) {
        this.skipping = /^(Deleted )?(local|broadcast|multicast) /.test(m[2]!);
        if (this.skipping) continue;
        // ip prints local time without a zone, which Date.parse reads as local time too.
        this.kept.push({ at: Date.parse(m[1]!), step: `${this.host.name}: route ${m[2]!.trim()}` });
        if (this.kept.length > KEPT) this.kept.shift();
      } else if (/^\s+nexthop /.test(line) && !this.skipping && this.kept.length) {
        const last = this.kept.at(-1)!;
        last.step += ` ${line.trim()}`;
      }
    }
  }
}
