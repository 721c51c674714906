// Routes changed: the next hops flows keep (ct4/nat4) and new flows share (lb4_backend_hops)
// that were looked up before now are not used again (ferry_hop_epoch). Each flow is then
// routed again by its next packet, instead of within the second a hop is otherwise kept.
// Where routes may depend on a flow's protocol and ports, new flows share no hop at all
// (FERRY_HOPS_PER_FLOW, the slot's lowest bit).
import { monotonicNs } from './ct-gc.js';
import { HopEpochFlags, type DatapathMaps } from './layouts.js';

const PER_FLOW = BigInt(HopEpochFlags.FERRY_HOPS_PER_FLOW);

/** The slot as written: the time of the last change, and the flag in its lowest bit. */
export function hopEpochParts(raw: bigint): { sinceNs: bigint; perFlow: boolean } {
  return { sinceNs: raw & ~PER_FLOW, perFlow: (raw & PER_FLOW) !== 0n };
}

export class HopEpoch {
  /** As this writer last set it: a slot an older build wrote (any time, odd or even) is not read back as a flag. */
  private writtenPerFlow = false;

  constructor(
    private readonly map: DatapathMaps['ferry_hop_epoch'],
    private readonly now: () => bigint = monotonicNs,
  ) {}

  /** Hops looked up before this moment are stale. Returns the moment written. */
  invalidate(): bigint {
    return this.write();
  }

  /** New flows share no hop (on) or may again (off); every kept hop is stale either way. */
  setPerFlow(on: boolean): bigint {
    this.writtenPerFlow = on;
    return this.write();
  }

  private write(): bigint {
    const sinceNs = (this.now() & ~PER_FLOW) | (this.writtenPerFlow ? PER_FLOW : 0n);
    this.map.update(0, { sinceNs });
    return sinceNs & ~PER_FLOW;
  }

  /** The last moment written (0: never). */
  get sinceNs(): bigint {
    return hopEpochParts(this.map.lookup(0)?.sinceNs ?? 0n).sinceNs;
  }

  /** Do new flows look their own route up rather than share their backend's? */
  get perFlow(): boolean {
    return hopEpochParts(this.map.lookup(0)?.sinceNs ?? 0n).perFlow;
  }
}
