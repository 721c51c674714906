// /metrics reads the datapath's counters and the map fill as last known, never a map walk;
// every drop reason has its series.
import { describe, expect, it } from 'vitest';
import { AgentMetrics, refreshDatapathGauges } from '../../src/agent/metrics.js';
import { DropReason, Stat } from '../../src/datapath/layouts.js';

const counters = (hits: Record<number, bigint>) => ({
  lookupPerCpu: (i: number) => [{ packets: hits[i] ?? 0n, bytes: 0n }, { packets: 0n, bytes: 0n }],
});
const noWalk = (maxEntries: number) => ({
  maxEntries,
  keys: () => { throw new Error('a scrape walked a map'); },
  entries: () => { throw new Error('a scrape walked a map'); },
});

describe('datapath metrics', () => {
  it('come from the counters and the last known fill, without walking a map', async () => {
    const m = new AgentMetrics();
    const maps = {
      ferry_stats: counters({ [Stat.STAT_NAT_EARLY_DROP]: 5n }),
      ferry_drops: counters({ [DropReason.DROP_DSR_INVALID]: 7n, [DropReason.DROP_ICMP_RATELIMIT]: 2n }),
      ct4: noWalk(131072),
      nat4: noWalk(131072),
      lb4_services: noWalk(262144),
    } as unknown as Parameters<typeof refreshDatapathGauges>[1];
    refreshDatapathGauges(m, maps, { ct4: 12, nat4: 10, lb4_services: 40 });
    const text = await m.registry.metrics();
    expect(text).toContain('ferry_datapath_drops_total{reason="dsr_invalid"} 7');
    expect(text).toContain('ferry_datapath_drops_total{reason="icmp_ratelimit"} 2');
    expect(text).toContain('ferry_datapath_drops_total{reason="ttl_exceeded"} 0');
    expect(text).toContain('ferry_datapath_packets_total{path="nat_early_drop"} 5');
    expect(text).toContain('ferry_map_entries{map="ct4"} 12');
    expect(text).toContain('ferry_map_capacity{map="ct4"} 131072');
  });
});
