// Where a packet's time goes in tc_ingress: the program built again with FERRY_STAGE_STOP=n
// returns at the n-th STAGE_END marker of its path (bpf/lib/common.h), and each build is
// timed on the same packet by BPF_PROG_TEST_RUN, so that the difference between two markers
// is the cost of the code between them. Two paths: an established flow and a new flow, both
// to a remote backend (SNAT), with the tests' own fixtures. A build that stops early leaves
// the state a later marker needs unmade (a new flow stopped before its conntrack entry has
// none). An established flow skips markers 4 to 8: its conntrack entry, found first,
// needs no frontend lookup. A new flow's entry is written last (after marker 12, before
// marker 8); a build stopped at 9-12 writes it once it has stopped (lib/nodeport.h), so
// that a flow set up by that build is established at its next packet: the new flow's
// rows 9-12 include the insert, and its row 8 adds only the redirect.
// Run as root: npx tsx bench/packet-stages.ts [--runs 2000]
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { BPF_CFLAGS, systemIncludeDir } from '../src/build/compile.js';
import { defaultObjectsDir } from '../src/datapath/loader.js';
import { BpfObject } from '../src/ebpf/object.js';
import { skbContext } from '../src/ebpf/skb-context.js';
import { testRun } from '../src/ebpf/test-run.js';
import { CLIENT_IP, NODE_IP, datapathNode, type DatapathNode } from '../src/sandbox/datapath-node.js';
import { CLIENT_PORT, TC_SERVICES, fixture } from '../src/sandbox/fixtures/tc.js';
import { inNetns } from '../src/sys/netns.js';
import { interleaved } from './interleave.js';
import { flowForgetter } from './new-flow.js';
import { barChart } from './plot.js';
import { fmtStat, markdownTable, progress, publish, ratio, stat, type Stat } from './report.js';

const { values } = parseArgs({ options: { runs: { type: 'string' } } });
const RUNS = Number(values.runs ?? 2000);
const BATCHES = 5;
const ROOT = resolve(import.meta.dirname, '..');

/** The markers in path order (STAGE_END(n) in bpf/), and what runs up to each. */
const STAGES: Array<{ n: number; what: string; newOnly?: boolean }> = [
  { n: 1, what: 'entry: monitor check, frame type' },
  { n: 2, what: 'headers parsed' },
  { n: 3, what: 'not a reply to an SNATed flow' },
  { n: 4, what: 'conntrack entry looked up, not live (an established flow goes on from there to 9)', newOnly: true },
  { n: 5, what: 'frontend looked up (and source ranges)', newOnly: true },
  { n: 6, what: 'backend chosen (affinity, Maglev or slot)', newOnly: true },
  { n: 7, what: "SNAT port reserved (the host's sockets asked if it may hold the port)", newOnly: true },
  { n: 9, what: 'flow state updated' },
  { n: 10, what: 'reply binding kept' },
  { n: 11, what: 'route: the flow\'s kept hop, or bpf_fib_lookup (new flow, or once a second)' },
  { n: 12, what: 'headers rewritten, counted' },
  { n: 8, what: 'redirect set (a new flow: its conntrack entry, built in a per-CPU slot, written after row 12, and in rows 9-12 too)', newOnly: true },
  { n: 0, what: 'the whole program' },
];

/** The STAGE_END markers in bpf/ must be the ones labelled above: a marker moved or
 * dropped without its label would time the wrong code under the right name. */
function checkMarkers(): void {
  const dirs = [join(ROOT, 'bpf'), join(ROOT, 'bpf', 'lib')];
  const inC = new Set<number>();
  for (const d of dirs) {
    for (const f of readdirSync(d).filter((x) => /\.(c|h)$/.test(x))) {
      for (const m of readFileSync(join(d, f), 'utf8').matchAll(/\bSTAGE_END\((\d+)\);/g)) inC.add(Number(m[1]));
    }
  }
  const labelled = STAGES.filter((s) => s.n).map((s) => s.n);
  if (labelled.length !== inC.size || labelled.some((n) => !inC.has(n))) {
    throw new Error(`packet-stages: the markers in bpf/ (${[...inC].sort((a, b) => a - b).join(', ')}) are not the labelled ones (${labelled.join(', ')})`);
  }
}

