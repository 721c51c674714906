// BPF_PROG_TEST_RUN: run a loaded program on a packet (or context) without a device.
import { ErrorCode, FerryError, errnoError } from '../errors.js';
import { libbpf } from './libbpf.js';
import type { Program } from './object.js';
import { xdpContext } from './skb-context.js';

export interface TestRunInput {
  data: Buffer;
  /** Optional context (for tc: a struct __sk_buff, e.g. to set ifindex or mark). */
  ctx?: Buffer;
  /** Run this many times (a benchmark); the packet out is from the last run. */
  repeat?: number;
  /** Room for the program to grow the packet (encapsulation). */
  headroom?: number;
}

export interface TestRunResult {
  retval: number;
  data: Buffer;
  ctx: Buffer | undefined;
  /** Mean nanoseconds per run, as measured by the kernel. */
  durationNs: number;
}

/**
 * Offsets in libbpf's struct bpf_test_run_opts (libbpf 1.1+). A unit test compiles a C
 * program against bpf/bpf.h and checks every one of these.
 */
export const TEST_RUN_OPTS = {
  size: 80, sz: 0, data_in: 8, data_out: 16, data_size_in: 24, data_size_out: 28,
  ctx_in: 32, ctx_out: 40, ctx_size_in: 48, ctx_size_out: 52, retval: 56, repeat: 60, duration: 64,
  flags: 68, cpu: 72, batch_size: 76,
} as const;

/** BPF_F_TEST_XDP_LIVE_FRAMES (linux/bpf.h): XDP verdicts act, as in a driver. */
const TEST_XDP_LIVE_FRAMES = 1 << 1;

/** A struct bpf_test_run_opts pointing at the buffers (the caller keeps them alive until the syscall returned). */
function testRunOpts(o: { dataIn: Buffer; dataOut?: Buffer; ctxIn?: Buffer; ctxOut?: Buffer; repeat: number; flags?: number; batchSize?: number }): Buffer {
  const T = TEST_RUN_OPTS;
  const lb = libbpf();
  const opts = Buffer.alloc(T.size);
  opts.writeBigUInt64LE(BigInt(T.size), T.sz);
  opts.writeBigUInt64LE(lb.addressOf(o.dataIn), T.data_in);
  opts.writeUInt32LE(o.dataIn.length, T.data_size_in);
  if (o.dataOut) {
    opts.writeBigUInt64LE(lb.addressOf(o.dataOut), T.data_out);
    opts.writeUInt32LE(o.dataOut.length, T.data_size_out);
  }
  if (o.ctxIn) {
    opts.writeBigUInt64LE(lb.addressOf(o.ctxIn), T.ctx_in);
    opts.writeUInt32LE(o.ctxIn.length, T.ctx_size_in);
  }
  if (o.ctxOut) {
    opts.writeBigUInt64LE(lb.addressOf(o.ctxOut), T.ctx_out);
    opts.writeUInt32LE(o.ctxOut.length, T.ctx_size_out);
  }
  opts.writeInt32LE(o.repeat, T.repeat);
  opts.writeUInt32LE(o.flags ?? 0, T.flags);
  opts.writeUInt32LE(o.batchSize ?? 0, T.batch_size);
  return opts;
}

export function testRun(program: Program, input: TestRunInput): TestRunResult {
  const T = TEST_RUN_OPTS;
  const lb = libbpf();
  const op = `test-run ${program.name}`;
  if (input.data.length === 0) throw new FerryError({ code: ErrorCode.TestRun, op, cause: 'empty packet' });
  const dataIn = Buffer.from(input.data);
  const dataOut = Buffer.alloc(dataIn.length + (input.headroom ?? 256));
  const ctxIn = input.ctx ? Buffer.from(input.ctx) : undefined;
  const ctxOut = ctxIn ? Buffer.alloc(ctxIn.length) : undefined;
  const opts = testRunOpts({ dataIn, dataOut, ...(ctxIn && ctxOut ? { ctxIn, ctxOut } : {}), repeat: input.repeat ?? 1 });
  const rc = lb.progTestRun(program.fd, opts);
  // Keep the buffers alive until the syscall returned: the opts hold raw addresses.
  void [dataIn, dataOut, ctxIn, ctxOut];
  if (rc < 0) throw errnoError(op, rc, ErrorCode.TestRun);
  const outSize = opts.readUInt32LE(T.data_size_out);
  return {
    retval: opts.readInt32LE(T.retval), // signed: TC_ACT_UNSPEC is -1
    data: Buffer.from(dataOut.subarray(0, outSize)),
    ctx: ctxOut ? Buffer.from(ctxOut.subarray(0, opts.readUInt32LE(T.ctx_size_out))) : undefined,
    durationNs: opts.readUInt32LE(T.duration),
  };
}

export interface LiveFramesInput {
  /** The frame every run starts from (the kernel writes it into each page once). */
  data: Buffer;
  /** The device the frames arrive on, by index in the calling thread's netns. */
  ifindex: number;
  frames: number;
  /** Frames per batch (the kernel's default: 64). */
  batchSize?: number;
}

/**
 * XDP's live-frames mode: `frames` runs of an XDP program whose verdicts act as in a
 * driver receiving on `ifindex` (XDP_TX and XDP_REDIRECT transmit, XDP_PASS hands the frame
 * to the stack), in the calling thread, which the whole run occupies. A packet source in
 * the kernel for the benchmarks. Returns the run's wall time.
 */
export function runLiveFrames(program: Program, input: LiveFramesInput): { wallNs: number } {
  const lb = libbpf();
  const op = `live frames ${program.name}`;
  if (!Number.isInteger(input.frames) || input.frames < 1 || input.frames > 0x7fffffff) {
    throw new FerryError({ code: ErrorCode.TestRun, op, cause: `frames ${input.frames} is not in 1..2^31-1` });
  }
  const dataIn = Buffer.from(input.data);
  const ctxIn = xdpContext(input.ifindex, dataIn.length);
  const opts = testRunOpts({ dataIn, ctxIn, repeat: input.frames, flags: TEST_XDP_LIVE_FRAMES, batchSize: input.batchSize ?? 0 });
  const t0 = process.hrtime.bigint();
  const rc = lb.progTestRun(program.fd, opts);
  const wallNs = Number(process.hrtime.bigint() - t0);
  void [dataIn, ctxIn];
  if (rc === -1 && process.getuid?.() === 0) {
    // EPERM as root: the kernel itself refuses the mode (seen on 6.18.44-fc-v1300).
    throw new FerryError({ code: ErrorCode.Permission, op, cause: 'this kernel refuses XDP live-frames test runs (EPERM as root)', hint: 'the packet rate benchmarks need a kernel that allows BPF_F_TEST_XDP_LIVE_FRAMES' });
  }
  if (rc < 0) throw errnoError(op, rc, ErrorCode.TestRun);
  return { wallNs };
}
