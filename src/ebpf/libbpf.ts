// The only file that declares libbpf's C API to koffi. Everything else in src/ebpf calls
// these typed functions. libbpf >= 1.0 semantics: int results are -errno, pointer results
// are NULL with errno set.
import { createRequire } from 'node:module';
import { ErrorCode, FerryError } from '../errors.js';

const require = createRequire(import.meta.url);

// koffi has no bundled types we rely on; keep its surface small and typed here.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Koffi = any;
export type Pointer = unknown; // an opaque native pointer handed back by koffi

let koffiModule: Koffi | undefined;
function koffi(): Koffi {
  if (!koffiModule) koffiModule = require('koffi');
  return koffiModule;
}

/** libbpf opts struct layouts this file builds by hand; a unit test checks them against bpf/bpf.h. */
export const BATCH_OPTS = { size: 24, sz: 0, elem_flags: 8, flags: 16 } as const;
export const MAP_CREATE_OPTS = { size: 48, sz: 0, map_flags: 28 } as const;
export const TC_HOOK_SIZE = 24;
export const TC_OPTS_SIZE = 32;

export const BPF_TC_INGRESS = 1;
export const BPF_TC_EGRESS = 2;

export type { Libbpf, TcHook, TcOpts } from './libbpf-types.js';
import type { Libbpf } from './libbpf-types.js';

/** A libbpf message routed through the print callback. level: 0 warn, 1 info, 2 debug. */
export interface LibbpfMessage {
  level: number;
  text: string;
}
type MessageSink = (m: LibbpfMessage) => void;
const sinks: MessageSink[] = [];

/**
 * Run fn and collect every message libbpf printed during it. libbpf prints the verifier
 * log and the reason behind most failures this way, so errors can quote them.
 */
export function captureLibbpfMessages<T>(fn: () => T): { result: T; messages: LibbpfMessage[] } {
  const messages: LibbpfMessage[] = [];
  const sink: MessageSink = (m) => messages.push(m);
  sinks.push(sink);
  try {
    return { result: fn(), messages };
  } finally {
    sinks.splice(sinks.indexOf(sink), 1);
  }
}

let bound: Libbpf | undefined;

export function libbpf(): Libbpf {
  if (!bound) bound = bind();
  return bound;
}

