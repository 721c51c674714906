import { describe, expect, it } from 'vitest';
import { HopEpoch, hopEpochParts } from '../../src/datapath/hop-epoch.js';
import type { DatapathMaps } from '../../src/datapath/layouts.js';

describe('the hop epoch slot', () => {
  /** The slot as a one-entry map. */
  const slot = (sinceNs: bigint) => {
    let v: { sinceNs: bigint } | undefined = { sinceNs };
    return { lookup: () => v, update: (_k: number, nv: { sinceNs: bigint }) => (v = nv) } as unknown as DatapathMaps['ferry_hop_epoch'];
  };

  it('keeps the flags the slot held: a write of one flag leaves the other as the previous agent set it', () => {
    const map = slot(1000n | 1n); // per-flow routes, set by the previous agent's route watch
    const epoch = new HopEpoch(map, () => 5000n);
    epoch.setSnatByDevice(false);
    expect(hopEpochParts(map.lookup(0)!.sinceNs)).toEqual({ sinceNs: 5000n, perFlow: true, snatByDevice: false });
    epoch.setSnatByDevice(true);
    epoch.setPerFlow(false);
    expect(hopEpochParts(map.lookup(0)!.sinceNs)).toEqual({ sinceNs: 5000n, perFlow: false, snatByDevice: true });
  });
});
