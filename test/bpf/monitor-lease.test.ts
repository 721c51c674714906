// ferry monitor's events flow only while the monitor's lease holds (ferry_monitor_lease):
// a monitor killed before it could turn the switch off leaves events on for seconds, not
// for good; and a second monitor is refused while another's lease holds.
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { monotonicNs } from '../../src/datapath/ct-gc.js';
import { MonitorFlags } from '../../src/datapath/layouts.js';
import { MONITOR_LEASE_MS, MONITOR_RENEW_MS, watchEvents } from '../../src/datapath/monitor.js';
import { libbpf } from '../../src/ebpf/libbpf.js';
import { RingBufferReader } from '../../src/ebpf/ringbuf.js';
import { FerryError } from '../../src/errors.js';
import { datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { TC_SERVICES, fixture } from '../../src/sandbox/fixtures/tc.js';
import { describeWith } from '../harness/requirements.js';

const MS = 1_000_000n;
let n: DatapathNode;
let reader: RingBufferReader;
let events = 0;

beforeAll(async () => {
  n = await datapathNode();
  n.writer.apply(TC_SERVICES);
  reader = new RingBufferReader('ferry_events', libbpf().objGet(join(n.pinDir, 'ferry_events')), () => events++);
});
afterAll(async () => {
  reader?.close();
  await n?.close();
});

/** Events sent for one dropped packet (a Service address on an unknown port) with this switch and lease. */
function eventsFor(flags: number, lease: { untilNs: bigint; owner: number }): number {
  n.dp.maps.ferry_monitor_lease.update(0, lease);
  n.dp.maps.ferry_monitor.update(0, { flags });
  reader.poll(0);
  events = 0;
  n.run('tc_ingress', fixture('unknown-port').input);
  reader.poll(0);
  return events;
}

describeWith(['root', 'bpffs', 'netns'], 'monitor lease', () => {
  it('events only while the switch is on and the lease holds', () => {
    const now = monotonicNs();
    expect(eventsFor(MonitorFlags.MONITOR_DROPS, { untilNs: now + 5000n * MS, owner: 42 })).toBe(1);
    expect(eventsFor(MonitorFlags.MONITOR_DROPS, { untilNs: now - 10n * MS, owner: 42 })).toBe(0); // lapsed: its monitor died
    expect(eventsFor(MonitorFlags.MONITOR_DROPS, { untilNs: 0n, owner: 0 })).toBe(0); // never taken
    expect(eventsFor(0, { untilNs: now + 5000n * MS, owner: 42 })).toBe(0); // switch off
  });

  it("a monitor is refused while another's lease holds, runs once it has lapsed, renews its own and gives it up", async () => {
    const maps = n.dp.maps;
    const run = (ms: number, onRunning?: () => void) => {
      const stop = new AbortController();
      setTimeout(() => {
        onRunning?.();
        stop.abort();
      }, ms);
      return watchEvents({ pinDir: n.pinDir, kinds: ['drop', 'trace'], count: 0, onEvent: () => {} }, stop.signal);
    };
    maps.ferry_monitor.update(0, { flags: MonitorFlags.MONITOR_DROPS });
    maps.ferry_monitor_lease.update(0, { untilNs: monotonicNs() + 5000n * MS, owner: 1 });
    const refused = await run(10).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(FerryError);
    expect((refused as FerryError).code).toBe('FERRY_BUSY');
    expect((refused as Error).message).toMatch(/another monitor \(pid 1\) is reading the events/);
    expect(maps.ferry_monitor.lookup(0)?.flags).toBe(MonitorFlags.MONITOR_DROPS); // the other's switch untouched

    // The other monitor was killed: its lease lapsed with the switch still on.
    maps.ferry_monitor_lease.update(0, { untilNs: monotonicNs() - 1n * MS, owner: 1 });
    let first: bigint | undefined;
    let later: bigint | undefined;
    let flagsWhileRunning: number | undefined;
    let ownerWhileRunning: number | undefined;
    setTimeout(() => (first = maps.ferry_monitor_lease.lookup(0)?.untilNs), 50);
    await run(MONITOR_RENEW_MS + 600, () => {
      later = maps.ferry_monitor_lease.lookup(0)?.untilNs;
      flagsWhileRunning = maps.ferry_monitor.lookup(0)?.flags;
      ownerWhileRunning = maps.ferry_monitor_lease.lookup(0)?.owner;
    });
    expect(ownerWhileRunning).toBe(process.pid);
    expect(flagsWhileRunning).toBe(MonitorFlags.MONITOR_DROPS | MonitorFlags.MONITOR_TRACES);
    expect(first! - monotonicNs()).toBeLessThanOrEqual(BigInt(MONITOR_LEASE_MS) * MS);
    expect(later! > first!).toBe(true); // renewed while it read
    // Given up on the way out: switch off, lease cleared.
    expect(maps.ferry_monitor.lookup(0)?.flags).toBe(0);
    expect(maps.ferry_monitor_lease.lookup(0)).toEqual({ untilNs: 0n, owner: 0 });
  });
});