function bind(): Libbpf {
  const k = koffi();
  let lib: Koffi;
  let libc: Koffi;
  const name = process.env.FERRY_LIBBPF ?? 'libbpf.so.1';
  try {
    lib = k.load(name);
    libc = k.load('libc.so.6');
  } catch (e) {
    throw new FerryError({
      code: ErrorCode.LibbpfMissing,
      op: `load ${name}`,
      cause: (e as Error).message,
      hint: 'install libbpf 1.x (Debian: apt-get install libbpf1), or run make setup',
    });
  }
  const f = (sig: string) => lib.func(sig);

  k.opaque('bpf_object');
  k.opaque('bpf_map');
  k.opaque('bpf_program');
  k.opaque('bpf_link');
  k.opaque('btf');
  const hookT = k.struct('bpf_tc_hook', { sz: 'size_t', ifindex: 'int', attach_point: 'int', parent: 'uint32_t' });
  const optsT = k.struct('bpf_tc_opts', {
    sz: 'size_t', prog_fd: 'int', flags: 'uint32_t', prog_id: 'uint32_t', handle: 'uint32_t', priority: 'uint32_t',
  });
  if (k.sizeof(hookT) !== TC_HOOK_SIZE || k.sizeof(optsT) !== TC_OPTS_SIZE) {
    throw new FerryError({ code: ErrorCode.LibbpfMissing, op: 'bind libbpf', cause: 'unexpected tc opts struct sizes', hint: 'unsupported architecture' });
  }

  const vsnprintf = libc.func('int vsnprintf(_Out_ uint8_t *buf, size_t n, const char *fmt, void *ap)');
  const printProto = k.proto('int ferry_libbpf_print(int level, const char *fmt, void *ap)');
  const printBuf = Buffer.alloc(64 * 1024);
  const printCb = k.register((level: number, fmt: string, ap: unknown) => {
    if (sinks.length === 0) return 0;
    const n = vsnprintf(printBuf, printBuf.length, fmt, ap);
    const text = printBuf.subarray(0, Math.max(0, Math.min(n, printBuf.length - 1))).toString('utf8');
    for (const s of sinks) s({ level, text });
    return 0;
  }, k.pointer(printProto));
  f('void *libbpf_set_print(ferry_libbpf_print *fn)')(printCb);

  const major = f('uint32_t libbpf_major_version()')();
  const minor = f('uint32_t libbpf_minor_version()')();

  const numCpus = f('int libbpf_num_possible_cpus()');
  const openFile = f('bpf_object *bpf_object__open_file(const char *path, void *opts)');
  const objLoad = f('int bpf_object__load(bpf_object *obj)');
  const objClose = f('void bpf_object__close(bpf_object *obj)');
  const objBtf = f('btf *bpf_object__btf(bpf_object *obj)');
  const nextMap = f('bpf_map *bpf_object__next_map(bpf_object *obj, bpf_map *prev)');
  const nextProg = f('bpf_program *bpf_object__next_program(bpf_object *obj, bpf_program *prev)');
  const btfRaw = f('void *btf__raw_data(btf *btf, _Out_ uint32_t *size)');
  const btfKernel = f('btf *btf__load_from_kernel_by_id(uint32_t id)');
  const btfFree = f('void btf__free(btf *btf)');
  const mapName = f('const char *bpf_map__name(bpf_map *map)');
  const mapType = f('int bpf_map__type(bpf_map *map)');
  const mapKeySize = f('uint32_t bpf_map__key_size(bpf_map *map)');
  const mapValueSize = f('uint32_t bpf_map__value_size(bpf_map *map)');
  const mapMax = f('uint32_t bpf_map__max_entries(bpf_map *map)');
  const mapSetMax = f('int bpf_map__set_max_entries(bpf_map *map, uint32_t n)');
  const mapFd = f('int bpf_map__fd(bpf_map *map)');
  const mapReuse = f('int bpf_map__reuse_fd(bpf_map *map, int fd)');
  const mapInternal = f('bool bpf_map__is_internal(bpf_map *map)');
  const mapKeyId = f('uint32_t bpf_map__btf_key_type_id(bpf_map *map)');
  const mapValueId = f('uint32_t bpf_map__btf_value_type_id(bpf_map *map)');
  const mapInit = f('void *bpf_map__initial_value(bpf_map *map, _Out_ size_t *psize)');
  const mapSetInit = f('int bpf_map__set_initial_value(bpf_map *map, const void *data, size_t size)');
  const progName = f('const char *bpf_program__name(bpf_program *prog)');
  const progSec = f('const char *bpf_program__section_name(bpf_program *prog)');
  const progLogLevel = f('int bpf_program__set_log_level(bpf_program *prog, uint32_t level)');
  const progLogBuf = f('int bpf_program__set_log_buf(bpf_program *prog, void *buf, size_t size)');
  const progFd = f('int bpf_program__fd(bpf_program *prog)');
  const progType = f('int bpf_program__type(bpf_program *prog)');
  const attachXdp = f('bpf_link *bpf_program__attach_xdp(bpf_program *prog, int ifindex)');
  const xdpAttach = f('int bpf_xdp_attach(int ifindex, int prog_fd, uint32_t flags, void *opts)');
  const xdpDetach = f('int bpf_xdp_detach(int ifindex, uint32_t flags, void *opts)');
  const xdpQueryId = f('int bpf_xdp_query_id(int ifindex, int flags, _Out_ uint32_t *prog_id)');
  const attachCgroup = f('bpf_link *bpf_program__attach_cgroup(bpf_program *prog, int cgroup_fd)');
  const attachIter = f('bpf_link *bpf_program__attach_iter(bpf_program *prog, void *opts)');
  const iterCreate = f('int bpf_iter_create(int link_fd)');
  const linkFd = f('int bpf_link__fd(bpf_link *link)');
  const linkPin = f('int bpf_link__pin(bpf_link *link, const char *path)');
  const linkDestroy = f('int bpf_link__destroy(bpf_link *link)');
  const linkDisconnect = f('void bpf_link__disconnect(bpf_link *link)');
  const tcHookCreate = f('int bpf_tc_hook_create(bpf_tc_hook *hook)');
  const tcHookDestroy = f('int bpf_tc_hook_destroy(bpf_tc_hook *hook)');
  const tcAttach = f('int bpf_tc_attach(bpf_tc_hook *hook, _Inout_ bpf_tc_opts *opts)');
  const tcDetach = f('int bpf_tc_detach(bpf_tc_hook *hook, bpf_tc_opts *opts)');
  const tcQuery = f('int bpf_tc_query(bpf_tc_hook *hook, _Inout_ bpf_tc_opts *opts)');
  // Its opts as libbpf 1.1 knows them (sz, flags, replace_prog_fd): later versions accept that size.
  const progAttach = f('int bpf_prog_attach_opts(int prog_fd, int target, int type, void *opts)');
  const progDetach = f('int bpf_prog_detach2(int prog_fd, int target, int type)');
  const progQuery = f('int bpf_prog_query(int target, int type, uint32_t query_flags, _Out_ uint32_t *attach_flags, _Out_ uint32_t *ids, _Inout_ uint32_t *count)');
  const lookup = f('int bpf_map_lookup_elem(int fd, void *key, void *value)');
  const update = f('int bpf_map_update_elem(int fd, void *key, void *value, uint64_t flags)');
  const del = f('int bpf_map_delete_elem(int fd, void *key)');
  const nextKey = f('int bpf_map_get_next_key(int fd, void *key, void *next)');
  const lookupBatch = f('int bpf_map_lookup_batch(int fd, void *in_batch, void *out_batch, void *keys, void *values, void *count, void *opts)');
  const updateBatch = f('int bpf_map_update_batch(int fd, void *keys, void *values, void *count, void *opts)');
  const deleteBatch = f('int bpf_map_delete_batch(int fd, void *keys, void *count, void *opts)');
  const objPin = f('int bpf_obj_pin(int fd, const char *path)');
  const mapCreate = f('int bpf_map_create(int type, const char *name, uint32_t key_size, uint32_t value_size, uint32_t max_entries, void *opts)');
  const objGet = f('int bpf_obj_get(const char *path)');
  const mapFdById = f('int bpf_map_get_fd_by_id(uint32_t id)');
  const progFdById = f('int bpf_prog_get_fd_by_id(uint32_t id)');
  k.opaque('ring_buffer');
  const sampleProto = k.proto('int ferry_rb_sample(void *ctx, void *data, size_t size)');
  const rbNew = f('ring_buffer *ring_buffer__new(int map_fd, ferry_rb_sample *cb, void *ctx, void *opts)');
  const rbPoll = f('int ring_buffer__poll(ring_buffer *rb, int timeout_ms)');
  const rbFree = f('void ring_buffer__free(ring_buffer *rb)');
  const rbCallbacks = new Map<unknown, unknown>();
  const objInfo = f('int bpf_obj_get_info_by_fd(int fd, void *info, _Inout_ uint32_t *len)');
  const testRun = f('int bpf_prog_test_run_opts(int fd, void *opts)');
  const closeFd = libc.func('int close(int fd)');
  const memcpyOut = libc.func('void *memcpy(_Out_ uint8_t *dst, void *src, size_t n)');
  const memcpyIn = libc.func('void *memcpy(void *dst, const uint8_t *src, size_t n)');
  const identity = libc.func('uintptr_t memchr(void *p, int c, size_t n)');

  const batchOpts = (elemFlags: number): Buffer => {
    const b = Buffer.alloc(BATCH_OPTS.size);
    b.writeBigUInt64LE(BigInt(BATCH_OPTS.size), BATCH_OPTS.sz);
    b.writeBigUInt64LE(BigInt(elemFlags), BATCH_OPTS.elem_flags);
    return b;
  };

  return {
    version: `${major}.${minor}`,
    numPossibleCpus: () => numCpus(),
    errno: () => k.errno(),
    objectOpenFile: (path) => openFile(path, null),
    objectLoad: (obj) => objLoad(obj),
    objectClose: (obj) => objClose(obj),
    objectBtf: (obj) => objBtf(obj),
    objectNextMap: (obj, prev) => nextMap(obj, prev),
    objectNextProgram: (obj, prev) => nextProg(obj, prev),
    btfRawData: (btf) => {
      const size = [0];
      const ptr = btfRaw(btf, size);
      if (!ptr) throw new FerryError({ code: ErrorCode.ObjectOpen, op: 'btf raw data', cause: 'libbpf returned no BTF bytes' });
      return Buffer.from(k.decode(ptr, k.array('uint8_t', size[0]!)) as Uint8Array);
    },
    btfLoadFromKernelById: (id) => btfKernel(id),
    btfFree: (btf) => btfFree(btf),
    mapName: (m) => mapName(m),
    mapType: (m) => mapType(m),
    mapKeySize: (m) => mapKeySize(m),
    mapValueSize: (m) => mapValueSize(m),
    mapMaxEntries: (m) => mapMax(m),
    mapSetMaxEntries: (m, n) => mapSetMax(m, n),
    mapFd: (m) => mapFd(m),
    mapReuseFd: (m, fd) => mapReuse(m, fd),
    mapIsInternal: (m) => mapInternal(m),
    mapBtfKeyTypeId: (m) => mapKeyId(m),
    mapBtfValueTypeId: (m) => mapValueId(m),
    mapInitialValue: (m) => {
      const size = [0];
      const ptr = mapInit(m, size);
      return ptr ? { ptr, size: Number(size[0]) } : null;
    },
    mapSetInitialValue: (m, data) => mapSetInit(m, data, data.length),
    programName: (p) => progName(p),
    programSectionName: (p) => progSec(p),
    programSetLog: (p, level, buf) => progLogLevel(p, level) || progLogBuf(p, buf, buf.length),
    programFd: (p) => progFd(p),
    programType: (p) => progType(p),
    programAttachXdp: (p, ifindex) => attachXdp(p, ifindex),
    programAttachCgroup: (p, fd) => attachCgroup(p, fd),
    xdpAttach: (ifindex, fd, flags) => xdpAttach(ifindex, fd, flags, null),
    xdpDetach: (ifindex, flags) => xdpDetach(ifindex, flags, null),
    xdpQueryId: (ifindex, flags) => {
      const id = [0];
      const rc = xdpQueryId(ifindex, flags, id);
      return { rc, id: Number(id[0]) };
    },
    programAttachIter: (p) => attachIter(p, null),
    iterCreate: (fd) => iterCreate(fd),
    linkFd: (l) => linkFd(l),
    linkPin: (l, path) => linkPin(l, path),
    linkDestroy: (l) => linkDestroy(l),
    linkDisconnect: (l) => linkDisconnect(l),
    tcHookCreate: (h) => tcHookCreate(h),
    tcHookDestroy: (h) => tcHookDestroy(h),
    tcAttach: (h, o) => tcAttach(h, o),
    tcDetach: (h, o) => tcDetach(h, o),
    tcQuery: (h, o) => tcQuery(h, o),
    progAttach: (fd, target, type, flags, replaceFd) => {
      const opts = Buffer.alloc(16);
      opts.writeBigUInt64LE(16n, 0);
      opts.writeUInt32LE(flags, 8);
      opts.writeInt32LE(replaceFd, 12);
      return progAttach(fd, target, type, opts);
    },
    progDetach: (fd, target, type) => progDetach(fd, target, type),
    progQuery: (target, type, ids) => {
      const count = [ids.length];
      const rc = progQuery(target, type, 0, [0], ids, count);
      return { rc, count: Number(count[0]) };
    },
    mapLookupElem: (fd, key, value) => lookup(fd, key, value),
    mapUpdateElem: (fd, key, value, flags) => update(fd, key, value, flags),
    mapDeleteElem: (fd, key) => del(fd, key),
    mapGetNextKey: (fd, key, next) => nextKey(fd, key, next),
    mapLookupBatch: (fd, inB, outB, keys, values, count) => lookupBatch(fd, inB, outB, keys, values, count, batchOpts(0)),
    mapUpdateBatch: (fd, keys, values, count, flags) => updateBatch(fd, keys, values, count, batchOpts(flags)),
    mapDeleteBatch: (fd, keys, count) => deleteBatch(fd, keys, count, batchOpts(0)),
    objPin: (fd, path) => objPin(fd, path),
    mapCreate: (type, name, keySize, valueSize, maxEntries, flags) => {
      const opts = Buffer.alloc(MAP_CREATE_OPTS.size);
      opts.writeBigUInt64LE(BigInt(MAP_CREATE_OPTS.size), MAP_CREATE_OPTS.sz);
      opts.writeUInt32LE(flags, MAP_CREATE_OPTS.map_flags);
      return mapCreate(type, name, keySize, valueSize, maxEntries, opts);
    },
    objGet: (path) => objGet(path),
    mapGetFdById: (id) => mapFdById(id),
    progGetFdById: (id) => progFdById(id),
    ringBufferNew: (mapFd, onSample) => {
      const cb = k.register((_ctx: unknown, data: unknown, size: number) => {
        const out = Buffer.alloc(Number(size));
        memcpyOut(out, data, Number(size));
        onSample(out);
        return 0;
      }, k.pointer(sampleProto));
      const rb = rbNew(mapFd, cb, null, null);
      if (!rb) {
        k.unregister(cb);
        return null;
      }
      rbCallbacks.set(rb, cb);
      return rb;
    },
    ringBufferPoll: (rb, timeoutMs) => rbPoll(rb, timeoutMs),
    ringBufferFree: (rb) => {
      rbFree(rb);
      const cb = rbCallbacks.get(rb);
      if (cb) k.unregister(cb);
      rbCallbacks.delete(rb);
    },
    objGetInfoByFd: (fd, info) => objInfo(fd, info, [info.length]),
    progTestRun: (fd, opts) => testRun(fd, opts),
    readMemory: (ptr, len) => {
      const out = Buffer.alloc(len);
      if (len > 0) memcpyOut(out, ptr, len);
      return out;
    },
    writeMemory: (ptr, data) => {
      if (data.length > 0) memcpyIn(ptr, data, data.length);
    },
    // memchr(buf, buf[0], 1) returns buf's own address: a portable way to learn where
    // koffi placed a Buffer, needed for pointers stored inside opts structs.
    addressOf: (buf) => {
      if (buf.length === 0) return 0n;
      return BigInt(identity(buf, buf[0]!, 1));
    },
    close: (fd) => closeFd(fd),
  };
}
