// The kernel's route changes reach the datapath: a reported route, link or neighbour change
// makes every kept next hop stale (HopEpoch), so flows route again by their next packet.
import type { Logger } from 'pino';
import { HopEpoch } from '../datapath/hop-epoch.js';
import type { DatapathMaps } from '../datapath/layouts.js';
import { RouteMonitor } from '../sys/route-monitor.js';
import type { AgentMetrics } from './metrics.js';

export function watchRouteChanges(
  maps: Pick<DatapathMaps, 'ferry_hop_epoch'>,
  log: Logger,
  opts: { metrics?: Pick<AgentMetrics, 'routeChanges'>; netns?: string } = {},
): RouteMonitor {
  const epoch = new HopEpoch(maps.ferry_hop_epoch);
  const monitor = new RouteMonitor({
    log,
    ...(opts.netns ? { netns: opts.netns } : {}),
    onChange: (cause) => {
      try {
        epoch.invalidate();
        opts.metrics?.routeChanges.inc();
        log.debug({ cause }, 'routes changed: kept next hops dropped');
      } catch (e) {
        log.warn({ err: (e as Error).message }, 'cannot mark kept next hops stale: flows follow the change within a second');
      }
    },
  });
  void monitor.start();
  return monitor;
}
