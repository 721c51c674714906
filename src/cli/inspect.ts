// Reading the datapath from its pins, for the CLI: every map decoded into human terms,
// without the agent running. Only this file opens pinned maps for the CLI.
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { CtFlags, DropReason, Stat, mapSpecs, protoName, type MapName } from '../datapath/layouts.js';
import { clearConntrack, monotonicNs } from '../datapath/ct-gc.js';
import type { Codec } from '../ebpf/codec.js';
import { ErrorCode, FerryError } from '../ebpf/errors.js';
import { assertBpffs, openPinnedMap } from '../ebpf/pinned.js';
import type { DatapathMaps } from '../datapath/loader.js';

/** A pinned datapath map, typed by its spec and checked against its BTF. */
export function openMap<N extends MapName>(pinDir: string, name: N): DatapathMaps[N] {
  const spec = mapSpecs[name];
  return openPinnedMap(join(pinDir, name), spec.key as Codec<unknown>, spec.value as Codec<unknown>) as unknown as DatapathMaps[N];
}

export function withMap<N extends MapName, T>(pinDir: string, name: N, fn: (m: DatapathMaps[N]) => T): T {
  const m = openMap(pinDir, name);
  try {
    return fn(m);
  } finally {
    m.close();
  }
}

export interface MapRow {
  name: string;
  type: number;
  entries: number;
  capacity: number;
  known: boolean;
}

/** The pinned maps of a pin directory, with their fill. */
export function listMaps(pinDir: string): MapRow[] {
  assertBpffs(pinDir);
  if (!existsSync(pinDir)) {
    throw new FerryError({ code: ErrorCode.NotFound, op: `list maps in ${pinDir}`, cause: 'no such directory', hint: 'is the agent running on this node, or is its pin directory elsewhere (--pin-dir)?' });
  }
  const out: MapRow[] = [];
  for (const f of readdirSync(pinDir).sort()) {
    if (!(f in mapSpecs)) continue;
    withMap(pinDir, f as MapName, (m) => {
      const entries = m.perCpu ? m.info.maxEntries : [...m.keys()].length;
      out.push({ name: f, type: m.info.type, entries, capacity: m.info.maxEntries, known: true });
    });
  }
  return out;
}

const flagNames = (flags: number, names: Record<string, number>, prefix: string) =>
  Object.entries(names).filter(([, v]) => flags & v).map(([k]) => k.slice(prefix.length).toLowerCase()).join(',') || '-';

export function ageText(expiresNs: bigint, now = monotonicNs()): string {
  const s = Number(expiresNs - now) / 1e9;
  return s < 0 ? `expired ${(-s).toFixed(0)}s ago` : `${s.toFixed(0)}s`;
}

/** Human rows for any datapath map: what `ferry map dump` prints. */
export function dumpRows(pinDir: string, name: MapName): Array<Record<string, string | number>> {
  return withMap(pinDir, name, (m) => {
    if (m.perCpu) {
      const names = name === 'ferry_drops' ? DropReason : Stat;
      return m.entriesPerCpu().map(([k, perCpu]) => {
        const total = (perCpu as Array<{ packets: bigint; bytes: bigint }>).reduce((a, v) => ({ packets: a.packets + v.packets, bytes: a.bytes + v.bytes }), { packets: 0n, bytes: 0n });
        const label = Object.entries(names).find(([, v]) => v === k)?.[0] ?? String(k);
        return { key: label, packets: Number(total.packets), bytes: Number(total.bytes) };
      }).filter((r) => r.packets > 0 || !r.key.match(/^\d+$/));
    }
    return m.entries().map(([k, v]) => flatten(name, k as Record<string, unknown> | number, v as Record<string, unknown> | number));
  });
}

function flatten(name: MapName, k: Record<string, unknown> | number, v: Record<string, unknown> | number): Record<string, string | number> {
  const key = typeof k === 'number' ? { id: k } : k;
  const val = typeof v === 'number' ? { value: v } : v;
  const row: Record<string, string | number> = {};
  for (const [f, x] of [...Object.entries(key), ...Object.entries(val)]) {
    if (f === 'proto') row[f] = protoName(x as number);
    else if (f === 'expiresNs') row.expires = ageText(x as bigint);
    else if (typeof x === 'bigint') row[f] = Number(x);
    else row[f] = x as string | number;
  }
  if ((name === 'ct4' || name === 'nat4') && typeof row.flags === 'number') row.flags = flagNames(row.flags, CtFlags, 'CT_F_');
  return row;
}

export interface FlowRow {
  flow: string;
  backend: string;
  nat: string;
  flags: string;
  expires: string;
  packets: number;
  bytes: number;
}

/** Conntrack flows with their backend, decoded; filter by Service frontend or backend address. */
export function listFlows(pinDir: string, filter: { service?: string; backend?: string } = {}): FlowRow[] {
  const backends = withMap(pinDir, 'lb4_backends', (m) => new Map(m.entries() as Array<[number, { address: string; port: number }]>));
  return withMap(pinDir, 'ct4', (m) =>
    (m.entries() as Array<[{ saddr: string; daddr: string; sport: number; dport: number; proto: number }, { backendId: number; flags: number; natAddr: string; natPort: number; expiresNs: bigint; packets: bigint; bytes: bigint }]>)
      .map(([k, v]) => {
        const b = backends.get(v.backendId);
        return {
          flow: `${k.saddr}:${k.sport} → ${k.daddr}:${k.dport}/${protoName(k.proto)}`,
          frontend: `${k.daddr}:${k.dport}`,
          backend: b ? `${b.address}:${b.port}` : `(gone: ${v.backendId})`,
          nat: v.flags & CtFlags.CT_F_SNAT ? `${v.natAddr}:${v.natPort}` : '-',
          flags: flagNames(v.flags, CtFlags, 'CT_F_'),
          expires: ageText(v.expiresNs),
          packets: Number(v.packets),
          bytes: Number(v.bytes),
        };
      })
      .filter((r) => (!filter.service || r.frontend === filter.service || r.frontend.startsWith(`${filter.service}:`)) && (!filter.backend || r.backend === filter.backend || r.backend.startsWith(`${filter.backend}:`)))
      .map(({ frontend: _f, ...r }) => r),
  );
}

/** Delete every conntrack and NAT entry (what `ferry ct flush --yes` does), through the datapath layer. */
export function flushConntrack(pinDir: string): { ct: number; nat: number } {
  return withMap(pinDir, 'ct4', (ct4) => withMap(pinDir, 'nat4', (nat4) => clearConntrack({ ct4, nat4 })));
}
