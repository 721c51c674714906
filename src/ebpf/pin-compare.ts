// How a pinned map compares with the map an object declares under the same name: what
// adopting it would need, and what a caller migrating it is told.
import type { Btf } from './btf.js';
import { layoutDiff } from './layout-diff.js';
import { libbpf, type Pointer } from './libbpf.js';
import { mapInfoByFd, type MapInfo } from './map.js';
import { kernelBtf } from './object.js';

export interface PinOptions {
  /** bpffs directory; maps are pinned as `<dir>/<map name>`. */
  dir: string;
  /** Which maps to pin; all non-internal maps when omitted. */
  maps?: string[];
  /**
   * Asked about each pinned map that differs from the object's (layout, type or size).
   * true: load a fresh map and pin it as `<name>_next`, leaving the old pin for the caller
   * to migrate from; false, or no callback: refuse to load, naming the differences.
   */
  replace?: (pinned: PinnedMismatch) => boolean;
}

/** A pinned map unlike the object's map of the same name. */
export interface PinnedMismatch {
  name: string;
  path: string;
  info: MapInfo;
  /** The BTF the kernel keeps for the pinned map (undefined if it has none). */
  btf: Btf | undefined;
  diffs: string[];
}

/** What happened to each pinned map during load. */
export interface PinReport {
  adopted: string[];
  created: string[];
  /** Loaded fresh beside a pinned map of another layout or size; pinned as `<name>_next`. */
  replaced: string[];
}

/** Where a replacement for a pinned map waits while the caller migrates into it. */
export function nextPinPath(path: string): string {
  return `${path}_next`; // bpffs refuses names with dots
}

/** Every difference between a pinned map (its fd) and an object's map (its libbpf handle). */
export function comparePinned(fd: number, handle: Pointer, objectBtf: Btf): { info: MapInfo; btf: Btf | undefined; diffs: string[] } {
  const lb = libbpf();
  const info = mapInfoByFd(fd);
  const want = { type: lb.mapType(handle), keySize: lb.mapKeySize(handle), valueSize: lb.mapValueSize(handle), maxEntries: lb.mapMaxEntries(handle) };
  const diffs: string[] = [];
  if (info.type !== want.type) diffs.push(`type: pinned ${info.type}, object ${want.type}`);
  if (info.keySize !== want.keySize) diffs.push(`key size: pinned ${info.keySize}, object ${want.keySize}`);
  if (info.valueSize !== want.valueSize) diffs.push(`value size: pinned ${info.valueSize}, object ${want.valueSize}`);
  if (info.maxEntries !== want.maxEntries) diffs.push(`max entries: pinned ${info.maxEntries}, object ${want.maxEntries}`);
  const btf = info.btfId !== 0 ? kernelBtf(info.btfId) : undefined;
  if (btf) {
    diffs.push(...layoutDiff(btf, info.btfKeyTypeId, objectBtf, lb.mapBtfKeyTypeId(handle)).map((d) => `key ${d}`));
    diffs.push(...layoutDiff(btf, info.btfValueTypeId, objectBtf, lb.mapBtfValueTypeId(handle)).map((d) => `value ${d}`));
  }
  return { info, btf, diffs };
}
