// The kernel's route changes reach the datapath: a reported route, link or neighbour change
// makes every kept next hop stale (HopEpoch), so flows route again by their next packet.
import type { Logger } from 'pino';
import { systemClock, type Clock, type Timer } from '../clock.js';
import type { HopEpoch } from '../datapath/hop-epoch.js';
import { MONITOR_STARTED, RULE_CHANGED, RouteMonitor, type RouteMonitorStatus } from '../sys/route-monitor.js';
import { readRoutingPolicy, type RoutingPolicy } from '../sys/routing-policy.js';
import type { AgentMetrics } from './metrics.js';

/**
 * Changes reported at most once per `minGapMs`: the first at once (on a later turn, so a
 * burst of lines counts once), the rest of a burst when the gap has passed. A report reads
 * the time when it fires, after every change it covers. Why a gap: for a tick after each
 * report the datapath's coarse clock is behind the time written, and every packet of every
 * flow routes again in that tick; under route churn (a full BGP table) unthrottled reports
 * would keep flows there.
 */
export class ChangeThrottle {
  private timer: Timer | undefined;
  private lastAt = -Infinity;

  constructor(
    private readonly minGapMs: number,
    private readonly report: (cause: string) => void,
    private readonly clock: Clock = systemClock,
  ) {}

  note(cause: string): void {
    if (this.timer) return;
    // Bounded by the gap: a wall clock set back must not hold reports back.
    const wait = Math.min(this.minGapMs, Math.max(0, this.lastAt + this.minGapMs - this.clock.now()));
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      this.lastAt = this.clock.now();
      this.report(cause);
    }, wait);
    this.timer.unref?.();
  }

  cancel(): void {
    if (this.timer) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/** What `ferry status` shows: the monitor, and the changes written into ferry_hop_epoch. */
export interface RouteChangesStatus extends RouteMonitorStatus {
  written: number;
  lastWritten?: string;
  /** The last write that failed (kept hops then follow within a second). */
  writeError?: string;
  /** Whether routes depend on ports (new flows then look their own route up), and why. */
  routing?: RoutingPolicy;
}

export interface RouteChangesWatch {
  stop(): void;
  status(): RouteChangesStatus;
}

/**
 * Route changes, written at most once per `minGapMs`; whether routes depend on a flow's
 * ports, read again when the monitor starts, when a policy rule changes and every
 * `policyRecheckMs` (the multipath sysctls change without a message). stop() ends the
 * monitor and any write still due.
 */
export function watchRouteChanges(
  epoch: HopEpoch,
  log: Logger,
  opts: { metrics?: Pick<AgentMetrics, 'routeChanges' | 'routeMonitorUp'>; netns?: string; minGapMs?: number; policyRecheckMs?: number } = {},
): RouteChangesWatch {
  let written = 0;
  let lastWritten: string | undefined;
  let writeError: string | undefined;
  let policy: RoutingPolicy | undefined;
  let stopped = false;
  const wrote = (what: () => void, failure: string) => {
    try {
      what();
      written++;
      lastWritten = new Date().toISOString();
      writeError = undefined;
      opts.metrics?.routeChanges.inc();
    } catch (e) {
      writeError = (e as Error).message;
      log.warn({ err: writeError }, failure);
    }
  };
  const throttle = new ChangeThrottle(opts.minGapMs ?? 50, (cause) => {
    wrote(() => epoch.invalidate(), 'cannot mark kept next hops stale: flows follow the change within a second');
    log.debug({ cause }, 'routes changed: kept next hops dropped');
  });
  // One read at a time; a change while one runs reads again after it.
  let reading: Promise<void> | undefined;
  let readAgain = false;
  const readPolicy = (): void => {
    if (reading) {
      readAgain = true;
      return;
    }
    reading = readRoutingPolicy(opts.netns)
      .then((p) => {
        if (stopped) return;
        const changed = p.perFlow !== policy?.perFlow;
        policy = p;
        if (changed) {
          wrote(() => epoch.setPerFlow(p.perFlow), 'cannot tell the datapath whether routes depend on ports');
          log.info({ perFlow: p.perFlow, why: p.why }, p.perFlow ? 'routes depend on ports: new flows look their own route up' : 'routes depend on addresses only: new flows share their backend\'s hop');
        }
      })
      .catch((e: Error) => log.warn({ err: e.message }, 'cannot read the policy rules: whether routes depend on ports is as last known'))
      .finally(() => {
        reading = undefined;
        if (readAgain && !stopped) {
          readAgain = false;
          readPolicy();
        }
      });
  };
  const monitor = new RouteMonitor({
    log,
    ...(opts.netns ? { netns: opts.netns } : {}),
    onChange: (cause) => {
      if (cause === MONITOR_STARTED || cause === RULE_CHANGED) readPolicy();
      throttle.note(cause);
    },
    onWatching: (up) => opts.metrics?.routeMonitorUp.set(up ? 1 : 0),
  });
  void monitor.start();
  const recheck = setInterval(readPolicy, opts.policyRecheckMs ?? 60_000);
  recheck.unref();
  return {
    stop: () => {
      stopped = true;
      clearInterval(recheck);
      monitor.stop();
      throttle.cancel();
    },
    status: () => ({
      ...monitor.status(),
      written,
      ...(lastWritten ? { lastWritten } : {}),
      ...(writeError ? { writeError } : {}),
      ...(policy ? { routing: policy } : {}),
    }),
  };
}
