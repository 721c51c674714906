// A compiled BPF object: open → configure (.rodata constants, map sizes, pins) → load →
// find programs and maps → close. One owner, one cleanup path.
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Btf, BtfKind } from './btf.js';
import type { Codec } from './codec.js';
import { assertLayout } from './layout-check.js';
import { ErrorCode, FerryError, codeForErrno, errnoError, errnoHint, errnoMessage, errnoName } from '../errors.js';
import { captureLibbpfMessages, libbpf, type LibbpfMessage, type Pointer } from './libbpf.js';
import { BpfMap, bpffsHint, type MapOptions } from './map.js';
import { comparePinned, nextPinPath, type PinOptions, type PinReport } from './pin-compare.js';
import { track, untrack, type Resource } from './resources.js';
import { parseVerifierFailure } from './verifier.js';

export type RodataValue = number | bigint | boolean | Buffer;

export interface Program {
  readonly name: string;
  readonly section: string;
  readonly type: number;
  /** Valid while the object is open and loaded. */
  readonly fd: number;
  /** The libbpf handle, for attach helpers in this layer. */
  readonly handle: Pointer;
}

interface MapHandle {
  name: string;
  handle: Pointer;
  internal: boolean;
  /** The key's and value's types in this object's BTF, as opened: reusing a pinned map
   * makes libbpf report the pinned map's type ids, which number another object's BTF. */
  keyTypeId: number;
  valueTypeId: number;
}

export type { PinOptions, PinnedMismatch, PinReport } from './pin-compare.js';
export { nextPinPath } from './pin-compare.js';

export class BpfObject implements Resource {
  readonly path: string;
  readonly btf: Btf;
  private handle: Pointer | null;
  private loaded = false;
  private readonly mapHandles = new Map<string, MapHandle>();
  private readonly rodata: { map: Pointer; data: Buffer } | undefined;
  private pinOpts: PinOptions | undefined;
  private adoptedFds: number[] = [];
  private readonly statsLogs = new Map<string, Buffer>();
  readonly pinReport: PinReport = { adopted: [], created: [], replaced: [] };

  private constructor(path: string, handle: Pointer) {
    this.path = path;
    this.handle = handle;
    const lb = libbpf();
    const btfPtr = lb.objectBtf(handle);
    if (!btfPtr) {
      lb.objectClose(handle);
      throw new FerryError({ code: ErrorCode.ObjectOpen, op: `open ${path}`, cause: 'the object has no BTF', hint: 'compile with clang -g (ferry compile does)' });
    }
    this.btf = Btf.parse(lb.btfRawData(btfPtr));
    for (let m = lb.objectNextMap(handle, null); m; m = lb.objectNextMap(handle, m)) {
      const name = lb.mapName(m);
      const internal = lb.mapIsInternal(m);
      this.mapHandles.set(name, { name, handle: m, internal, keyTypeId: lb.mapBtfKeyTypeId(m), valueTypeId: lb.mapBtfValueTypeId(m) });
      if (internal && name.endsWith('.rodata')) {
        const init = lb.mapInitialValue(m);
        if (init) this.rodata = { map: m, data: lb.readMemory(init.ptr, init.size) };
      }
    }
    track(this);
  }

  get what(): string {
    return `bpf object ${this.path}`;
  }

  static open(path: string): BpfObject {
    const lb = libbpf();
    if (!existsSync(path)) {
      throw new FerryError({ code: ErrorCode.NotFound, op: `open ${path}`, cause: 'no such file', hint: 'run make build (ferry compile) first' });
    }
    const { result, messages } = captureLibbpfMessages(() => {
      const h = lb.objectOpenFile(path);
      return { h, errno: lb.errno() };
    });
    if (!result.h) {
      const last = firstWarning(messages);
      throw new FerryError({
        code: ErrorCode.ObjectOpen,
        op: `open ${path}`,
        cause: last ?? `libbpf failed: ${errnoName(result.errno)}`,
        hint: 'is it a BPF ELF object built by ferry compile?',
        errno: result.errno,
      });
    }
    return new BpfObject(path, result.h);
  }

  private get h(): Pointer {
    if (!this.handle) throw new FerryError({ code: ErrorCode.Closed, op: `object ${this.path}`, cause: 'used after close' });
    return this.handle;
  }

  private requireOpenPhase(op: string): void {
    if (this.loaded) throw new FerryError({ code: ErrorCode.ObjectLoad, op, cause: 'the object is already loaded', hint: 'configure between open and load' });
  }

  /** Names and types of the `.rodata` constants (`const volatile` globals). */
  rodataVariables(): Map<string, { offset: number; size: number; typeId: number }> {
    const out = new Map<string, { offset: number; size: number; typeId: number }>();
    for (const sec of this.btf.find('.rodata', BtfKind.Datasec)) {
      if (sec.kind !== BtfKind.Datasec) continue;
      for (const v of sec.vars) {
        const t = this.btf.type(v.type);
        if (t.kind === BtfKind.Var) out.set(t.name, { offset: v.offset, size: v.size, typeId: t.type });
      }
    }
    return out;
  }

