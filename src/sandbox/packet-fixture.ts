// Packet fixtures for BPF_PROG_TEST_RUN, as tables: {description, setup packets, input,
// expected verdict, output and counters}. The tests run them and print a layer-by-layer
// diff on mismatch; the benchmarks run the same fixtures with a repeat count and read the
// kernel's per-run time.
import type { Program } from '../ebpf/object.js';
import { testRun, type TestRunResult } from '../ebpf/test-run.js';
import { diffPackets, formatLayers } from '../packet/diff.js';
import { decodePacket } from '../packet/decode.js';

export const TcVerdict = { UNSPEC: -1, OK: 0, RECLASSIFY: 1, SHOT: 2, PIPE: 3, STOLEN: 4, QUEUED: 5, REPEAT: 6, REDIRECT: 7 } as const;
export const XdpVerdict = { ABORTED: 0, DROP: 1, PASS: 2, TX: 3, REDIRECT: 4 } as const;

export type TcProgram = 'tc_ingress' | 'tc_egress';

/** A packet run before the fixture's own, to build the state it needs (a SYN before its reply). */
export interface PacketStep {
  program: TcProgram;
  input: Buffer;
}

export interface PacketFixture {
  /** Short and stable: the benchmarks pick fixtures by it. */
  id: string;
  description: string;
  setup?: PacketStep[];
  program: TcProgram;
  input: Buffer;
  /** A struct __sk_buff (tc) or xdp_md (xdp) context, when the program reads it. */
  ctx?: Buffer;
  expect: {
    verdict: number;
    /** The packet after the program; omitted means "unchanged". */
    output?: Buffer;
    /** Counters the packet must have moved by one: STAT_… and DROP_… names. */
    counts?: string[];
  };
}

/** Where the fixtures run: the programs, and a way to read counters. */
export interface FixtureTarget {
  run(program: TcProgram, data: Buffer, repeat?: number): TestRunResult;
  /** Packets a STAT_… or DROP_… counter has seen. */
  counter(name: string): bigint;
}

/** The layers of `packet` whose checksum is wrong, as problems. */
export function checksumProblems(packet: Buffer): string[] {
  return decodePacket(packet)
    .filter((l) => 'checksumValid' in l.fields && l.fields.checksumValid !== true)
    .map((l) => `${l.name} checksum is wrong`);
}

/** The problems with `got` against `want`: layer differences and bad checksums. */
export function packetProblems(got: Buffer, want: Buffer): string[] {
  return [...diffPackets(want, got).lines.map((l) => `packet ${l}`), ...checksumProblems(got)];
}

/** Throw a readable report unless `got` is `want` with every checksum right. */
export function expectPacket(got: Buffer, want: Buffer): void {
  const problems = packetProblems(got, want);
  if (problems.length > 0) throw new Error(`packet differs:\n  ${problems.join('\n  ')}\n--- got:\n${formatLayers(decodePacket(got))}`);
}

function verdictName(v: number, names: Record<string, number>): string {
  const n = Object.entries(names).find(([, x]) => x === v);
  return n ? `${n[0]} (${v})` : String(v);
}

export interface FixtureOutcome {
  ok: boolean;
  result: TestRunResult;
  problems: string[];
}

/** Run a fixture (its setup first) and say what does not hold. */
export function runFixture(target: FixtureTarget, f: PacketFixture, opts: { repeat?: number } = {}): FixtureOutcome {
  for (const s of f.setup ?? []) target.run(s.program, s.input);
  const before = new Map((f.expect.counts ?? []).map((c) => [c, target.counter(c)]));
  const result = target.run(f.program, f.input, opts.repeat);
  const problems: string[] = [];
  if (result.retval !== f.expect.verdict) problems.push(`verdict: expected ${verdictName(f.expect.verdict, TcVerdict)}, got ${verdictName(result.retval, TcVerdict)}`);
  problems.push(...packetProblems(result.data, f.expect.output ?? f.input));
  if (!opts.repeat || opts.repeat <= 1) {
    for (const [c, n] of before) {
      const moved = target.counter(c) - n;
      if (moved !== 1n) problems.push(`counter ${c}: moved by ${moved}, expected 1`);
    }
  }
  return { ok: problems.length === 0, result, problems };
}

/** Run a fixture and throw a readable report when it does not hold. */
export function expectFixture(target: FixtureTarget, f: PacketFixture): TestRunResult {
  const out = runFixture(target, f);
  if (!out.ok) throw new Error(`fixture "${f.description}" failed:\n  ${out.problems.join('\n  ')}\n--- got:\n${formatLayers(decodePacket(out.result.data))}`);
  return out.result;
}

/** A single program run on its own (no counters), for loader and map tests. */
export function expectProgram(program: Program, f: { description: string; input: Buffer; ctx?: Buffer; expect: { verdict: number; output?: Buffer } }, verdicts: Record<string, number> = TcVerdict): TestRunResult {
  const result = testRun(program, { data: f.input, ctx: f.ctx });
  const problems: string[] = [];
  if (result.retval !== f.expect.verdict) problems.push(`verdict: expected ${verdictName(f.expect.verdict, verdicts)}, got ${verdictName(result.retval, verdicts)}`);
  problems.push(...diffPackets(f.expect.output ?? f.input, result.data).lines.map((l) => `packet ${l}`));
  if (problems.length > 0) throw new Error(`fixture "${f.description}" failed:\n  ${problems.join('\n  ')}\n--- got:\n${formatLayers(decodePacket(result.data))}`);
  return result;
}
