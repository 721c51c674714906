// The addresses this node answers ARP for (l2_owned): one entry per (interface, address),
// answered with the interface's MAC until its expiry. The agent calls apply() on every
// heartbeat, which both sets the owned set and pushes every expiry forward; an agent that
// stops calling it stops its node answering once the entries expire.
import { ErrorCode, FerryError } from '../errors.js';
import { monotonicNs } from './ct-gc.js';
import type { DatapathMaps, L2Key } from './layouts.js';

export interface L2Announcement {
  ifindex: number;
  address: string;
  /** The interface's MAC, aa:bb:cc:dd:ee:ff. */
  mac: string;
}

const keyText = (k: L2Key) => `${k.ifindex}/${k.addr}`;
const macBuffer = (mac: string) => {
  const b = Buffer.from(mac.split(':').map((x) => Number.parseInt(x, 16)));
  if (b.length !== 6 || !/^([0-9a-f]{2}:){5}[0-9a-f]{2}$/i.test(mac)) throw new FerryError({ code: ErrorCode.Config, op: 'announce an address', cause: `"${mac}" is not a MAC address` });
  return b;
};

export class L2AddressWriter {
  private readonly written = new Map<string, L2Key>();

  constructor(private readonly map: DatapathMaps['l2_owned'], private readonly now: () => bigint = monotonicNs) {
    for (const k of map.keys()) this.written.set(keyText(k), k);
  }

  get capacity(): number {
    return this.map.maxEntries;
  }

  /**
   * Make the map hold exactly `wanted`, each answered for `validMs` from now. What does not
   * fit the map is left out (the first ones, in the order given, are kept) and returned.
   */
  apply(wanted: readonly L2Announcement[], validMs: number): { added: number; removed: number; leftOut: L2Announcement[] } {
    const fits = wanted.slice(0, this.capacity);
    const expiresNs = this.now() + BigInt(Math.round(validMs)) * 1_000_000n;
    const entries = fits.map((w) => [{ ifindex: w.ifindex, addr: w.address }, { mac: macBuffer(w.mac), expiresNs }] as const);
    const want = new Map(entries.map(([k]) => [keyText(k), k]));
    const removed = [...this.written].filter(([t]) => !want.has(t)).map(([, k]) => k);
    if (removed.length > 0) this.map.deleteBatch(removed);
    if (entries.length > 0) this.map.updateBatch(entries.map(([k, v]) => [k, v]));
    const added = [...want.keys()].filter((t) => !this.written.has(t)).length;
    this.written.clear();
    for (const [t, k] of want) this.written.set(t, k);
    return { added, removed: removed.length, leftOut: wanted.slice(fits.length) };
  }
}