  /** Set a `.rodata` constant by name, checked against its BTF type. */
  setConstant(name: string, value: RodataValue): void {
    const op = `set constant ${name}`;
    this.requireOpenPhase(op);
    const v = this.rodataVariables().get(name);
    if (!v || !this.rodata) {
      const known = [...this.rodataVariables().keys()].join(', ') || 'none';
      throw new FerryError({ code: ErrorCode.Rodata, op, cause: `no such const volatile in ${this.path}`, hint: `known: ${known}` });
    }
    const t = this.btf.resolve(v.typeId);
    const data = this.rodata.data;
    const typeName = this.btf.describe(v.typeId);
    const bad = (why: string) => new FerryError({ code: ErrorCode.Rodata, op, cause: `${why} (C type ${typeName})` });
    if (Buffer.isBuffer(value)) {
      if (t.kind !== BtfKind.Array && t.kind !== BtfKind.Struct) throw bad('a byte buffer needs an array or struct');
      if (value.length !== v.size) throw bad(`got ${value.length} bytes, need ${v.size}`);
      value.copy(data, v.offset);
    } else if (t.kind === BtfKind.Int || t.kind === BtfKind.Enum || t.kind === BtfKind.Enum64) {
      const isBool = t.kind === BtfKind.Int && t.name === '_Bool';
      if (typeof value === 'boolean' && !isBool) throw bad('a boolean needs a _Bool');
      const big = typeof value === 'boolean' ? BigInt(value ? 1 : 0) : BigInt(value);
      if (typeof value === 'number' && !Number.isInteger(value)) throw bad(`${value} is not an integer`);
      const bits = BigInt(v.size * 8);
      const signed = t.signed;
      const min = signed ? -(1n << (bits - 1n)) : 0n;
      const max = signed ? (1n << (bits - 1n)) - 1n : (1n << bits) - 1n;
      if (big < min || big > max) throw bad(`${value} is out of range ${min}..${max}`);
      const unsigned = BigInt.asUintN(Number(bits), big);
      for (let i = 0; i < v.size; i++) data[v.offset + i] = Number((unsigned >> BigInt(8 * i)) & 0xffn);
    } else {
      throw bad('unsupported constant type; pass a Buffer of the exact size');
    }
  }

  /** The `.rodata` bytes as configured (what the loaded programs see). */
  rodataBytes(): Buffer | undefined {
    return this.rodata ? Buffer.from(this.rodata.data) : undefined;
  }

  /** Take every `.rodata` constant at once from a loaded twin of this object (same build). */
  setRodataBytes(bytes: Buffer): void {
    const op = `copy .rodata into ${this.path}`;
    this.requireOpenPhase(op);
    if (!this.rodata || bytes.length !== this.rodata.data.length) {
      throw new FerryError({ code: ErrorCode.Rodata, op, cause: `got ${bytes.length} bytes, the object has ${this.rodata?.data.length ?? 0}`, hint: 'the running datapath comes from another ferry build' });
    }
    bytes.copy(this.rodata.data);
  }

  /** Pin the loaded `.rodata` map (the node's settings), so tools can load a twin. */
  pinRodata(path: string): void {
    const m = [...this.mapHandles.values()].find((x) => x.internal && x.name.endsWith('.rodata'));
    if (!m || !this.loaded) throw new FerryError({ code: ErrorCode.Rodata, op: `pin .rodata of ${this.path}`, cause: 'no loaded .rodata map' });
    const rc = libbpf().objPin(libbpf().mapFd(m.handle), path);
    if (rc < 0) throw errnoError(`pin .rodata at ${path}`, rc, ErrorCode.MapOp, bpffsHint(rc));
  }

  /** Resize a map before load (the load-time sizing settings). */
  setMaxEntries(mapName: string, n: number): void {
    const op = `resize map ${mapName}`;
    this.requireOpenPhase(op);
    const m = this.mapHandle(mapName);
    const rc = libbpf().mapSetMaxEntries(m.handle, n);
    if (rc < 0) throw errnoError(op, rc, ErrorCode.MapOp);
  }

  /** Pin maps under a bpffs directory: adopt the live ones there, pin the new ones. */
  pinMaps(opts: PinOptions): void {
    this.requireOpenPhase('pin maps');
    if (!existsSync(opts.dir)) {
      throw new FerryError({ code: ErrorCode.BpffsMissing, op: `pin maps in ${opts.dir}`, cause: 'no such directory', hint: 'mount bpffs (mount -t bpf bpf /sys/fs/bpf) and create the directory' });
    }
    this.pinOpts = opts;
  }

