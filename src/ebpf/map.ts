// Typed access to one BPF map: lookup, update, delete, iterate, and batch operations.
// Keys and values go through codecs that refuse wrong sizes.
import { Codec } from './codec.js';
import { ErrorCode, FerryError, errnoError, errnoName } from '../errors.js';
import { libbpf } from './libbpf.js';
import { track, untrack, type Resource } from './resources.js';

export const MapType = {
  Hash: 1, Array: 2, ProgArray: 3, PerfEventArray: 4, PercpuHash: 5, PercpuArray: 6,
  LruHash: 9, LruPercpuHash: 10, LpmTrie: 11, ArrayOfMaps: 12, HashOfMaps: 13, Ringbuf: 27,
} as const;

const perCpuTypes = new Set<number>([MapType.PercpuHash, MapType.PercpuArray, MapType.LruPercpuHash]);

export const UpdateFlag = { Any: 0, NoExist: 1, Exist: 2 } as const;
export type UpdateFlag = (typeof UpdateFlag)[keyof typeof UpdateFlag];

export interface MapInfo {
  name: string;
  type: number;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  flags: number;
  id: number;
  btfId: number;
  btfKeyTypeId: number;
  btfValueTypeId: number;
}

/** Read bpf_map_info (offsets per the UAPI struct; a bpf test checks them against vmlinux BTF). */
export function mapInfoByFd(fd: number): MapInfo {
  const buf = Buffer.alloc(96);
  const rc = libbpf().objGetInfoByFd(fd, buf);
  if (rc < 0) throw errnoError('map info', rc, ErrorCode.MapOp);
  const name = buf.toString('utf8', 24, 40).replace(/\0.*$/s, '');
  return {
    type: buf.readUInt32LE(0),
    id: buf.readUInt32LE(4),
    keySize: buf.readUInt32LE(8),
    valueSize: buf.readUInt32LE(12),
    maxEntries: buf.readUInt32LE(16),
    flags: buf.readUInt32LE(20),
    name,
    btfId: buf.readUInt32LE(64),
    btfKeyTypeId: buf.readUInt32LE(68),
    btfValueTypeId: buf.readUInt32LE(72),
  };
}

export interface MapOptions {
  /** The setting that resizes this map, named in "map full" errors: `mapSizes.services`. */
  sizeSetting?: string | undefined;
  /**
   * An array whose all-zero slots are absent (an id-indexed table the programs read without
   * a hash lookup): lookups and walks skip them, a delete writes zeros. Ignored for other types.
   */
  sparse?: boolean | undefined;
  /** Close the FD with the map (true for FDs this map opened itself). */
  ownsFd: boolean;
}

export class BpfMap<K, V> implements Resource {
  readonly name: string;
  readonly info: MapInfo;
  readonly perCpu: boolean;
  /** See MapOptions.sparse. */
  readonly sparse: boolean;
  /** Bytes per CPU slot in per-CPU values: the value size rounded up to 8. */
  private readonly slot: number;
  private readonly ncpus: number;
  private fdValue: number;
  private readonly owns: boolean;
  private readonly sizeSetting: string | undefined;

  constructor(
    fd: number,
    readonly keyCodec: Codec<K>,
    readonly valueCodec: Codec<V>,
    opts: MapOptions,
  ) {
    this.fdValue = fd;
    this.info = mapInfoByFd(fd);
    this.name = this.info.name;
    this.owns = opts.ownsFd;
    this.sizeSetting = opts.sizeSetting;
    this.perCpu = perCpuTypes.has(this.info.type);
    this.sparse = opts.sparse === true && this.info.type === MapType.Array;
    this.slot = Math.ceil(this.info.valueSize / 8) * 8;
    this.ncpus = this.perCpu ? libbpf().numPossibleCpus() : 1;
    if (keyCodec.size !== this.info.keySize) {
      throw new FerryError({ code: ErrorCode.Codec, op: `open map ${this.name}`, cause: `key codec ${keyCodec.cName} is ${keyCodec.size} bytes, the map's key is ${this.info.keySize}` });
    }
    if (valueCodec.size !== this.info.valueSize) {
      throw new FerryError({ code: ErrorCode.Codec, op: `open map ${this.name}`, cause: `value codec ${valueCodec.cName} is ${valueCodec.size} bytes, the map's value is ${this.info.valueSize}` });
    }
    if (this.owns) track(this);
  }

  get what(): string {
    return `map ${this.name} (fd ${this.fdValue})`;
  }

  get fd(): number {
    if (this.fdValue < 0) throw new FerryError({ code: ErrorCode.Closed, op: `map ${this.name}`, cause: 'used after close' });
    return this.fdValue;
  }

