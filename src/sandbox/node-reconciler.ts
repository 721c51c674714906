// A Reconciler over a testbed node's maps, for tests and benchmarks: the sources they give,
// a silent log, no Events, and health that nothing serves.
import { pino } from 'pino';
import { ProxyHealth, ServiceHealthServers } from '../agent/health.js';
import { AgentMetrics } from '../agent/metrics.js';
import { Reconciler, type ReconcilerDeps } from '../agent/reconciler.js';
import type { DatapathNode } from './datapath-node.js';

/** `overrides` replace any dependency (another writer, sync periods, callbacks). */
export function nodeReconciler(node: DatapathNode, source: ReconcilerDeps['source'], overrides: Partial<ReconcilerDeps> = {}): Reconciler {
  const health = new ProxyHealth(60_000);
  return new Reconciler({
    source,
    writer: node.writer,
    maps: node.dp.maps,
    health,
    serviceHealth: new ServiceHealthServers(health, '127.0.0.1', () => {}),
    metrics: new AgentMetrics(),
    log: pino({ level: 'silent' }),
    minSyncPeriodMs: 0,
    syncPeriodMs: 60_000,
    extraNodeAddresses: [],
    nodeName: 'node-1',
    ...overrides,
  });
}
