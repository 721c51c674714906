// The typed surface of libbpf that libbpf.ts binds (the koffi declarations stay there).
import type { Pointer } from './libbpf.js';

export interface TcHook {
  sz: number;
  ifindex: number;
  attach_point: number;
  parent: number;
}
export interface TcOpts {
  sz: number;
  prog_fd: number;
  flags: number;
  prog_id: number;
  handle: number;
  priority: number;
}

/** Typed libbpf functions, bound lazily on first use. */
export interface Libbpf {
  version: string;
  numPossibleCpus(): number;
  errno(): number;
  objectOpenFile(path: string): Pointer | null;
  objectLoad(obj: Pointer): number;
  objectClose(obj: Pointer): void;
  objectBtf(obj: Pointer): Pointer | null;
  objectNextMap(obj: Pointer, prev: Pointer | null): Pointer | null;
  objectNextProgram(obj: Pointer, prev: Pointer | null): Pointer | null;
  btfRawData(btf: Pointer): Buffer;
  btfLoadFromKernelById(id: number): Pointer | null;
  btfFree(btf: Pointer): void;
  mapName(map: Pointer): string;
  mapType(map: Pointer): number;
  mapKeySize(map: Pointer): number;
  mapValueSize(map: Pointer): number;
  mapMaxEntries(map: Pointer): number;
  mapSetMaxEntries(map: Pointer, n: number): number;
  mapFd(map: Pointer): number;
  mapReuseFd(map: Pointer, fd: number): number;
  mapIsInternal(map: Pointer): boolean;
  mapBtfKeyTypeId(map: Pointer): number;
  mapBtfValueTypeId(map: Pointer): number;
  mapInitialValue(map: Pointer): { ptr: Pointer; size: number } | null;
  mapSetInitialValue(map: Pointer, data: Buffer): number;
  programName(prog: Pointer): string;
  programSectionName(prog: Pointer): string;
  /** The verifier's log for this program's load into `buf` at `level` (4: statistics only). */
  programSetLog(prog: Pointer, level: number, buf: Buffer): number;
  programFd(prog: Pointer): number;
  programType(prog: Pointer): number;
  programAttachXdp(prog: Pointer, ifindex: number): Pointer | null;
  /** Attach through netlink (no link: it stays until replaced or detached). */
  xdpAttach(ifindex: number, progFd: number, flags: number): number;
  xdpDetach(ifindex: number, flags: number): number;
  /** The program attached in the mode `flags` names (0: none), or <0. */
  xdpQueryId(ifindex: number, flags: number): { rc: number; id: number };
  programAttachCgroup(prog: Pointer, cgroupFd: number): Pointer | null;
  /** An iterator program as a link (no options: the iterator's default target). */
  programAttachIter(prog: Pointer): Pointer | null;
  /** A new read of an iterator link: an fd whose read() runs the program over the objects. */
  iterCreate(linkFd: number): number;
  linkFd(link: Pointer): number;
  linkPin(link: Pointer, path: string): number;
  linkDestroy(link: Pointer): number;
  linkDisconnect(link: Pointer): void;
  tcHookCreate(hook: TcHook): number;
  tcHookDestroy(hook: TcHook): number;
  tcAttach(hook: TcHook, opts: TcOpts): number;
  tcDetach(hook: TcHook, opts: TcOpts): number;
  /** Fills opts.prog_id with the program of the filter at opts.handle and opts.priority. */
  tcQuery(hook: TcHook, opts: TcOpts): number;
  /** BPF_PROG_ATTACH/DETACH/QUERY on a target (an ifindex for tcx), without a link: it stays after this process. */
  progAttach(progFd: number, target: number, type: number, flags: number, replaceFd: number): number;
  progDetach(progFd: number, target: number, type: number): number;
  progQuery(target: number, type: number, ids: Uint32Array): { rc: number; count: number };
  mapLookupElem(fd: number, key: Buffer, value: Buffer): number;
  mapUpdateElem(fd: number, key: Buffer, value: Buffer, flags: number): number;
  mapDeleteElem(fd: number, key: Buffer): number;
  mapGetNextKey(fd: number, key: Buffer | null, next: Buffer): number;
  mapLookupBatch(fd: number, inBatch: Buffer | null, outBatch: Buffer, keys: Buffer, values: Buffer, count: Buffer): number;
  mapUpdateBatch(fd: number, keys: Buffer, values: Buffer, count: Buffer, flags: number): number;
  mapDeleteBatch(fd: number, keys: Buffer, count: Buffer): number;
  objPin(fd: number, path: string): number;
  mapCreate(type: number, name: string, keySize: number, valueSize: number, maxEntries: number, flags: number): number;
  objGet(path: string): number;
  mapGetFdById(id: number): number;
  progGetFdById(id: number): number;
  ringBufferNew(mapFd: number, onSample: (data: Buffer) => void): Pointer | null;
  ringBufferPoll(rb: Pointer, timeoutMs: number): number;
  ringBufferFree(rb: Pointer): void;
  objGetInfoByFd(fd: number, info: Buffer): number;
  progTestRun(fd: number, opts: Buffer): number;
  /** Copy `len` bytes of native memory at `ptr` into a Buffer. */
  readMemory(ptr: Pointer, len: number): Buffer;
  /** Copy a Buffer into native memory at `ptr`. */
  writeMemory(ptr: Pointer, data: Buffer): void;
  /** Address of a Buffer's memory, for pointer fields inside opts structs. */
  addressOf(buf: Buffer): bigint;
  close(fd: number): number;
}
