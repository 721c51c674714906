// The source addresses of the node's network namespaces (lb4_netns_sources and
// lb6_netns_sources, keyed by netns cookie): the socket hooks check
// loadBalancerSourceRanges by them, as connect() has no source address yet. The map holds
// exactly what the last sync was given.
import type { BpfMap } from '../ebpf/map.js';
import { ErrorCode, FerryError } from '../errors.js';

export interface NetnsSourcesSync {
  written: number;
  removed: number;
  /** Namespaces left out because the map is full. */
  full: number;
}

export class NetnsSources {
  private readonly written = new Map<bigint, string>();

  constructor(private readonly map: BpfMap<bigint, { address: string }>) {
    for (const [cookie, v] of map.entries()) this.written.set(cookie, v.address);
  }

  get size(): number {
    return this.written.size;
  }

  get capacity(): number {
    return this.map.maxEntries;
  }

  /** Make the map hold `want` (cookie → address): stale entries removed first, so that room is made before new ones go in. */
  sync(want: ReadonlyMap<bigint, string>): NetnsSourcesSync {
    const out: NetnsSourcesSync = { written: 0, removed: 0, full: 0 };
    for (const cookie of [...this.written.keys()]) {
      if (want.has(cookie)) continue;
      this.map.delete(cookie);
      this.written.delete(cookie);
      out.removed++;
    }
    for (const [cookie, address] of want) {
      if (this.written.get(cookie) === address) continue;
      try {
        this.map.update(cookie, { address });
      } catch (e) {
        if (e instanceof FerryError && e.code === ErrorCode.MapFull) {
          out.full++;
          continue;
        }
        throw e;
      }
      this.written.set(cookie, address);
      out.written++;
    }
    return out;
  }
}
