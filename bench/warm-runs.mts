// Single test runs against warm repeated ones, for the packets tc_ingress passes on
// untouched (PROG_TEST_RUN's repeat runs a program on its own output, so only a packet the
// program leaves as it was can be repeated): how much of a single run's cost is a cold
// start. packet-cost times single runs; this says what they overstate on a given machine.
// Run as root: npx tsx bench/warm-runs.mts
import { join } from 'node:path';
import { defaultObjectsDir } from '../src/datapath/loader.js';
import { BpfObject } from '../src/ebpf/object.js';
import { skbContext } from '../src/ebpf/skb-context.js';
import { testRun } from '../src/ebpf/test-run.js';
import { datapathNode } from '../src/sandbox/datapath-node.js';
import { TC_SERVICES, fixture } from '../src/sandbox/fixtures/tc.js';
import { inNetns } from '../src/sys/netns.js';

const SINGLE = 2000;
const REPEAT = 100_000;
const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const node = await datapathNode();
node.writer.apply(TC_SERVICES);
const empty = BpfObject.open(join(defaultObjectsDir(), 'tests', 'empty.bpf.o'));
empty.load();
try {
  console.log(`| case | single run, median of ${SINGLE} (ns) | repeat ${REPEAT}, mean per run, median of 20 (ns) |\n| --- | --- | --- |`);
  for (const id of ['not-a-service', 'host-to-node-address']) {
    const data = fixture(id).input;
    const ctx = skbContext({ ifindex: node.ifindex });
    for (const [name, prog] of [['empty program', empty.program('pass')], [`tc_ingress, ${id}`, node.program('tc_ingress')]] as const) {
      const run = (repeat: number) => inNetns(node.host.netns, () => testRun(prog, { data, ctx, repeat }).durationNs);
      const single = median(Array.from({ length: SINGLE }, () => run(1)));
      const warm = median(Array.from({ length: 20 }, () => run(REPEAT)));
      console.log(`| ${name} | ${single} | ${warm} |`);
    }
  }
} finally {
  empty.close();
  await node.close();
}
