// The reconciler's timing on a manual clock: changes within minSyncPeriod are coalesced
// into one sync, a failed sync is retried after SYNC_RETRY_MS, a sync runs every
// syncPeriod and one that reads the maps back every fullSyncPeriod. No wall-clock waits.
import type { V1Node, V1Service } from '@kubernetes/client-node';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { ProxyHealth, ServiceHealthServers } from '../../src/agent/health.js';
import { AgentMetrics } from '../../src/agent/metrics.js';
import { Reconciler, SYNC_RETRY_MS, type FrontendWriter, type ReconcilerDeps } from '../../src/agent/reconciler.js';
import type { ApplyStats } from '../../src/datapath/writer.js';
import type { FrontendSpec } from '../../src/model/frontend.js';
import { ManualClock } from '../harness/manual-clock.js';

const node: V1Node = { metadata: { name: 'node-1' }, status: { addresses: [{ type: 'InternalIP', address: '10.0.30.21' }] } };
const svc = (name: string, ip: string): V1Service => ({ metadata: { name, namespace: 'default' }, spec: { type: 'ClusterIP', clusterIP: ip, ports: [{ port: 80, protocol: 'TCP' }] } });
const noStats: ApplyStats = { frontendsWritten: 0, frontendsRemoved: 0, backendsWritten: 0, backendsRemoved: 0, entriesWritten: 0, entriesDeleted: 0, removedBackends: [], removedBackendIds: [], removedFrontends: [], failures: [] };

class RecordingWriter implements FrontendWriter {
  applied: FrontendSpec[][] = [];
  kinds: string[] = [];
  failNext = 0;
  apply(desired: FrontendSpec[], opts: { reread?: boolean } = {}): ApplyStats {
    this.applied.push(desired);
    this.kinds.push(opts.reread ? 'reread' : 'full');
    if (this.failNext > 0) {
      this.failNext--;
      throw new Error('map full');
    }
    return noStats;
  }
}

/** A writer that also takes changed Services alone, as the real one does. */
class IncrementalRecordingWriter extends RecordingWriter {
  /** Services that do not fit, until room is made. */
  full = new Set<string>();
  applyChanged(changes: ReadonlyMap<string, FrontendSpec[]>): ApplyStats {
    this.kinds.push(`changed:${[...changes.keys()].join(',')}`);
    return { ...noStats, failures: [...changes.keys()].filter((n) => this.full.has(n)).map((service) => ({ service, code: 'FERRY_MAP_FULL', error: 'needs 1 more backend ids, 0 left' })) };
  }
}

function setup(minSyncPeriodMs: number, syncPeriodMs = 3_600_000, o: { incremental?: boolean; fullSyncPeriodMs?: number; reclaimIds?: () => number } = {}) {
  const clock = new ManualClock();
  const writer = o.incremental ? new IncrementalRecordingWriter() : new RecordingWriter();
  let services: V1Service[] = [svc('a', '10.96.0.1')];
  const health = new ProxyHealth(60_000, clock);
  const r = new Reconciler({
    source: { services: () => services, service: (ns, n) => services.find((s) => s.metadata?.namespace === ns && s.metadata?.name === n), slices: () => [], node: () => node, nodes: () => [node] },
    writer,
    // No backend is ever removed here, so the stale-flow flush never touches the maps.
    maps: {} as ReconcilerDeps['maps'],
    health,
    serviceHealth: new ServiceHealthServers(health, '127.0.0.1', () => {}),
    metrics: new AgentMetrics(),
    log: pino({ level: 'silent' }),
    minSyncPeriodMs,
    syncPeriodMs,
    fullSyncPeriodMs: o.fullSyncPeriodMs,
    reclaimIds: o.reclaimIds,
    extraNodeAddresses: [],
    nodeName: 'node-1',
    clock,
  });
  return { clock, writer, r, set: (s: V1Service[]) => (services = s) };
}

