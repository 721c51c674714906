// Dense numeric IDs (backend IDs, reverse-NAT IDs) keyed by a string, lowest free first.
// Restored from the maps on start, so flows in conntrack keep pointing at the same IDs.
import { ErrorCode, FerryError } from '../ebpf/errors.js';

export class IdAllocator {
  private readonly byKey = new Map<string, number>();
  private readonly used = new Set<number>();
  private next = 1;

  constructor(
    readonly what: string,
    private readonly max: number,
    private readonly sizeSetting: string,
  ) {}

  get(key: string): number | undefined {
    return this.byKey.get(key);
  }

  /** Record an ID found in a map (restore). */
  restore(key: string, id: number): void {
    this.byKey.set(key, id);
    this.used.add(id);
  }

  allocate(key: string): number {
    const have = this.byKey.get(key);
    if (have !== undefined) return have;
    while (this.used.has(this.next) && this.next <= this.max) this.next++;
    if (this.next > this.max) {
      throw new FerryError({ code: ErrorCode.MapFull, op: `allocate ${this.what} id for ${key}`, cause: `all ${this.max} ids are in use`, hint: `raise ${this.sizeSetting}` });
    }
    const id = this.next++;
    this.byKey.set(key, id);
    this.used.add(id);
    return id;
  }

  release(key: string): void {
    const id = this.byKey.get(key);
    if (id === undefined) return;
    this.byKey.delete(key);
    this.used.delete(id);
    if (id < this.next) this.next = id;
  }

  clear(): void {
    this.byKey.clear();
    this.used.clear();
    this.next = 1;
  }

  keys(): IterableIterator<string> {
    return this.byKey.keys();
  }

  get size(): number {
    return this.byKey.size;
  }
}