const CASES = [
  { name: 'established flow, remote backend (SNAT)', id: 'nodeport-remote-established', fresh: false },
  { name: 'new flow, remote backend (SNAT)', id: 'nodeport-remote', fresh: true },
];

function build(dir: string, stop: number): string {
  const out = join(dir, String(stop));
  mkdirSync(out, { recursive: true });
  execFileSync('clang', [...BPF_CFLAGS, ...(stop ? [`-DFERRY_STAGE_STOP=${stop}`] : []), '-I', join(ROOT, 'bpf'), '-isystem', systemIncludeDir(ROOT), '-c', join(ROOT, 'bpf', 'tc.bpf.c'), '-o', join(out, 'tc.bpf.o')]);
  copyFileSync(join(defaultObjectsDir(), 'sock.bpf.o'), join(out, 'sock.bpf.o'));
  return out;
}

/** A case's runs on a node's build, interleaved with the empty program's (bench/interleave.ts). */
function timeCase(node: DatapathNode, stop: number, c: (typeof CASES)[number], empty: () => number): { ns: Stat; empty: Stat } {
  const f = fixture(c.id);
  node.flushState();
  const skb = skbContext({ ifindex: node.ifindex });
  const run = (d: Buffer) => inNetns(node.host.netns, () => testRun(node.program('tc_ingress'), { data: d, ctx: skb }).durationNs);
  for (const s of f.setup ?? []) run(s.input);
  const key = { saddr: CLIENT_IP, daddr: NODE_IP, sport: CLIENT_PORT, dport: 30081, proto: 6 };
  // An established flow's packet reaches markers past 8 only on its conntrack entry: a
  // build whose setup left none would time a new flow under the established flow's name.
  if (!c.fresh && (stop === 0 || stop > 8) && !node.dp.maps.ct4.lookup(key)) throw new Error(`stage ${stop}: the ${c.id} setup left no conntrack entry`);
  // A new flow's reply entries are found after a run of its build (one that stops before
  // the port is reserved has none): each run then deletes them with its conntrack entry.
  let forget: (() => void) | undefined;
  if (c.fresh) {
    run(f.input);
    forget = flowForgetter(node, key);
  }
  const timed = () => {
    forget?.();
    return run(f.input);
  };
  const { columns } = interleaved({ ns: timed, empty }, ['ns'], BATCHES, RUNS);
  return columns;
}

/** How much of the verifier's instruction limit each datapath program takes to verify. */
function verifierUse(): string[] {
  const out: string[] = [];
  for (const [file, programs] of [['tc.bpf.o', ['tc_ingress', 'tc_egress']], ['xdp.bpf.o', ['xdp_ingress']]] as const) {
    const obj = BpfObject.open(join(defaultObjectsDir(), file));
    try {
      obj.collectVerifierStats();
      obj.load();
      for (const name of programs) {
        const s = obj.verifierStats(name);
        if (s) out.push(`${name}: the verifier processed ${s.processed} instructions of its ${s.limit} limit (${((100 * s.processed) / s.limit).toFixed(0)}%)`);
      }
    } finally {
      obj.close();
    }
  }
  return out;
}

