// Packet fixtures for BPF_PROG_TEST_RUN: {description, input, expected verdict, expected
// output}. On mismatch they print a layer-by-layer diff. The same fixtures are benchmarks:
// run them with a repeat count and read the kernel's per-run time.
import type { Program } from '../../src/ebpf/object.js';
import { testRun, type TestRunResult } from '../../src/ebpf/test-run.js';
import { diffPackets, formatLayers } from '../../src/packet/diff.js';
import { decodePacket } from '../../src/packet/decode.js';

export const TcVerdict = { OK: 0, RECLASSIFY: 1, SHOT: 2, PIPE: 3, STOLEN: 4, QUEUED: 5, REPEAT: 6, REDIRECT: 7 } as const;
export const XdpVerdict = { ABORTED: 0, DROP: 1, PASS: 2, TX: 3, REDIRECT: 4 } as const;

export interface PacketFixture {
  description: string;
  input: Buffer;
  /** A struct __sk_buff (tc) or xdp_md (xdp) context, when the program reads it. */
  ctx?: Buffer;
  expect: {
    verdict: number;
    /** The packet after the program; omitted means "unchanged". */
    output?: Buffer;
  };
}

export interface FixtureOutcome {
  ok: boolean;
  result: TestRunResult;
  problems: string[];
}

function verdictName(v: number, names: Record<string, number>): string {
  const n = Object.entries(names).find(([, x]) => x === v);
  return n ? `${n[0]} (${v})` : String(v);
}

export function runFixture(program: Program, f: PacketFixture, opts: { repeat?: number; verdicts?: Record<string, number> } = {}): FixtureOutcome {
  const names = opts.verdicts ?? TcVerdict;
  const result = testRun(program, { data: f.input, ctx: f.ctx, repeat: opts.repeat });
  const problems: string[] = [];
  if (result.retval !== f.expect.verdict) {
    problems.push(`verdict: expected ${verdictName(f.expect.verdict, names)}, got ${verdictName(result.retval, names)}`);
  }
  const want = f.expect.output ?? f.input;
  const d = diffPackets(want, result.data);
  if (!d.equal) problems.push(...d.lines.map((l) => `packet ${l}`));
  return { ok: problems.length === 0, result, problems };
}

/** Run a fixture and throw a readable report when it does not hold. */
export function expectFixture(program: Program, f: PacketFixture, opts: { verdicts?: Record<string, number> } = {}): TestRunResult {
  const out = runFixture(program, f, opts);
  if (!out.ok) {
    throw new Error(
      `fixture "${f.description}" failed:\n  ${out.problems.join('\n  ')}\n--- got:\n${formatLayers(decodePacket(out.result.data))}`,
    );
  }
  return out.result;
}
