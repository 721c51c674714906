// Tables keyed by the writer's dense numeric ids (backend, reverse-NAT), lowest first as
// IdAllocator hands them out: an array slot per id instead of a hash table entry. At 50k
// Services a Map of 150k backends holds ~7 MiB of table; the array holds 8 bytes a slot.
// Ids read back from the maps are whatever the maps hold (a u32 from an older build or a
// damaged map): ids from DENSE_IDS up go to a plain Map or Set, so that no id, however
// large, makes the array grow to it.

/** Ids below this are kept in the dense part (at most 16 MiB of slots; map sizes are far smaller). */
export const DENSE_IDS = 1 << 21;

const isId = (id: number) => Number.isInteger(id) && id >= 0;

/** A Map<number, V> over non-negative integer keys, iterated in key order. */
export class IdTable<V> implements ReadonlyMap<number, V> {
  private slots: Array<V | undefined> = [];
  private readonly sparse = new Map<number, V>();
  private count = 0;

  get size(): number {
    return this.count + this.sparse.size;
  }

  get(id: number): V | undefined {
    return id < DENSE_IDS ? this.slots[id] : this.sparse.get(id);
  }

  has(id: number): boolean {
    return this.get(id) !== undefined;
  }

  set(id: number, value: V): this {
    if (!isId(id)) throw new RangeError(`IdTable: ${id} is not an id`);
    if (value === undefined) throw new RangeError('IdTable: undefined is no value');
    if (id >= DENSE_IDS) {
      this.sparse.set(id, value);
      return this;
    }
    // Filled up to the id, never a hole: a far index would turn the array into a dictionary.
    while (this.slots.length < id) this.slots.push(undefined);
    if (this.slots[id] === undefined) this.count++;
    this.slots[id] = value;
    return this;
  }

  delete(id: number): boolean {
    if (id >= DENSE_IDS) return this.sparse.delete(id);
    if (this.slots[id] === undefined) return false;
    this.slots[id] = undefined;
    this.count--;
    // Shrink from the end, so a table that emptied gives its memory back.
    while (this.slots.length > 0 && this.slots[this.slots.length - 1] === undefined) this.slots.pop();
    return true;
  }

  clear(): void {
    this.slots = [];
    this.sparse.clear();
    this.count = 0;
  }

  *entries(): MapIterator<[number, V]> {
    for (let id = 0; id < this.slots.length; id++) {
      const v = this.slots[id];
      if (v !== undefined) yield [id, v];
    }
    for (const id of [...this.sparse.keys()].sort((a, b) => a - b)) yield [id, this.sparse.get(id)!];
  }

  *keys(): MapIterator<number> {
    for (const [id] of this.entries()) yield id;
  }

  *values(): MapIterator<V> {
    for (const [, v] of this.entries()) yield v;
  }

  [Symbol.iterator](): MapIterator<[number, V]> {
    return this.entries();
  }

  forEach(fn: (value: V, id: number, table: ReadonlyMap<number, V>) => void): void {
    for (const [id, v] of this.entries()) fn(v, id, this);
  }
}

/** A Set<number> of non-negative integer ids, one byte each below DENSE_IDS. */
export class IdSet {
  private bytes = new Uint8Array(1024);
  private readonly sparse = new Set<number>();
  private count = 0;

  get size(): number {
    return this.count + this.sparse.size;
  }

  has(id: number): boolean {
    if (id >= DENSE_IDS) return this.sparse.has(id);
    return id >= 0 && id < this.bytes.length && this.bytes[id] === 1;
  }

  add(id: number): this {
    if (!isId(id)) throw new RangeError(`IdSet: ${id} is not an id`);
    if (id >= DENSE_IDS) {
      this.sparse.add(id);
      return this;
    }
    if (id >= this.bytes.length) {
      let n = this.bytes.length;
      while (n <= id) n *= 2;
      const grown = new Uint8Array(n);
      grown.set(this.bytes);
      this.bytes = grown;
    }
    if (this.bytes[id] === 0) {
      this.bytes[id] = 1;
      this.count++;
    }
    return this;
  }

  delete(id: number): boolean {
    if (id >= DENSE_IDS) return this.sparse.delete(id);
    if (!this.has(id)) return false;
    this.bytes[id] = 0;
    this.count--;
    return true;
  }

  clear(): void {
    this.bytes = new Uint8Array(1024);
    this.sparse.clear();
    this.count = 0;
  }
}
