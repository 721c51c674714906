// `ferry monitor`: live drops (with reason and 5-tuple) and traces of translations from
// the datapath's ring buffer, until Ctrl-C.
import { join } from 'node:path';
import { DropReason, EventType, Hook, MonitorFlags, Stat, eventCodec, protoName, type FerryEvent } from '../datapath/layouts.js';
import { ErrorCode, errnoError } from '../ebpf/errors.js';
import { libbpf } from '../ebpf/libbpf.js';
import { assertBpffs } from '../ebpf/pinned.js';
import { RingBufferReader } from '../ebpf/ringbuf.js';
import { withMap } from './inspect.js';

const nameOf = (names: Record<string, number>, v: number, prefix: string) => (Object.entries(names).find(([, x]) => x === v)?.[0] ?? String(v)).replace(prefix, '').toLowerCase();

export function formatEvent(e: FerryEvent): string {
  const hook = e.hook === Hook.HOOK_TC_EGRESS ? 'egress' : 'ingress';
  const tuple = `${e.saddr}:${e.sport} → ${e.daddr}:${e.dport}/${protoName(e.proto)}`;
  if (e.type === EventType.EVENT_DROP) return `drop   ${hook.padEnd(7)} ${tuple}  reason ${nameOf(DropReason, e.reason, 'DROP_')}`;
  return `trace  ${hook.padEnd(7)} ${tuple}  ${nameOf(Stat, e.reason, 'STAT_')} → ${e.outSaddr}:${e.outSport} → ${e.outDaddr}:${e.outDport}`;
}

export interface MonitorOptions {
  pinDir: string;
  types: Array<'drop' | 'trace'>;
  json: boolean;
  /** Stop after this many events (0: until interrupted). */
  count: number;
  write: (line: string) => void;
}

/** Run until interrupted (or `count` events); the monitor flags are cleared on the way out. */
export async function monitor(o: MonitorOptions, signal: AbortSignal): Promise<number> {
  assertBpffs(o.pinDir);
  const flags = (o.types.includes('drop') ? MonitorFlags.MONITOR_DROPS : 0) | (o.types.includes('trace') ? MonitorFlags.MONITOR_TRACES : 0);
  const fd = libbpf().objGet(join(o.pinDir, 'ferry_events'));
  if (fd < 0) throw errnoError(`open ${join(o.pinDir, 'ferry_events')}`, fd, ErrorCode.MapOp, 'is the agent running, or has it ever run on this node?');
  let seen = 0;
  const reader = new RingBufferReader('ferry_events', fd, (data) => {
    if (o.count > 0 && seen >= o.count) return;
    const e = eventCodec.decode(data);
    seen++;
    o.write(o.json ? JSON.stringify({ ...e, tsNs: Number(e.tsNs), type: e.type === EventType.EVENT_DROP ? 'drop' : 'trace' }) : formatEvent(e));
  });
  const setFlags = (f: number) => withMap(o.pinDir, 'ferry_monitor', (m) => m.update(0, { flags: f }));
  try {
    setFlags(flags);
    while (!signal.aborted && (o.count === 0 || seen < o.count)) {
      reader.poll(100);
      await new Promise((r) => setImmediate(r));
    }
  } finally {
    setFlags(0);
    reader.close();
  }
  return seen;
}
