// loadBalancerSourceRanges of IPv6 LoadBalancer IPs in the datapath (lb6_src_ranges, an
// LPM trie): one entry per (frontend, CIDR), keyed by the frontend itself (its address,
// port and protocol: the first 160 bits, always matched whole) and the CIDR. The IPv6
// writer (service6-writer.ts) decides which entries each Service needs; this table counts
// who needs each entry and what the map holds.
import { isIPv6 } from 'node:net';
import type { BpfMap } from '../ebpf/map.js';
import { ipv6Masked, ipv6Text } from '../packet/addr.js';
import { Lb6SrcRangeBits, type Lb6SrcRangeKey } from './layouts6.js';

/** The frontend's part of the key, in bits (BTF-checked against shared/lb6.h). */
const FRONTEND_BITS = Lb6SrcRangeBits.LB6_SRC_RANGE_FRONTEND_BITS;

export type Lb6SrcRanges = BpfMap<Lb6SrcRangeKey, number>;

/** `address|port|proto`: the frontend a range belongs to (address in its canonical text). */
export const rangeFrontend = (address: string, port: number, proto: number): string => `${address}|${port}|${proto}`;

/** The entry id of one CIDR of a frontend, or undefined when it is no IPv6 CIDR. */
export function rangeId(frontend: string, cidr: string): string | undefined {
  const [net, bits = '128', extra] = cidr.split('/');
  const n = Number(bits);
  if (extra !== undefined || !/^\d{1,3}$/.test(bits) || n > 128 || !isIPv6(net ?? '') || net!.includes('%')) return undefined;
  return `${frontend}|${n}|${ipv6Text(ipv6Masked(net!, n))}`;
}

/** The frontend (`address|port|proto`) of a range's id, or of an lb6_services key id. */
export const frontendOfId = (id: string): string => id.split('|').slice(0, 3).join('|');

/** The key that asks whether `source` may use a frontend: the whole frontend and the whole source. */
export const sourceLookupKey = (address: string, port: number, proto: number, source: string): Lb6SrcRangeKey => ({ prefixlen: FRONTEND_BITS + 128, frontend: address, port, proto, source });

const keyOf = (id: string): Lb6SrcRangeKey => {
  const [frontend, port, proto, bits, source] = id.split('|');
  return { prefixlen: FRONTEND_BITS + Number(bits), frontend: frontend!, port: Number(port), proto: Number(proto), source: source! };
};

const idOfKey = (k: Lb6SrcRangeKey): string => `${rangeFrontend(k.frontend, k.port, k.proto)}|${k.prefixlen - FRONTEND_BITS}|${k.source}`;

export class Range6Table {
  /** What the map holds. */
  private held = new Set<string>();
  private readonly byService = new Map<string, Set<string>>();
  private readonly refs = new Map<string, number>();

  constructor(private readonly map: Lb6SrcRanges) {
    this.restore();
  }

  restore(): void {
    this.held = new Set([...this.map.keys()].map(idOfKey));
  }

  get capacity(): number {
    return this.map.maxEntries;
  }

  get size(): number {
    return this.held.size;
  }

  /** Is the entry needed by some Service? */
  live(id: string): boolean {
    return (this.refs.get(id) ?? 0) > 0;
  }

  holds(id: string): boolean {
    return this.held.has(id);
  }

  /** What the map holds of these frontends (`address|port|proto`): a Service that keeps what it had. */
  heldFor(frontends: ReadonlySet<string>): Set<string> {
    return new Set([...this.held].filter((id) => frontends.has(frontendOfId(id))));
  }

  /** The Service needs exactly `ids` now (none: it goes). An entry nobody needs leaves `refs`. */
  take(name: string, ids: ReadonlySet<string> | undefined): void {
    for (const id of this.byService.get(name) ?? []) {
      const n = this.refs.get(id)! - 1;
      if (n > 0) this.refs.set(id, n);
      else this.refs.delete(id);
    }
    if (ids && ids.size > 0) this.byService.set(name, new Set(ids));
    else this.byService.delete(name);
    for (const id of ids ?? []) this.refs.set(id, (this.refs.get(id) ?? 0) + 1);
  }

  /** Held entries no Service needs whose frontend `stays` does not say stays: they may go first. */
  orphaned(stays: (frontend: string) => boolean): string[] {
    return [...this.held].filter((id) => !this.live(id) && !stays(frontendOfId(id)));
  }

  /** Entries needed and not held: written before the masters that turn their check on. */
  missing(): string[] {
    return [...this.refs.keys()].filter((id) => !this.held.has(id));
  }

  /** Held entries no Service needs: removed after the masters that stop using them. */
  stale(): string[] {
    return [...this.held].filter((id) => !this.live(id));
  }

  write(ids: readonly string[]): void {
    for (const id of ids) {
      this.map.update(keyOf(id), 1);
      this.held.add(id);
    }
  }

  remove(ids: readonly string[]): void {
    for (const id of ids) {
      this.map.delete(keyOf(id));
      this.held.delete(id);
    }
  }
}
