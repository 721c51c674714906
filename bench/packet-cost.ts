// The cost of a packet in the tc program, from PROG_TEST_RUN's kernel timing: a new flow,
// an established flow, a reply to an SNATed flow and a DSR packet (the option added), with
// 1 and with N Services loaded, against an empty tc program. The packets are the tests'
// own fixtures (src/sandbox/fixtures/tc.ts), each checked before it is timed.
// Run as root: npx tsx bench/packet-cost.ts [--services 100000] [--repeat 20000]
import { parseArgs } from 'node:util';
import { join } from 'node:path';
import type { FrontendSpec } from '../src/model/frontend.js';
import { defaultObjectsDir } from '../src/datapath/loader.js';
import { BpfObject } from '../src/ebpf/object.js';
import { testRun } from '../src/ebpf/test-run.js';
import { inNetns } from '../src/sys/netns.js';
import { NODE_IP, datapathNode, type DatapathNode } from '../src/sandbox/datapath-node.js';
import { TC_SERVICES, fixture } from '../src/sandbox/fixtures/tc.js';
import { runFixture, type PacketFixture } from '../src/sandbox/packet-fixture.js';
import { skbContext } from '../src/ebpf/skb-context.js';
import { serviceMapSizes } from './map-sizes.js';
import { barChart } from './plot.js';
import { fmtStat, markdownTable, median, progress, publish, ratio, stat, type Stat } from './report.js';

const { values } = parseArgs({ options: { services: { type: 'string' }, repeat: { type: 'string' } } });
const MANY = Number(values.services ?? 100_000);
const RUNS = 5; // repeated runs per case: the median and the spread come from these
const REPEAT = Number(values.repeat ?? 20_000);

const filler = (n: number): FrontendSpec[] =>
  Array.from({ length: n }, (_, i) => ({ address: `10.${100 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`, port: 80, proto: 'TCP' as const, kind: 'ExternalIP' as const, backends: [{ address: `10.244.2.${(i % 200) + 10}`, port: 8080, local: false }] }));

/** New flows: single runs with conntrack emptied before each, in RUNS batches of 400. */
function singleRuns(run: () => number): Stat {
  return stat(Array.from({ length: RUNS }, () => median(Array.from({ length: 400 }, run))));
}

/** The fixture, checked once on a clean state (setup included), then its input timed. */
function timed(node: DatapathNode, id: string): PacketFixture {
  const f = fixture(id);
  node.flushState();
  const out = runFixture(node, f);
  if (!out.ok) throw new Error(`fixture ${id} does not hold: ${out.problems.join('; ')}`);
  return f;
}

function measure(node: DatapathNode, services: number): Record<string, Stat> {
  const run = (data: Buffer, repeat: number) => node.run('tc_ingress', data, repeat).durationNs;
  const repeated = (f: PacketFixture) => stat(Array.from({ length: RUNS }, () => run(f.input, REPEAT)));
  const out: Record<string, Stat> = {};
  const fresh = timed(node, 'nodeport-local');
  out['new flow, local backend'] = singleRuns(() => {
    node.dp.maps.ct4.delete({ saddr: '10.0.10.2', daddr: NODE_IP, sport: 62000, dport: 30080, proto: 6 });
    return run(fresh.input, 1);
  });
  out['established flow, local backend'] = repeated(timed(node, 'nodeport-local-established'));
  out['established flow, remote backend (SNAT)'] = repeated(timed(node, 'nodeport-remote-established'));
  out['reply to an SNATed flow'] = repeated(timed(node, 'snat-reply'));
  out['DSR SYN, flow in conntrack (IPv4 option added)'] = repeated(timed(node, 'dsr-annotated-established'));
  progress(`${services} Services measured\n`);
  return out;
}

