// Dense numeric IDs (backend, reverse-NAT, affinity, Maglev table IDs) keyed by a string or number,
// lowest free first. After a restart the IDs found in the maps are taken back: by their
// key when the map tells it (restore), or held unclaimed until their owner asks for them
// again (claim), so flows in conntrack keep pointing at the same IDs.
import { ErrorCode, FerryError } from '../errors.js';
import { ipv4FromString } from '../ebpf/codec.js';
import { IdSet } from './id-table.js';

/**
 * A backend's identity as one number (address, port, protocol), the backend allocator's
 * key: a number hashes and compares far faster than an "address:port/proto" string, and
 * at 50k Services there are half a million lookups a full sync. At most 2^50: exact.
 */
export function backendKey(address: string, port: number, proto: number): number {
  return ipv4FromString(address) * 2 ** 18 + port * 4 + (proto === 6 ? 0 : proto === 17 ? 1 : proto === 132 ? 2 : 3);
}

export class IdAllocator<K extends string | number = string> {
  private readonly byKey = new Map<K, number>();
  private readonly used = new IdSet();
  /** IDs found in the maps whose owner is not known yet. */
  private readonly unclaimedIds = new Set<number>();
  /** Retired IDs (and the key that had them, both ways), kept from reuse until released. */
  /** (undefined: quarantined, no key had it.) */
  private readonly retired = new Map<number, K | undefined>();
  private readonly retiredByKey = new Map<K, number>();
  private next = 1;

  constructor(
    readonly what: string,
    private readonly max: number,
    private readonly sizeSetting: string,
  ) {}

  get(key: K): number | undefined {
    return this.byKey.get(key);
  }

  /** Record an ID found in a map, with its owner. */
  restore(key: K, id: number): void {
    this.byKey.set(key, id);
    this.used.add(id);
  }

  /** Record an ID found in a map whose owner will claim it later. */
  restoreUnclaimed(id: number): void {
    if (this.used.has(id)) return;
    this.unclaimedIds.add(id);
    this.used.add(id);
  }

  /** `key` takes `id` if it is an unclaimed restored one; else it gets its own. */
  claimOrAllocate(key: K, id: number | undefined): number {
    const have = this.byKey.get(key);
    if (have !== undefined) return have;
    if (id !== undefined && this.unclaimedIds.delete(id)) {
      this.byKey.set(key, id);
      return id;
    }
    return this.allocate(key);
  }

  /** IDs still free. */
  free(): number {
    return this.max - this.used.size;
  }

  /**
   * Free `key`'s ID for its key but not for others yet: flows may still point at it, and a
   * different owner taking it would receive them. The same key gets it back at once.
   */
  retire(key: K): void {
    const id = this.byKey.get(key);
    if (id === undefined) return;
    this.byKey.delete(key);
    this.retired.set(id, key);
    this.retiredByKey.set(key, id);
  }

  /** An ID found in use elsewhere (a flow after a restart) but owned by nobody: retired. */
  quarantine(id: number): void {
    if (this.used.has(id)) return;
    this.used.add(id);
    this.retired.set(id, undefined);
  }

  /** Retired IDs nothing refers to any more (`inUse` says what still does) become free. */
  releaseRetired(inUse: (id: number) => boolean): number {
    let n = 0;
    for (const id of [...this.retired.keys()]) {
      if (inUse(id)) continue;
      const key = this.retired.get(id);
      if (key !== undefined && this.retiredByKey.get(key) === id) this.retiredByKey.delete(key);
      this.retired.delete(id);
      this.used.delete(id);
      if (id < this.next) this.next = id;
      n++;
    }
    return n;
  }

  /** IDs retired and not yet free. */
  get retiredCount(): number {
    return this.retired.size;
  }

  /** Restored IDs nobody claimed. */
  unclaimed(): number[] {
    return [...this.unclaimedIds];
  }

  /** Free an unclaimed restored ID. */
  releaseUnclaimed(id: number): void {
    if (!this.unclaimedIds.delete(id)) return;
    this.used.delete(id);
    if (id < this.next) this.next = id;
  }

  allocate(key: K): number {
    const have = this.byKey.get(key);
    if (have !== undefined) return have;
    const back = this.retiredByKey.get(key);
    if (back !== undefined) {
      this.retiredByKey.delete(key);
      this.retired.delete(back);
      this.byKey.set(key, back);
      return back;
    }
    while (this.used.has(this.next) && this.next <= this.max) this.next++;
    if (this.next > this.max) {
      throw new FerryError({ code: ErrorCode.MapFull, op: `allocate ${this.what} id${typeof key === 'string' ? ` for ${key}` : ''}`, cause: `all ${this.max} ids are in use`, hint: `raise ${this.sizeSetting}` });
    }
    const id = this.next++;
    this.byKey.set(key, id);
    this.used.add(id);
    return id;
  }

  release(key: K): void {
    const id = this.byKey.get(key);
    if (id === undefined) return;
    this.byKey.delete(key);
    this.used.delete(id);
    if (id < this.next) this.next = id;
  }

  clear(): void {
    this.byKey.clear();
    this.used.clear();
    this.unclaimedIds.clear();
    this.retired.clear();
    this.retiredByKey.clear();
    this.next = 1;
  }

  /** Keys that own an ID. */
  keys(): IterableIterator<K> {
    return this.byKey.keys();
  }

  get size(): number {
    return this.byKey.size;
  }
}
