// The kernel's route changes reach the datapath: a reported route, link or neighbour change
// makes every kept next hop stale (HopEpoch), so flows route again by their next packet.
import type { Logger } from 'pino';
import { systemClock, type Clock, type Timer } from '../clock.js';
import { HopEpoch } from '../datapath/hop-epoch.js';
import type { DatapathMaps } from '../datapath/layouts.js';
import { RouteMonitor, type RouteMonitorStatus } from '../sys/route-monitor.js';
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
}

export interface RouteChangesWatch {
  stop(): void;
  status(): RouteChangesStatus;
}

/** Route changes, written at most once per `minGapMs`; stop() ends the monitor and any write still due. */
export function watchRouteChanges(
  maps: Pick<DatapathMaps, 'ferry_hop_epoch'>,
  log: Logger,
  opts: { metrics?: Pick<AgentMetrics, 'routeChanges' | 'routeMonitorUp'>; netns?: string; minGapMs?: number } = {},
): RouteChangesWatch {
  const epoch = new HopEpoch(maps.ferry_hop_epoch);
  let written = 0;
  let lastWritten: string | undefined;
  let writeError: string | undefined;
  const throttle = new ChangeThrottle(opts.minGapMs ?? 50, (cause) => {
    try {
      epoch.invalidate();
      written++;
      lastWritten = new Date().toISOString();
      writeError = undefined;
      opts.metrics?.routeChanges.inc();
      log.debug({ cause }, 'routes changed: kept next hops dropped');
    } catch (e) {
      writeError = (e as Error).message;
      log.warn({ err: writeError }, 'cannot mark kept next hops stale: flows follow the change within a second');
    }
  });
  const monitor = new RouteMonitor({
    log,
    ...(opts.netns ? { netns: opts.netns } : {}),
    onChange: (cause) => throttle.note(cause),
    onWatching: (up) => opts.metrics?.routeMonitorUp.set(up ? 1 : 0),
  });
  void monitor.start();
  return {
    stop: () => {
      monitor.stop();
      throttle.cancel();
    },
    status: () => ({ ...monitor.status(), written, ...(lastWritten ? { lastWritten } : {}), ...(writeError ? { writeError } : {}) }),
  };
}