async function main(): Promise<void> {
  // An ExternalIP frontend takes a master entry and a slot in each lookup scope.
  const node = await datapathNode({ mapSizes: serviceMapSizes(4 * MANY, 2 * MANY) });
  const empty = BpfObject.open(join(defaultObjectsDir(), 'tests', 'empty.bpf.o'));
  try {
    empty.load();
    const ctx = skbContext({ ifindex: node.ifindex });
    const packet = fixture('nodeport-local').input;
    const emptyRun = (repeat: number) => inNetns(node.host.netns, () => testRun(empty.program('pass'), { data: packet, ctx, repeat }).durationNs);
    const baseline = stat(Array.from({ length: RUNS }, () => emptyRun(REPEAT)));
    // Single runs carry a fixed cost (cold cache, timer granularity): the new-flow row is
    // compared against the empty program measured the same way.
    const baselineSingle = singleRuns(() => emptyRun(1));
    node.writer.apply(TC_SERVICES);
    const one = measure(node, 1);
    const t0 = Date.now();
    node.writer.apply([...filler(MANY), ...TC_SERVICES]);
    const loadMs = Date.now() - t0;
    const many = measure(node, MANY);
    const rows = Object.keys(one).map((k) => ({ case: k, one: one[k]!, many: many[k]!, base: k.startsWith('new flow') ? baselineSingle : baseline }));
    const table = markdownTable(
      ['case', 'ns/packet, 1 Service', `ns/packet, ${MANY} Services`, '× empty (1)', `× empty (${MANY})`, `${MANY} / 1`],
      [
        ['empty tc program, single run', fmtStat(baselineSingle, 0), '', '1.00', '', ''],
        ['empty tc program, repeated', fmtStat(baseline, 0), '', '1.00', '', ''],
        ...rows.map((r) => [r.case, fmtStat(r.one, 0), fmtStat(r.many, 0), ratio(r.one.median, r.base.median), ratio(r.many.median, r.base.median), ratio(r.many.median, r.one.median)]),
      ],
    );
    publish({
      name: 'packet-cost',
      title: 'Per-packet cost of the tc program (BPF_PROG_TEST_RUN)',
      command: `npx tsx bench/packet-cost.ts --services ${MANY} --repeat ${REPEAT}`,
      method: `the tc_ingress program run by BPF_PROG_TEST_RUN in a testbed node's namespace, the kernel's own timing; repeated cases: ${RUNS} runs × ${REPEAT} repeats (the same packet, so the flow is established after the first); a new flow: ${RUNS} batches of 400 single runs with the conntrack entry deleted before each, compared with the empty program's single run (a single run carries a fixed cost). ${MANY} Services (ExternalIP frontends, remote backends) loaded in ${loadMs} ms. Median of the runs, spread min–max in brackets.`,
      tables: [table],
      ratios: rows.map((r) => `${r.case}: ${ratio(r.one.median, r.base.median)}× the empty program with 1 Service, ${ratio(r.many.median, r.base.median)}× with ${MANY}`),
      plots: [{
        file: 'packet-cost.svg', caption: 'ns per packet by case, 1 and N Services',
        svg: barChart({
          title: 'tc program: ns per packet (lower is better)', yLabel: 'ns',
          groups: ['empty', 'new flow', 'est. local', 'est. SNAT', 'SNAT reply', 'DSR SYN'],
          series: [
            { name: '1 Service', values: [baseline.median, ...rows.map((r) => r.one.median)], spread: [{ lo: baseline.min, hi: baseline.max }, ...rows.map((r) => ({ lo: r.one.min, hi: r.one.max }))] },
            { name: `${MANY} Services`, values: [null, ...rows.map((r) => r.many.median)], spread: [null, ...rows.map((r) => ({ lo: r.many.min, hi: r.many.max }))] },
          ],
        }),
      }],
      data: { services: MANY, repeat: REPEAT, loadMs, baselineNs: baseline, baselineSingleRunNs: baselineSingle, rows },
    });
  } finally {
    empty.close();
    await node.close();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
