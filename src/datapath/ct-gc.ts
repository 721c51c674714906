// Conntrack garbage collection from user space: entries carry their expiry (CLOCK_MONOTONIC,
// the clock bpf_ktime_get_ns reads), and the collector deletes the ones past it. LRU
// eviction is only the last resort when the maps fill up.
import type { DatapathMaps } from './loader.js';

export interface GcResult {
  ctScanned: number;
  ctDeleted: number;
  natScanned: number;
  natDeleted: number;
}

/** Nanoseconds on CLOCK_MONOTONIC (Node's hrtime reads the same clock as the kernel's ktime). */
export function monotonicNs(): bigint {
  return process.hrtime.bigint();
}

export function collectConntrack(maps: Pick<DatapathMaps, 'ct4' | 'nat4'>, now: bigint = monotonicNs()): GcResult {
  const ct = maps.ct4.entries();
  const nat = maps.nat4.entries();
  const ctExpired = ct.filter(([, v]) => v.expiresNs < now).map(([k]) => k);
  const natExpired = nat.filter(([, v]) => v.expiresNs < now).map(([k]) => k);
  return {
    ctScanned: ct.length,
    ctDeleted: ctExpired.length > 0 ? maps.ct4.deleteBatch(ctExpired) : 0,
    natScanned: nat.length,
    natDeleted: natExpired.length > 0 ? maps.nat4.deleteBatch(natExpired) : 0,
  };
}