  get maxEntries(): number {
    return this.info.maxEntries;
  }

  private valueBuffer(): Buffer {
    return Buffer.alloc(this.perCpu ? this.slot * this.ncpus : this.info.valueSize);
  }

  private fail(op: string, rc: number): FerryError {
    const name = errnoName(rc);
    if ((name === 'E2BIG' || name === 'ENOSPC' || name === 'ENOMEM') && op.startsWith('update')) {
      return new FerryError({
        code: ErrorCode.MapFull,
        op: `${op} map ${this.name}`,
        cause: `map is full (${this.info.maxEntries} entries)`,
        hint: this.sizeSetting ? `raise ${this.sizeSetting}` : 'raise the map size',
        errno: Math.abs(rc),
      });
    }
    return errnoError(`${op} map ${this.name}`, rc, ErrorCode.MapOp);
  }

  lookup(key: K): V | undefined {
    const v = this.lookupBytes(key);
    return v && this.valueCodec.decode(v);
  }

  /** A value's bytes, undecoded (a sparse array's empty slot: undefined). */
  lookupBytes(key: K): Buffer | undefined {
    if (this.perCpu) throw new FerryError({ code: ErrorCode.MapOp, op: `lookup map ${this.name}`, cause: 'per-CPU map', hint: 'use lookupPerCpu' });
    const v = this.valueBuffer();
    const rc = libbpf().mapLookupElem(this.fd, this.keyCodec.encode(key), v);
    if (rc === 0) return this.sparse && isZero(v) ? undefined : v;
    if (errnoName(rc) === 'ENOENT') return undefined;
    throw this.fail('lookup', rc);
  }

  /** One value per possible CPU, for per-CPU maps. */
  lookupPerCpu(key: K): V[] | undefined {
    const v = this.valueBuffer();
    const rc = libbpf().mapLookupElem(this.fd, this.keyCodec.encode(key), v);
    if (rc === 0) return this.splitPerCpu(v, 0);
    if (errnoName(rc) === 'ENOENT') return undefined;
    throw this.fail('lookup', rc);
  }

  private splitPerCpu(buf: Buffer, at: number): V[] {
    const out: V[] = [];
    for (let c = 0; c < this.ncpus; c++) out.push(this.valueCodec.decode(buf, at + c * this.slot));
    return out;
  }

  private encodeValue(value: V | V[], into: Buffer, at: number): void {
    if (this.perCpu) {
      const list = Array.isArray(value) ? (value as V[]) : Array.from({ length: this.ncpus }, () => value as V);
      if (list.length !== this.ncpus) throw new FerryError({ code: ErrorCode.Codec, op: `update map ${this.name}`, cause: `${list.length} per-CPU values for ${this.ncpus} CPUs` });
      list.forEach((v, c) => this.valueCodec.encode(v, into, at + c * this.slot));
    } else {
      this.valueCodec.encode(value as V, into, at);
    }
  }

  /** Insert or replace. For per-CPU maps a single value is written to every CPU. */
  update(key: K, value: V | V[], flag: UpdateFlag = UpdateFlag.Any): void {
    const v = this.valueBuffer();
    this.encodeValue(value, v, 0);
    const rc = libbpf().mapUpdateElem(this.fd, this.keyCodec.encode(key), v, flag);
    if (rc < 0) throw this.fail('update', rc);
  }

  /** Delete a key; false when it was not there. */
  delete(key: K): boolean {
    if (this.sparse) return this.clearSlots([key]) === 1;
    const rc = libbpf().mapDeleteElem(this.fd, this.keyCodec.encode(key));
    if (rc === 0) return true;
    if (errnoName(rc) === 'ENOENT') return false;
    throw this.fail('delete', rc);
  }

  /** Keys, walked with get_next_key. Safe while entries are deleted. */
  *keys(): Generator<K> {
    if (this.sparse) {
      for (const [k] of this.readAll(256)) yield k;
      return;
    }
    let prev: Buffer | null = null;
    for (;;) {
      const next = Buffer.alloc(this.info.keySize);
      const rc = libbpf().mapGetNextKey(this.fd, prev, next);
      if (rc < 0) {
        if (errnoName(rc) === 'ENOENT') return;
        throw this.fail('iterate', rc);
      }
      yield this.keyCodec.decode(next);
      prev = next;
    }
  }

  /** Entries, read in batches with an explicit cursor (falls back to one by one). */
  entries(batchSize = 256): Array<[K, V]> {
    if (this.perCpu) throw new FerryError({ code: ErrorCode.MapOp, op: `read map ${this.name}`, cause: 'per-CPU map', hint: 'use entriesPerCpu' });
    return this.readAll(batchSize).map(([k, buf, at]) => [k, this.valueCodec.decode(buf, at)]);
  }

