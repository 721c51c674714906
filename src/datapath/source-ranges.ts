// loadBalancerSourceRanges in the datapath: one LPM-trie entry per (frontend, CIDR), keyed
// by the frontend's reverse-NAT id. New entries are written before the master entry that
// turns the check on; stale ones are removed after it is gone.
import { ipv4FromString, ipv4ToString } from '../ebpf/codec.js';
import type { Lb4SrcRangeKey } from './layouts.js';
import type { ServiceMaps } from './writer.js';

/** `10.0.0.0/8` → its LPM key for a frontend. */
export function sourceRangeKey(revNatId: number, cidr: string): Lb4SrcRangeKey {
  const [addr, bits = '32'] = cidr.split('/');
  const n = Number(bits);
  const ip = ipv4FromString(addr!);
  const mask = n === 0 ? 0 : (0xffffffff << (32 - n)) >>> 0;
  return { prefixlen: 32 + n, revNatId, source: ipv4ToString((ip & mask) >>> 0) };
}

const idOf = (k: Lb4SrcRangeKey) => `${k.revNatId}|${k.prefixlen}|${k.source}`;
const keyOf = (id: string): Lb4SrcRangeKey => {
  const [revNatId, prefixlen, source] = id.split('|');
  return { revNatId: Number(revNatId), prefixlen: Number(prefixlen), source: source! };
};

/** The entries a sync wants: collect them, then diff against what is written. */
export class SourceRangeSet {
  private readonly written = new Set<string>();

  constructor(private readonly map: ServiceMaps['lb4_src_ranges']) {
    for (const k of map.keys()) this.written.add(idOf(k));
  }

  /** The ids of a frontend's ranges. */
  static entries(revNatId: number, cidrs: readonly string[] | undefined): string[] {
    return (cidrs ?? []).map((c) => idOf(sourceRangeKey(revNatId, c)));
  }

  /** Entries written. */
  get size(): number {
    return this.written.size;
  }

  /** The entries written for one frontend. */
  writtenFor(revNatId: number): string[] {
    return [...this.written].filter((r) => r.startsWith(`${revNatId}|`));
  }

  added(want: ReadonlySet<string>): string[] {
    return [...want].filter((r) => !this.written.has(r));
  }

  stale(want: ReadonlySet<string>): string[] {
    return [...this.written].filter((r) => !want.has(r));
  }

  write(ids: readonly string[]): number {
    for (const r of ids) {
      this.map.update(keyOf(r), 1);
      this.written.add(r);
    }
    return ids.length;
  }

  remove(ids: readonly string[]): number {
    let n = 0;
    for (const r of ids) {
      if (this.map.delete(keyOf(r))) n++;
      this.written.delete(r);
    }
    return n;
  }
}
