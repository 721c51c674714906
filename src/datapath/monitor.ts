// Datapath events for `ferry monitor`: drops (with reason and 5-tuple, IPv4 or IPv6) and
// traces of translations from the ring buffer. The programs send them only while the switch in
// ferry_monitor asks and the monitor's lease (ferry_monitor_lease) holds; watching takes
// the lease, renews it, turns the switch on and, on the way out, both off again.
import { join } from 'node:path';
import { monotonicNs } from './ct-gc.js';
import { addressText, decodeEvent, endpointText, type FerryEvent } from './event-layout.js';
import { DropReason, EventType, Hook, MonitorFlags, Stat, protoName } from './layouts.js';
import { ErrorCode, FerryError, errnoError } from '../errors.js';
import { libbpf } from '../ebpf/libbpf.js';
import { RingBufferReader } from '../ebpf/ringbuf.js';
import { PinnedDatapath } from './pinned-view.js';

export type EventKind = 'drop' | 'trace';

/** One event in plain terms. */
export interface DatapathEvent {
  kind: EventKind;
  hook: 'ingress' | 'egress' | 'xdp';
  tsNs: number;
  tuple: string;
  /** drop: the reason; trace: the path taken (fwd_remote, reply_local…). */
  reason: string;
  /** trace: the packet as it left. */
  out?: string;
  /** The record's fields, addresses as text (`ferry monitor -o json`). */
  raw: EventFields;
}

/** A record with its addresses as text. */
export type EventFields = Omit<FerryEvent, 'saddr' | 'daddr' | 'outSaddr' | 'outDaddr'> & { saddr: string; daddr: string; outSaddr: string; outDaddr: string };

const nameOf = (names: Record<string, number>, v: number, prefix: string) => (Object.entries(names).find(([, x]) => x === v)?.[0] ?? String(v)).replace(prefix, '').toLowerCase();

export function describeEvent(e: FerryEvent): DatapathEvent {
  const kind: EventKind = e.type === EventType.EVENT_DROP ? 'drop' : 'trace';
  const text = (b: Buffer) => addressText(e.family, b);
  return {
    kind,
    hook: e.hook === Hook.HOOK_TC_EGRESS ? 'egress' : e.hook === Hook.HOOK_XDP ? 'xdp' : 'ingress',
    tsNs: Number(e.tsNs),
    tuple: `${endpointText(e.family, e.saddr, e.sport)} → ${endpointText(e.family, e.daddr, e.dport)}/${protoName(e.proto)}`,
    reason: kind === 'drop' ? nameOf(DropReason, e.reason, 'DROP_') : nameOf(Stat, e.reason, 'STAT_'),
    ...(kind === 'trace' ? { out: `${endpointText(e.family, e.outSaddr, e.outSport)} → ${endpointText(e.family, e.outDaddr, e.outDport)}` } : {}),
    raw: { ...e, saddr: text(e.saddr), daddr: text(e.daddr), outSaddr: text(e.outSaddr), outDaddr: text(e.outDaddr) },
  };
}

export interface WatchOptions {
  pinDir: string;
  kinds: EventKind[];
  /** Stop after this many events (0: until the signal). */
  count: number;
  onEvent: (e: DatapathEvent) => void;
}

/** A monitor's lease lasts this long unrenewed (a killed monitor's events stop within it);
 * it is renewed every MONITOR_RENEW_MS. */
export const MONITOR_LEASE_MS = 5000;
export const MONITOR_RENEW_MS = 1000;

/** Turn events on, hand each to onEvent until the signal (or `count`), turn them off. */
export async function watchEvents(o: WatchOptions, signal: AbortSignal): Promise<number> {
  const flags = (o.kinds.includes('drop') ? MonitorFlags.MONITOR_DROPS : 0) | (o.kinds.includes('trace') ? MonitorFlags.MONITOR_TRACES : 0);
  const dp = PinnedDatapath.open(o.pinDir);
  try {
    const path = join(o.pinDir, 'ferry_events');
    const fd = libbpf().objGet(path);
    if (fd < 0) throw errnoError(`open ${path}`, fd, ErrorCode.MapOp, 'is the agent running, or has it ever run on this node?');
    let seen = 0;
    const reader = new RingBufferReader('ferry_events', fd, (data) => {
      if (o.count > 0 && seen >= o.count) return;
      seen++;
      o.onEvent(describeEvent(decodeEvent(data)));
    });
    const monitor = dp.writable('ferry_monitor');
    // A datapath from before the lease (an agent older than this CLI) has no such map: its
    // switch alone decides, as it did then.
    const lease = dp.pinned().includes('ferry_monitor_lease') ? dp.writable('ferry_monitor_lease') : undefined;
    const held = lease?.lookup(0);
    if (held && held.owner !== process.pid && held.untilNs > monotonicNs() && (monitor.lookup(0)?.flags ?? 0) !== 0) {
      reader.close();
      throw new FerryError({ code: ErrorCode.Busy, op: 'ferry monitor', cause: `another monitor (pid ${held.owner}) is reading the events`, hint: `one at a time: two would each get some of them; stop it, or wait ${MONITOR_LEASE_MS / 1000} s if it was killed` });
    }
    const renew = (ms: number) => lease?.update(0, { untilNs: ms ? monotonicNs() + BigInt(ms) * 1_000_000n : 0n, owner: ms ? process.pid : 0 });
    try {
      renew(MONITOR_LEASE_MS);
      monitor.update(0, { flags });
      let renewed = Date.now();
      while (!signal.aborted && (o.count === 0 || seen < o.count)) {
        reader.poll(100);
        if (Date.now() - renewed >= MONITOR_RENEW_MS) {
          renew(MONITOR_LEASE_MS);
          renewed = Date.now();
        }
        await new Promise((r) => setImmediate(r));
      }
    } finally {
      // Off, unless another monitor took over meanwhile (both started at once).
      if (!lease || lease.lookup(0)?.owner === process.pid) {
        monitor.update(0, { flags: 0 });
        renew(0);
      }
      reader.close();
    }
    return seen;
  } finally {
    dp.close();
  }
}
