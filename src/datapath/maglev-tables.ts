// Maglev lookup tables in the datapath: one inner array map per Service port (its frontends
// share it), built from the backends' addresses so every node builds the same table, and
// swapped into lb4_maglev atomically when the backend set changes.
import { u32Codec } from '../ebpf/codec.js';
import { BPF_F_INNER_MAP, MapType, createMap } from '../ebpf/map.js';
import { IdAllocator } from './ids.js';
import { maglevTable } from './maglev.js';
import type { ServiceMaps } from './writer.js';

/** A table to build: its id and the backends in the order the table indexes them. */
export interface MaglevBuild {
  id: number;
  backendIds: number[];
  /** `address:port/proto` of each backend, what the table positions hash. */
  backendNames: string[];
  signature: string;
}

export class MaglevTables {
  private readonly ids: IdAllocator;
  /** Built tables by owner (a Service port): their id and the backend ids they hold. */
  private readonly built = new Map<string, { id: number; signature: string }>();

  constructor(
    private readonly map: ServiceMaps['lb4_maglev'],
    readonly size: number,
  ) {
    this.ids = new IdAllocator('Maglev table', map.maxEntries, 'mapSizes.maglevTables');
    // Tables a previous writer built: their frontends claim them again on the first sync.
    for (const id of map.keys()) this.ids.restoreUnclaimed(id);
  }

  /**
   * The table id for `owner`'s backends (0: Maglev off, or no backend); a table to build
   * goes into `builds`. `restoredId` is the table the frontend's master entry names now.
   */
  plan(owner: string, restoredId: number, backendIds: number[], names: () => string[], builds: Map<string, MaglevBuild>): number {
    if (!this.size || backendIds.length === 0) return 0;
    const signature = backendIds.join(',');
    const pending = builds.get(owner);
    if (pending?.signature === signature) return pending.id;
    const have = this.built.get(owner);
    if (!pending && have?.signature === signature) return have.id;
    const id = pending?.id ?? have?.id ?? this.ids.claimOrAllocate(owner, restoredId || undefined);
    builds.set(owner, { id, backendIds, backendNames: names(), signature });
    return id;
  }

  /** Table ids still free. */
  free(): number {
    return this.ids.free();
  }

  /** Build the table and swap it in. */
  build(owner: string, b: MaglevBuild): void {
    const order = maglevTable(b.backendNames, this.size);
    const inner = createMap({ type: MapType.Array, name: 'lb4_maglev_in', key: u32Codec, value: u32Codec, maxEntries: this.size, flags: BPF_F_INNER_MAP });
    try {
      inner.updateBatch(Array.from(order, (i, pos) => [pos, b.backendIds[i]!] as [number, number]));
      this.map.update(b.id, inner.fd);
    } finally {
      inner.close(); // the outer map holds it now
    }
    this.built.set(owner, { id: b.id, signature: b.signature });
  }

  /** Remove the tables no frontend names any more. Returns how many. */
  collect(used: ReadonlySet<number>): number {
    let n = 0;
    for (const [owner, t] of [...this.built]) {
      if (used.has(t.id)) continue;
      this.map.delete(t.id);
      this.built.delete(owner);
      this.ids.release(owner);
      n++;
    }
    for (const id of this.ids.unclaimed()) {
      if (used.has(id)) continue;
      this.map.delete(id);
      this.ids.releaseUnclaimed(id);
      n++;
    }
    return n;
  }
}