describe('reconciler timing', () => {
  it('coalesces changes within minSyncPeriod into one sync', async () => {
    const { clock, writer, r, set } = setup(1000);
    await r.syncNow();
    expect(writer.applied).toHaveLength(1);
    const more = [svc('a', '10.96.0.1'), svc('b', '10.96.0.2'), svc('c', '10.96.0.3')];
    set(more);
    for (const s of more.slice(1)) r.serviceChanged(s);
    await clock.advance(999);
    expect(writer.applied).toHaveLength(1);
    await clock.advance(1);
    expect(writer.applied).toHaveLength(2);
    expect(writer.applied[1]!.map((f) => f.address).sort()).toEqual(['10.96.0.1', '10.96.0.2', '10.96.0.3']);
    await clock.advance(10_000);
    expect(writer.applied).toHaveLength(2);
    await r.stop();
  });

  it('does not sync on changes before the first sync is asked for (caches still listing)', async () => {
    const { clock, writer, r } = setup(0);
    r.serviceChanged(svc('a', '10.96.0.1'));
    await clock.advance(10_000);
    expect(writer.applied).toHaveLength(0);
    await r.syncNow();
    expect(writer.applied).toHaveLength(1);
    await r.stop();
  });

  it('retries a failed sync after SYNC_RETRY_MS, then goes quiet', async () => {
    const { clock, writer, r } = setup(0);
    writer.failNext = 1;
    await r.syncNow();
    expect(writer.applied).toHaveLength(1);
    await clock.advance(SYNC_RETRY_MS - 1);
    expect(writer.applied).toHaveLength(1);
    await clock.advance(1);
    expect(writer.applied).toHaveLength(2);
    await clock.advance(10 * SYNC_RETRY_MS);
    expect(writer.applied).toHaveLength(2);
    await r.stop();
  });

  it('runs a full sync every syncPeriod, and no timer is left after stop', async () => {
    const { clock, writer, r } = setup(0, 30_000);
    await r.syncNow();
    r.start();
    await clock.advance(29_999);
    expect(writer.applied).toHaveLength(1);
    await clock.advance(1);
    expect(writer.applied).toHaveLength(2);
    await clock.advance(30_000);
    expect(writer.applied).toHaveLength(3);
    await r.stop();
    expect(clock.waiting).toBe(0);
  });

  it('writes only the changed Services; reads the maps back at the start and every fullSyncPeriod', async () => {
    const { clock, writer, r, set } = setup(0, 30_000, { incremental: true, fullSyncPeriodMs: 120_000 });
    await r.syncNow();
    r.start();
    set([svc('a', '10.96.0.1'), svc('b', '10.96.0.2')]);
    r.serviceChanged(svc('b', '10.96.0.2'));
    await clock.advance(0);
    await clock.advance(30_000); // a periodic sync with nothing new
    await clock.advance(90_000); // the full one (and the periodic one at the same time)
    expect(writer.kinds[0]).toBe('reread');
    expect(writer.kinds[1]).toBe('changed:default/b');
    expect(writer.kinds.slice(2)).toContain('changed:');
    expect(writer.kinds.filter((k) => k === 'reread')).toHaveLength(2);
    await r.stop();
    expect(clock.waiting).toBe(0);
  });

  it('a Service that did not fit is tried again at once when ids are reclaimed, not at the next change', async () => {
    let reclaimable = 0;
    let reclaims = 0;
    const { clock, writer, r, set } = setup(0, 3_600_000, { incremental: true, reclaimIds: () => (reclaims++, reclaimable) });
    await r.syncNow();
    r.start();
    const w = writer as IncrementalRecordingWriter;
    w.full.add('default/b');
    set([svc('a', '10.96.0.1'), svc('b', '10.96.0.2')]);
    r.serviceChanged(svc('b', '10.96.0.2'));
    await clock.advance(0);
    expect(w.kinds.slice(1)).toEqual(['changed:default/b']);
    expect(reclaims).toBe(1);
    // Nothing to reclaim: no retry (a full map does not spin).
    await clock.advance(10 * SYNC_RETRY_MS);
    expect(w.kinds).toHaveLength(2);
    // A removal retired ids; the next sync's failure reclaims them and retries.
    reclaimable = 1;
    r.serviceChanged(svc('a', '10.96.0.1'));
    await clock.advance(0);
    w.full.clear();
    await clock.advance(SYNC_RETRY_MS);
    expect(w.kinds.slice(2)).toEqual(['changed:default/a,default/b', 'changed:default/b']);
    await r.stop();
  });
});
