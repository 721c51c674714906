// Routes changed: the next hops flows keep (ct4/nat4) and new flows share (lb4_backend_hops)
// that were looked up before now are not used again (ferry_hop_epoch). Each flow is then
// routed again by its next packet, instead of within the second a hop is otherwise kept.
import { monotonicNs } from './ct-gc.js';
import type { DatapathMaps } from './layouts.js';

export class HopEpoch {
  constructor(
    private readonly map: DatapathMaps['ferry_hop_epoch'],
    private readonly now: () => bigint = monotonicNs,
  ) {}

  /** Hops looked up before this moment are stale. Returns the moment written. */
  invalidate(): bigint {
    const sinceNs = this.now();
    this.map.update(0, { sinceNs });
    return sinceNs;
  }

  /** The last moment written (0: never). */
  get sinceNs(): bigint {
    return this.map.lookup(0)?.sinceNs ?? 0n;
  }
}
