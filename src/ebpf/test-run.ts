// BPF_PROG_TEST_RUN: run a loaded program on a packet (or context) without a device.
import { ErrorCode, FerryError, errnoError } from '../errors.js';
import { libbpf } from './libbpf.js';
import type { Program } from './object.js';

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
} as const;

export function testRun(program: Program, input: TestRunInput): TestRunResult {
  const T = TEST_RUN_OPTS;
  const lb = libbpf();
  const op = `test-run ${program.name}`;
  if (input.data.length === 0) throw new FerryError({ code: ErrorCode.TestRun, op, cause: 'empty packet' });
  const dataIn = Buffer.from(input.data);
  const dataOut = Buffer.alloc(dataIn.length + (input.headroom ?? 256));
  const ctxIn = input.ctx ? Buffer.from(input.ctx) : undefined;
  const ctxOut = ctxIn ? Buffer.alloc(ctxIn.length) : undefined;
  const opts = Buffer.alloc(T.size);
  opts.writeBigUInt64LE(BigInt(T.size), T.sz);
  opts.writeBigUInt64LE(lb.addressOf(dataIn), T.data_in);
  opts.writeBigUInt64LE(lb.addressOf(dataOut), T.data_out);
  opts.writeUInt32LE(dataIn.length, T.data_size_in);
  opts.writeUInt32LE(dataOut.length, T.data_size_out);
  if (ctxIn && ctxOut) {
    opts.writeBigUInt64LE(lb.addressOf(ctxIn), T.ctx_in);
    opts.writeBigUInt64LE(lb.addressOf(ctxOut), T.ctx_out);
    opts.writeUInt32LE(ctxIn.length, T.ctx_size_in);
    opts.writeUInt32LE(ctxOut.length, T.ctx_size_out);
  }
  opts.writeInt32LE(input.repeat ?? 1, T.repeat);
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