async function main(): Promise<void> {
  checkMarkers();
  const dir = mkdtempSync(join(tmpdir(), 'ferry-stages-'));
  const rows: Array<{ n: number; what: string; ns: Record<string, Stat>; empty: Record<string, Stat> }> = [];
  const pass = BpfObject.open(join(defaultObjectsDir(), 'tests', 'empty.bpf.o'));
  try {
    pass.load();
    const packet = fixture('nodeport-remote').input;
    for (const s of STAGES) {
      const node = await datapathNode({ objectsDir: build(dir, s.n) });
      try {
        node.dp.attachCgroup({ path: node.host.cgroup, expect: 'subtree' }, { hostNetns: node.host.netns }); // as the agent: host_ports trusted
        node.writer.apply(TC_SERVICES);
        const empty = () => inNetns(node.host.netns, () => testRun(pass.program('pass'), { data: packet, ctx: skbContext({ ifindex: node.ifindex }) }).durationNs);
        const row: (typeof rows)[number] = { n: s.n, what: s.what, ns: {}, empty: {} };
        for (const c of CASES) {
          if (s.newOnly && !c.fresh) continue;
          const t = timeCase(node, s.n, c, empty);
          row.ns[c.name] = t.ns;
          row.empty[c.name] = t.empty;
        }
        rows.push(row);
        progress(`stage ${s.n} timed\n`);
      } finally {
        await node.close();
      }
    }
  } finally {
    pass.close();
    rmSync(dir, { recursive: true, force: true });
  }
  // The empty program of the top row, and of every ratio: the median over every row's
  // batches of it (its time drops to about 60 ns in some batches, whatever a build's does).
  const empty = stat(rows.flatMap((r) => Object.values(r.empty).map((e) => e.median)));
  const tables = CASES.map((c) => {
    let prev = empty.median;
    const body = rows.filter((r) => r.ns[c.name]).map((r) => {
      const s = r.ns[c.name]!;
      const delta = s.median - prev;
      prev = s.median;
      return [r.n || 'end', r.what, fmtStat(s, 0), delta.toFixed(0), ratio(s.median, empty.median)];
    });
    return `**${c.name}**\n\n${markdownTable(['marker', 'up to and including', 'ns/packet', '+ns from the previous row', '× empty'], [['-', 'empty program (median over the rows)', fmtStat(empty, 0), '', '1.00'], ...body])}`;
  });
  publish({
    name: 'packet-stages',
    title: 'Where a packet\'s time goes in tc_ingress (BPF_PROG_TEST_RUN, builds stopped at each marker)',
    command: `npx tsx bench/packet-stages.ts --runs ${RUNS}`,
    method: `tc.bpf.c built once per STAGE_END marker with FERRY_STAGE_STOP=n (the program returns there) and once whole; each build loaded into a testbed node with the tc fixtures' Services and timed by BPF_PROG_TEST_RUN as single runs interleaved with the empty program's on every CPU in turn, as bench/packet-cost.ts does (bench/interleave.ts: ${BATCHES} batches of ${RUNS} runs per column and CPU, each batch the interquartile mean from the CPU where the build ran fastest, then the median and spread of the batches); the empty program's row is the median over every row's batches of it, and the ratios are against it (the empty program's own time drops from about 90 to about 60 ns in some batches, whatever a build's does). A row's "+ns" is the code between two markers; differences of a few ns are within the noise. The new flow has its conntrack entry and its SNAT binding deleted before each run (bench/new-flow.ts), as a new client's flow finds neither. A new flow's conntrack entry is written last (after marker 12); a build stopped at 9-12 writes it after stopping, so the new flow's rows 9-12 include that insert and the established flow's setup leaves an entry (before 2026-12-05's fix those builds wrote none, and the established rows 9-12 timed a new flow). Early stops leave later state unmade: up to marker 5 the established case times a conntrack miss.`,
    tables,
    notes: verifierUse(),
    plots: [{
      file: 'packet-stages.svg', caption: 'ns per packet up to each marker',
      svg: barChart({
        title: 'ns per packet up to each marker (lower is better)', yLabel: 'ns',
        groups: ['empty', ...rows.map((r) => String(r.n || 'end'))],
        series: CASES.map((c) => ({ name: c.name, values: [empty.median, ...rows.map((r) => r.ns[c.name]?.median ?? null)] })),
      }),
    }],
    data: { runs: RUNS, batches: BATCHES, emptyNs: empty, rows },
  });
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