  private pinnedNames(): string[] {
    if (!this.pinOpts) return [];
    return this.pinOpts.maps ?? [...this.mapHandles.values()].filter((m) => !m.internal).map((m) => m.name);
  }

  /** Reuse each pinned map whose type, sizes and BTF layout match; refuse the rest loudly. */
  private adoptPinned(): void {
    const lb = libbpf();
    for (const name of this.pinnedNames()) {
      const m = this.mapHandle(name);
      const path = join(this.pinOpts!.dir, name);
      if (!existsSync(path)) continue;
      const op = `adopt pinned map ${path}`;
      const fd = lb.objGet(path);
      if (fd < 0) throw errnoError(op, fd, ErrorCode.MapOp, bpffsHint(fd));
      this.adoptedFds.push(fd);
      const { info, btf: pinnedBtf, diffs } = comparePinned(fd, m.handle, this.btf);
      if (diffs.length > 0 && this.pinOpts!.replace?.({ name, path, info, btf: pinnedBtf, diffs })) {
        this.pinReport.replaced.push(name);
        continue;
      }
      if (diffs.length > 0) {
        throw new FerryError({
          code: ErrorCode.Layout,
          op,
          cause: `the pinned map differs from the object: ${diffs.join('; ')}`,
          hint: `a different ferry version made it; remove ${path} to start afresh (live flows through it are lost)`,
          detail: diffs.join('\n'),
        });
      }
      const rc = lb.mapReuseFd(m.handle, fd);
      if (rc < 0) throw errnoError(op, rc, ErrorCode.MapOp);
      this.pinReport.adopted.push(name);
    }
  }

  /** Have the verifier report its statistics for every program at load (verifierStats). */
  collectVerifierStats(): void {
    this.requireOpenPhase(`collect verifier statistics of ${this.path}`);
    for (const p of this.programs()) {
      const log = Buffer.alloc(4096); // libbpf keeps the pointer until load: held in statsLogs
      const rc = libbpf().programSetLog(p.handle, 4 /* BPF_LOG_STATS */, log);
      if (rc < 0) throw errnoError(`ask the verifier's statistics of ${p.name}`, rc, ErrorCode.ObjectLoad);
      this.statsLogs.set(p.name, log);
    }
  }

  /** After load: the instructions the verifier processed for a program, and its limit. */
  verifierStats(program: string): { processed: number; limit: number } | undefined {
    const log = this.statsLogs.get(program)?.toString('utf8');
    const m = /processed (\d+) insns \(limit (\d+)\)/.exec(log ?? '');
    return m ? { processed: Number(m[1]), limit: Number(m[2]) } : undefined;
  }

  /** Load every program and map into the kernel. Verifier failures quote the failing lines. */
  load(): void {
    this.requireOpenPhase(`load ${this.path}`);
    const lb = libbpf();
    if (this.rodata) {
      const rc = lb.mapSetInitialValue(this.rodata.map, this.rodata.data);
      if (rc < 0) throw errnoError(`set .rodata of ${this.path}`, rc, ErrorCode.Rodata);
    }
    this.adoptPinned();
    const { result: rc, messages } = captureLibbpfMessages(() => lb.objectLoad(this.h));
    this.closeAdoptedFds();
    if (rc < 0) throw loadError(this.path, rc, messages);
    this.loaded = true;
    for (const name of this.pinnedNames()) {
      if (this.pinReport.adopted.includes(name)) continue;
      let path = join(this.pinOpts!.dir, name);
      if (this.pinReport.replaced.includes(name)) {
        path = nextPinPath(path);
        rmSync(path, { force: true }); // left by an upgrade that stopped half-way
      }
      const pinRc = lb.objPin(lb.mapFd(this.mapHandle(name).handle), path);
      if (pinRc < 0) throw errnoError(`pin map ${name} at ${path}`, pinRc, ErrorCode.MapOp, bpffsHint(pinRc));
      if (!this.pinReport.replaced.includes(name)) this.pinReport.created.push(name);
    }
  }

  private closeAdoptedFds(): void {
    // libbpf dup()s reused FDs, so ours can go.
    for (const fd of this.adoptedFds) libbpf().close(fd);
    this.adoptedFds = [];
  }

  private mapHandle(name: string): MapHandle {
    const m = this.mapHandles.get(name);
    if (!m) {
      const known = [...this.mapHandles.keys()].join(', ');
      throw new FerryError({ code: ErrorCode.NotFound, op: `find map ${name} in ${this.path}`, cause: 'no such map', hint: `maps: ${known}` });
    }
    return m;
  }

  mapNames(): string[] {
    return [...this.mapHandles.values()].filter((m) => !m.internal).map((m) => m.name);
  }

