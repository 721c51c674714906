// Routes changed: the next hops flows keep (ct4/nat4) and new flows share (lb4_backend_hops)
// that were looked up before now are not used again (ferry_hop_epoch). Each flow is then
// routed again by its next packet, instead of within the second a hop is otherwise kept.
// The slot's lowest bits are flags: where routes may depend on a flow's protocol and ports,
// new flows share no hop at all (FERRY_HOPS_PER_FLOW); while a device lends its address to
// the SNAT flows routed out of it (snat-devices.ts), a new SNAT flow's address follows its
// route (FERRY_SNAT_BY_DEVICE). One writer for the slot: each flag is kept by the one
// instance the datapath holds.
import { monotonicNs } from './ct-gc.js';
import { HopEpochFlags, type DatapathMaps } from './layouts.js';

const PER_FLOW = BigInt(HopEpochFlags.FERRY_HOPS_PER_FLOW);
const SNAT_BY_DEVICE = BigInt(HopEpochFlags.FERRY_SNAT_BY_DEVICE);
const FLAGS = BigInt(HopEpochFlags.FERRY_HOP_EPOCH_FLAGS);

/** The slot as written: the time of the last change, and the flags in its lowest bits. */
export function hopEpochParts(raw: bigint): { sinceNs: bigint; perFlow: boolean; snatByDevice: boolean } {
  return { sinceNs: raw & ~FLAGS, perFlow: (raw & PER_FLOW) !== 0n, snatByDevice: (raw & SNAT_BY_DEVICE) !== 0n };
}

export class HopEpoch {
  /**
   * As this writer last set them, from the flags the slot held when it began (a previous
   * agent's), so that an early write of one flag (the SNAT devices', at start) does not
   * clear the other before its owner has looked (routes that depend on ports would share
   * hops meanwhile). A slot an older build wrote as a bare time may read as flags: that
   * costs lookups (per-flow routes, a device lookup) until the flag is next written, never
   * a wrong hop or address.
   */
  private writtenPerFlow: boolean;
  private writtenSnatByDevice: boolean;

  constructor(
    private readonly map: DatapathMaps['ferry_hop_epoch'],
    private readonly now: () => bigint = monotonicNs,
  ) {
    const held = hopEpochParts(map.lookup(0)?.sinceNs ?? 0n);
    this.writtenPerFlow = held.perFlow;
    this.writtenSnatByDevice = held.snatByDevice;
  }

  /** Hops looked up before this moment are stale. Returns the moment written. */
  invalidate(): bigint {
    return this.write();
  }

  /** New flows share no hop (on) or may again (off); every kept hop is stale either way. */
  setPerFlow(on: boolean): bigint {
    this.writtenPerFlow = on;
    return this.write();
  }

  /** Whether a new SNAT flow's address depends on the device its route leaves by (snat4_devices lists one). */
  setSnatByDevice(on: boolean): bigint {
    this.writtenSnatByDevice = on;
    return this.write();
  }

  private write(): bigint {
    const sinceNs = (this.now() & ~FLAGS) | (this.writtenPerFlow ? PER_FLOW : 0n) | (this.writtenSnatByDevice ? SNAT_BY_DEVICE : 0n);
    this.map.update(0, { sinceNs });
    return sinceNs & ~FLAGS;
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
