// The datapath's per-CPU counters: forwarded traffic by path (ferry_stats) and drops by
// reason (ferry_drops), summed over the CPUs; and, for tests, set back to zero.
import { DropReason, Stat, type DatapathMaps } from './layouts.js';
import type { MapReader } from './pinned-view.js';

type Counter = { packets: bigint; bytes: bigint };
type CounterMaps = { ferry_stats: MapReader<number, Counter>; ferry_drops: MapReader<number, Counter> };

/** Packets and bytes a counter has seen, by its C name (STAT_… or DROP_…). */
export function counterTotal(maps: CounterMaps, name: string): Counter {
  const stat = (Stat as Record<string, number>)[name];
  const drop = (DropReason as Record<string, number>)[name];
  if (stat === undefined && drop === undefined) throw new Error(`no counter ${name}`);
  const perCpu = (stat !== undefined ? maps.ferry_stats.lookupPerCpu(stat) : maps.ferry_drops.lookupPerCpu(drop!)) ?? [];
  return perCpu.reduce((a, v) => ({ packets: a.packets + v.packets, bytes: a.bytes + v.bytes }), { packets: 0n, bytes: 0n });
}

/** Every counter back to zero (tests that count one packet's effect). */
export function resetCounters(maps: Pick<DatapathMaps, 'ferry_stats' | 'ferry_drops'>): void {
  const zero = { packets: 0n, bytes: 0n };
  for (let i = 0; i < maps.ferry_stats.maxEntries; i++) maps.ferry_stats.update(i, zero);
  for (let i = 0; i < maps.ferry_drops.maxEntries; i++) maps.ferry_drops.update(i, zero);
}