  /**
   * A typed view of a loaded map. The codecs are checked against this object's BTF for the
   * map's key and value types. The FD stays owned by the object.
   */
  map<K, V>(name: string, key: Codec<K>, value: Codec<V>, opts: Pick<MapOptions, 'sizeSetting' | 'sparse'> = {}): BpfMap<K, V> {
    if (!this.loaded) throw new FerryError({ code: ErrorCode.ObjectLoad, op: `map ${name}`, cause: 'the object is not loaded yet' });
    const lb = libbpf();
    const m = this.mapHandle(name);
    if (m.keyTypeId) assertLayout(`map ${name} key`, key as Codec<unknown>, this.btf, m.keyTypeId);
    if (m.valueTypeId) assertLayout(`map ${name} value`, value as Codec<unknown>, this.btf, m.valueTypeId);
    return new BpfMap(lb.mapFd(m.handle), key, value, { ...opts, ownsFd: false });
  }

  program(name: string): Program {
    if (!this.loaded) throw new FerryError({ code: ErrorCode.ObjectLoad, op: `program ${name}`, cause: 'the object is not loaded yet' });
    const p = this.programs().find((x) => x.name === name);
    if (!p) {
      throw new FerryError({ code: ErrorCode.NotFound, op: `find program ${name} in ${this.path}`, cause: 'no such program', hint: `programs: ${this.programs().map((x) => x.name).join(', ')}` });
    }
    return p;
  }

  programs(): Program[] {
    const lb = libbpf();
    const out: Program[] = [];
    for (let p = lb.objectNextProgram(this.h, null); p; p = lb.objectNextProgram(this.h, p)) {
      out.push({ name: lb.programName(p), section: lb.programSectionName(p), type: lb.programType(p), fd: lb.programFd(p), handle: p });
    }
    return out;
  }

  close(): void {
    if (!this.handle) return;
    this.closeAdoptedFds();
    libbpf().objectClose(this.handle);
    this.handle = null;
    untrack(this);
  }
}

export function kernelBtf(id: number): Btf {
  const lb = libbpf();
  const ptr = lb.btfLoadFromKernelById(id);
  if (!ptr) throw errnoError(`load btf ${id} from the kernel`, lb.errno(), ErrorCode.Layout);
  try {
    return Btf.parse(lb.btfRawData(ptr));
  } finally {
    lb.btfFree(ptr);
  }
}

const EINTR = 4;
const EAGAIN = 11;

function warnings(messages: LibbpfMessage[]): string[] {
  return messages
    .filter((m) => m.level === 0)
    .map((m) => m.text.trim().replace(/^libbpf: /, ''))
    .filter((t) => !t.includes('-- BEGIN PROG LOAD LOG --'));
}

/**
 * The warning that names the root cause: libbpf follows it with "failed to load object"
 * (the whole step failed) and may precede it with an advisory about RLIMIT_MEMLOCK, which
 * kernels since 5.11 no longer need.
 */
function firstWarning(messages: LibbpfMessage[]): string | undefined {
  const all = warnings(messages);
  return all.find((t) => !/^Failed to bump RLIMIT_MEMLOCK|^failed to (load|open) object/.test(t)) ?? all.at(-1);
}

/** Exported for tests. */
export function loadError(path: string, rc: number, messages: LibbpfMessage[]): FerryError {
  const verifier = parseVerifierFailure(messages.map((m) => m.text).join(''));
  if (verifier && (Math.abs(rc) === EAGAIN || Math.abs(rc) === EINTR)) {
    // The verifier gives up when a signal is pending, and libbpf's retries met one each
    // time: not a rejection. A CPU profiler's SIGPROF (node --cpu-prof) does this.
    return new FerryError({
      code: ErrorCode.ObjectLoad,
      op: `load program ${verifier.program} from ${path}`,
      cause: `the verifier was interrupted by signals on every try (${errnoMessage(rc)}); the program itself was not rejected`,
      hint: 'load it from a process that does not receive frequent signals (no CPU profiler)',
      errno: Math.abs(rc),
      detail: verifier.log,
    });
  }
  if (verifier) {
    return new FerryError({
      code: ErrorCode.Verifier,
      op: `load program ${verifier.program} from ${path}`,
      cause: `the verifier rejected it:\n${verifier.relevant.map((l) => `    ${l}`).join('\n')}\n`,
      hint: `${verifier.omitted} earlier lines omitted; the full log is in the error's detail`,
      errno: Math.abs(rc),
      detail: verifier.log,
    });
  }
  const last = firstWarning(messages);
  return new FerryError({
    code: codeForErrno(rc, ErrorCode.ObjectLoad),
    op: `load ${path}`,
    cause: last ? `${errnoMessage(rc)}: ${last}` : errnoMessage(rc),
    hint: errnoHint(rc),
    errno: Math.abs(rc),
  });
}
