// A held connection that broke in a rolling upgrade is named with how it broke and the
// step (a switch, a route change) it came after.
import { describe, expect, it } from 'vitest';
import { heldBreaks, type UpgradeResult } from '../../src/sandbox/reliability/upgrade.js';

describe('held connections broken in an upgrade', () => {
  const result = (breaks: UpgradeResult['held']['breaks']): UpgradeResult => ({
    held: { count: 2, survived: 2 - breaks.length, brokeAtMs: breaks.map((b) => b.at - 1000), breaks },
    steps: [
      { at: 5000, step: 'node-1: the switch to the new programs began (it took 30 ms)' },
      { at: 2000, step: 'node-1: old agent told to stop' },
    ],
  }) as unknown as UpgradeResult;

  it('places each break after the latest step before it, in the steps\' time order', () => {
    expect(heldBreaks(result([{ at: 5040, how: 'connection 3: ECONNRESET' }, { at: 2500, how: 'connection 7: closed' }]))).toEqual([
      'connection 3: ECONNRESET, 40 ms after node-1: the switch to the new programs began (it took 30 ms)',
      'connection 7: closed, 500 ms after node-1: old agent told to stop',
    ]);
  });

  it('says so when a connection broke before any step, and names nothing when none broke', () => {
    expect(heldBreaks(result([{ at: 1500, how: 'connection 0: no answer for 5000 ms' }]))).toEqual(['connection 0: no answer for 5000 ms, before the first step']);
    expect(heldBreaks(result([]))).toEqual([]);
  });
});