  entriesPerCpu(batchSize = 256): Array<[K, V[]]> {
    return this.readAll(batchSize).map(([k, buf, at]) => [k, this.splitPerCpu(buf, at)]);
  }

  private readAll(batchSize: number): Array<[K, Buffer, number]> {
    const out: Array<[K, Buffer, number]> = [];
    const ksize = this.info.keySize;
    const done = this.eachBatch(batchSize, (keys, values, n, vsize) => {
      for (let i = 0; i < n; i++) if (!(this.sparse && isZeroAt(values, i * vsize, vsize))) out.push([this.keyCodec.decode(keys, i * ksize), values, i * vsize]);
    });
    return done ? out : this.readOneByOne(this.valueBuffer().length);
  }

  /**
   * Every entry's raw bytes, a batch at a time, nothing decoded: for walks over hundreds of
   * thousands of entries that need a few fields of each (read them with the codecs'
   * numberReader). The buffers are the batch's; `visit` must copy what it keeps.
   */
  forEachRaw(visit: (keys: Buffer, keyAt: number, values: Buffer, valueAt: number) => void, batchSize = 4096): void {
    if (this.perCpu) throw new FerryError({ code: ErrorCode.MapOp, op: `read map ${this.name}`, cause: 'per-CPU map', hint: 'use entriesPerCpu' });
    const ksize = this.info.keySize;
    const done = this.eachBatch(batchSize, (keys, values, n, vsize) => {
      for (let i = 0; i < n; i++) if (!(this.sparse && isZeroAt(values, i * vsize, vsize))) visit(keys, i * ksize, values, i * vsize);
    });
    if (done) return;
    for (const [k, v] of this.readOneByOne(this.valueBuffer().length)) visit(this.keyCodec.encode(k), 0, v, 0);
  }

  /** Batch lookups over the whole map; false when the kernel has no batch lookup for it. */
  private eachBatch(batchSize: number, batch: (keys: Buffer, values: Buffer, n: number, vsize: number) => void): boolean {
    const vsize = this.valueBuffer().length;
    const cursorSize = Math.max(8, this.info.keySize);
    let inBatch: Buffer | null = null;
    for (;;) {
      const keys = Buffer.alloc(this.info.keySize * batchSize);
      const values = Buffer.alloc(vsize * batchSize);
      const outBatch = Buffer.alloc(cursorSize);
      const count = Buffer.alloc(4);
      count.writeUInt32LE(batchSize);
      const rc = libbpf().mapLookupBatch(this.fd, inBatch, outBatch, keys, values, count);
      const n = count.readUInt32LE();
      const name = rc < 0 ? errnoName(rc) : '';
      if (rc < 0 && name !== 'ENOENT') {
        // No batch lookup for this map type: only the first call can tell.
        if (inBatch === null && (name === 'EINVAL' || name === 'EOPNOTSUPP' || name === 'ENOTSUP')) return false;
        // A hash bucket holds more entries than the batch: ask again, for twice as many
        // (no bucket holds more than the map, so this ends).
        if (name === 'ENOSPC' && n === 0 && batchSize < this.info.maxEntries) {
          batchSize *= 2;
          continue;
        }
        throw this.fail('batch lookup', rc);
      }
      batch(keys, values, n, vsize);
      if (rc < 0) return true; // ENOENT: the walk is complete
      inBatch = outBatch;
    }
  }

  private readOneByOne(vsize: number): Array<[K, Buffer, number]> {
    const out: Array<[K, Buffer, number]> = [];
    for (const k of this.keys()) {
      const v = Buffer.alloc(vsize);
      const rc = libbpf().mapLookupElem(this.fd, this.keyCodec.encode(k), v);
      if (rc === 0 && !(this.sparse && isZero(v))) out.push([k, v, 0]);
    }
    return out;
  }

  /** Write many entries in one syscall per chunk. */
  updateBatch(entries: Array<[K, V | V[]]>, flag: UpdateFlag = UpdateFlag.Any, chunk = 1024): void {
    this.updateBatchOf(entries.length, (i) => entries[i]!, flag, chunk);
  }

