// What one call costs a tc program on this machine: a BPF-to-BPF call, a helper that calls
// nothing further, the checksum helper the datapath uses, and a hash map lookup, each 32
// times in a program (bpf/tests/call_cost.bpf.c), against the same program with no call,
// by BPF_PROG_TEST_RUN's repeated runs on one packet. The per-packet ratios of
// bench/packet-cost.ts differ from machine to machine by much more than the programs' work
// would explain: a kernel that sends every return through a mitigation's thunk (AMD's SRSO
// "Safe RET") pays it on each call of the program and of the kernel functions under a
// helper, and an empty program makes none. The machine's mitigations are reported beside.
// Run as root: npx tsx bench/call-cost.ts [--rounds 7] [--repeat 200000]
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { defaultObjectsDir } from '../src/datapath/loader.js';
import { u32Codec, u64Codec } from '../src/ebpf/codec.js';
import { BpfObject } from '../src/ebpf/object.js';
import { testRun } from '../src/ebpf/test-run.js';
import { buildPacket, eth, ipv4, tcp } from '../src/packet/build.js';
import { fmtStat, markdownTable, progress, publish, stat } from './report.js';

const { values } = parseArgs({ options: { rounds: { type: 'string' }, repeat: { type: 'string' } } });
const ROUNDS = Number(values.rounds ?? 7);
const REPEAT = Number(values.repeat ?? 200_000);
const CALLS = 32; // as CALLS in bpf/tests/call_cost.bpf.c
const COMMAND = `npx tsx bench/call-cost.ts --rounds ${ROUNDS} --repeat ${REPEAT}`;

const KINDS = [
  { program: 'call_subprog', what: 'BPF-to-BPF call (a global or noinline function of the datapath)' },
  { program: 'call_helper', what: 'helper that calls nothing further (bpf_get_numa_node_id)' },
  { program: 'call_csum', what: 'bpf_l4_csum_replace with BPF_F_PSEUDO_HDR (lib/nat.h)' },
  { program: 'call_lookup', what: 'hash map lookup that finds its key (the kernel function the verifier calls)' },
] as const;

/** The kernel's word on the mitigations that make calls and returns dearer. */
function mitigations(): string[] {
  const dir = '/sys/devices/system/cpu/vulnerabilities';
  const wanted = ['spec_rstack_overflow', 'retbleed', 'spectre_v2'];
  let names: string[] = [];
  try {
    names = readdirSync(dir).filter((n) => wanted.includes(n));
  } catch {
    return ['(unknown: no /sys/devices/system/cpu/vulnerabilities)'];
  }
  return names.sort((a, b) => wanted.indexOf(a) - wanted.indexOf(b)).map((n) => `${n}: ${readFileSync(join(dir, n), 'utf8').trim()}`);
}

function main(): void {
  const obj = BpfObject.open(join(defaultObjectsDir(), 'tests', 'call_cost.bpf.o'));
  try {
    obj.load();
    obj.map('call_cost_hash', u32Codec, u64Codec).update(1, 5n);
    const packet = buildPacket([eth(), ipv4({ src: '10.0.0.1', dst: '10.0.0.2' }), tcp({ sport: 40000, dport: 80, flags: 'S' })]);
    const none = obj.program('call_none');
    const ns = (name: string) => testRun(obj.program(name), { data: packet, repeat: REPEAT }).durationNs;
    // Each round times every program once, in a rotated order, and each call's cost is
    // taken against the program without calls in that round.
    const perCall = new Map<string, number[]>(KINDS.map((k) => [k.program, []]));
    const empty: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const order = [none.name, ...KINDS.map((k) => k.program)];
      const rotated = [...order.slice(round % order.length), ...order.slice(0, round % order.length)];
      const t = new Map(rotated.map((name) => [name, ns(name)]));
      empty.push(t.get(none.name)!);
      for (const k of KINDS) perCall.get(k.program)!.push((t.get(k.program)! - t.get(none.name)!) / CALLS);
      progress('.');
    }
    progress('\n');
    const rows = KINDS.map((k) => [k.what, fmtStat(stat(perCall.get(k.program)!), 1)]);
    const mit = mitigations();
    publish({
      name: 'call-cost',
      title: 'What one call costs a tc program on this machine (BPF_PROG_TEST_RUN)',
      command: COMMAND,
      method: `bpf/tests/call_cost.bpf.c: tc programs that make ${CALLS} calls of one kind and one that makes none, each run ${REPEAT} times on one 54-byte TCP frame by BPF_PROG_TEST_RUN (the kernel's mean per run); ${ROUNDS} rounds, each timing every program once in a rotated order; a call's cost is (program − no calls) / ${CALLS} within the round; median, spread min–max in brackets. The program without calls took ${fmtStat(stat(empty), 1)} ns per run.`,
      tables: [markdownTable(['one call of', 'ns per call'], rows)],
      notes: [`this machine's mitigations: ${mit.join('; ')}`],
      data: { rounds: ROUNDS, repeat: REPEAT, calls: CALLS, emptyNs: empty, perCallNs: Object.fromEntries(perCall), mitigations: mit },
    });
  } finally {
    obj.close();
  }
}

main();