  /**
   * Write `count` entries, the i-th as `entry(i)` gives it, in one syscall per chunk. The
   * entry is encoded at once, so `entry` may return the same scratch pair each time: a
   * writer of half a million entries need not make an object per entry.
   */
  updateBatchOf(count: number, entry: (i: number) => readonly [K, V | V[]], flag: UpdateFlag = UpdateFlag.Any, chunk = 1024): void {
    const vsize = this.valueBuffer().length;
    const ksize = this.info.keySize;
    for (let start = 0; start < count; start += chunk) {
      const n = Math.min(chunk, count - start);
      const keys = Buffer.alloc(ksize * n);
      const values = Buffer.alloc(vsize * n);
      for (let i = 0; i < n; i++) {
        const [k, v] = entry(start + i);
        this.keyCodec.encode(k, keys, i * ksize);
        this.encodeValue(v, values, i * vsize);
      }
      const counted = Buffer.alloc(4);
      counted.writeUInt32LE(n);
      const rc = libbpf().mapUpdateBatch(this.fd, keys, values, counted, flag);
      if (rc < 0) throw this.fail('update batch', rc);
    }
  }

  /** Delete many keys; keys that are absent are ignored. Returns how many were deleted. */
  deleteBatch(keys: K[]): number {
    if (this.sparse) return this.clearSlots(keys);
    const ks = this.info.keySize;
    const all = Buffer.alloc(ks * keys.length);
    keys.forEach((k, i) => this.keyCodec.encode(k, all, i * ks));
    let deleted = 0;
    let at = 0;
    while (at < keys.length) {
      const count = Buffer.alloc(4);
      count.writeUInt32LE(keys.length - at);
      const rc = libbpf().mapDeleteBatch(this.fd, all.subarray(at * ks), count);
      const done = count.readUInt32LE();
      deleted += done;
      if (rc === 0) break;
      const name = errnoName(rc);
      if (name === 'ENOENT') {
        at += done + 1; // the key at `done` was absent: skip it and go on
        continue;
      }
      if (name === 'EINVAL' || name === 'EOPNOTSUPP' || name === 'ENOTSUP') {
        for (const k of keys.slice(at + done)) if (this.delete(k)) deleted++;
        break;
      }
      throw this.fail('delete batch', rc);
    }
    return deleted;
  }

  /** A sparse array's delete: the slots that hold something are zeroed. Returns how many. */
  private clearSlots(keys: K[]): number {
    const held = keys.filter((k) => this.lookup(k) !== undefined);
    const vsize = this.info.valueSize;
    for (let start = 0; start < held.length; start += 1024) {
      const part = held.slice(start, start + 1024);
      const ks = Buffer.alloc(this.info.keySize * part.length);
      part.forEach((k, i) => this.keyCodec.encode(k, ks, i * this.info.keySize));
      const count = Buffer.alloc(4);
      count.writeUInt32LE(part.length);
      const rc = libbpf().mapUpdateBatch(this.fd, ks, Buffer.alloc(vsize * part.length), count, UpdateFlag.Any);
      if (rc < 0) throw this.fail('delete (zero) batch', rc);
    }
    return held.length;
  }

  /** Pin at a bpffs path. */
  pin(path: string): void {
    const rc = libbpf().objPin(this.fd, path);
    if (rc < 0) throw errnoError(`pin map ${this.name} at ${path}`, rc, ErrorCode.MapOp, bpffsHint(rc));
  }

  close(): void {
    if (this.fdValue < 0) return;
    if (this.owns) {
      libbpf().close(this.fdValue);
      untrack(this);
    }
    this.fdValue = -1;
  }
}

const isZero = (b: Buffer): boolean => isZeroAt(b, 0, b.length);

function isZeroAt(b: Buffer, at: number, length: number): boolean {
  for (let i = at; i < at + length; i++) if (b[i] !== 0) return false;
  return true;
}

/** BPF_F_INNER_MAP: an inner map of a map-in-map whose size may differ from the template's. */
export const BPF_F_INNER_MAP = 1 << 12;

/** A new map not declared in any object (e.g. the inner maps of a map-in-map), owned by the caller. */
export function createMap<K, V>(o: { type: number; name: string; key: Codec<K>; value: Codec<V>; maxEntries: number; flags?: number; sparse?: boolean }): BpfMap<K, V> {
  const fd = libbpf().mapCreate(o.type, o.name, o.key.size, o.value.size, o.maxEntries, o.flags ?? 0);
  if (fd < 0) throw errnoError(`create map ${o.name}`, fd, ErrorCode.MapOp);
  return new BpfMap(fd, o.key, o.value, { ownsFd: true, sparse: o.sparse });
}

export function bpffsHint(rc: number): string | undefined {
  const n = errnoName(rc);
  if (n === 'ENOENT' || n === 'EPERM' || n === 'EINVAL') {
    return 'is bpffs mounted there? mount -t bpf bpf /sys/fs/bpf, or run make setup';
  }
  return undefined;
}
