// Where one case's time goes inside the kernel: a tc fixture's packet run by PROG_TEST_RUN as
// single runs (as bench/packet-cost.ts times it) for a few seconds while `perf record -a -g`
// samples every CPU; then the program's samples by the helper they were under (with the
// kernel functions beneath), by leaf symbol, and the program's own samples by source line
// (bench/jited-lines.ts). `--new-flow PORT`: the case is a new flow to that frontend port,
// whose entries are deleted before each run (bench/new-flow.ts), as packet-cost does. A case
// of src/sandbox/fixtures/tc6.ts (`ipv6-...`) runs on a node with the IPv6 Services too.
// Run as root: npx tsx bench/packet-profile.ts --case nodeport-remote-established [--seconds 5] [--new-flow PORT]
import { parseArgs } from 'node:util';
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { testRun } from '../src/ebpf/test-run.js';
import { skbContext } from '../src/ebpf/skb-context.js';
import { inNetns } from '../src/sys/netns.js';
import { CLIENT_IP, NODE_IP, datapathNode } from '../src/sandbox/datapath-node.js';
import { CLIENT_PORT, TC_FIXTURES, TC_SERVICES, fixture } from '../src/sandbox/fixtures/tc.js';
import { CLIENT6, CLIENT6_PORT, LB6, TC6_FIXTURES, TC6_SERVICES } from '../src/sandbox/fixtures/tc6.js';
import { Ct6Dir } from '../src/datapath/layouts6.js';
import { flowForgetter, flowForgetter6 } from './new-flow.js';
import { HostPortsSlot } from '../src/datapath/layouts.js';
import { runFixture } from '../src/sandbox/packet-fixture.js';
import { jitedLines } from './jited-lines.js';
import { perfRecord } from './perf-profile.js';
import { RESULTS_DIR } from './report.js';

const { values } = parseArgs({ options: { case: { type: 'string' }, seconds: { type: 'string' }, 'new-flow': { type: 'string' } } });
const ID = values.case ?? 'nodeport-remote-established';
const SECONDS = Number(values.seconds ?? 5);
// A new flow's frontend port: its entries are deleted before each run (bench/new-flow.ts).
const NEW_FLOW_DPORT = values['new-flow'] === undefined ? undefined : Number(values['new-flow']);

async function main(): Promise<void> {
  const node = await datapathNode({});
  const dir = mkdtempSync(join(tmpdir(), 'ferry-prof-'));
  try {
    // As the agent runs it (and bench/packet-cost.ts times it): the socket hooks attached,
    // so that a new SNAT binding asks the host's sockets only about ports the host bound.
    node.dp.attachCgroup({ path: node.host.cgroup, expect: 'subtree' }, { hostNetns: node.host.netns });
    node.dp.maps.host_ports.update(HostPortsSlot.HOST_PORTS_TRUSTED, 1n);
    const ipv6 = !TC_FIXTURES.some((x) => x.id === ID) && TC6_FIXTURES.some((x) => x.id === ID);
    node.writer.apply([...TC_SERVICES, ...TC6_SERVICES]);
    const f = fixture(ID, ipv6 ? TC6_FIXTURES : TC_FIXTURES);
    node.flushState();
    const out = runFixture(node, f);
    if (!out.ok) throw new Error(`fixture ${ID} does not hold: ${out.problems.join('; ')}`);
    const skb = skbContext({ ifindex: node.ifindex });
    const prog = node.program(f.program);
    const file = join(dir, 'perf.data');
    let forget = () => {};
    if (NEW_FLOW_DPORT !== undefined && ipv6) {
      const key = { saddr: CLIENT6, daddr: LB6, sport: CLIENT6_PORT, dport: NEW_FLOW_DPORT, proto: 6, dir: Ct6Dir.CT6_DIR_CLIENT };
      if (!node.dp.maps.ct6.lookup(key)) throw new Error(`${ID}: no conntrack entry at ${JSON.stringify(key)}`);
      forget = flowForgetter6(node, key);
    } else if (NEW_FLOW_DPORT !== undefined) {
      const key = { saddr: CLIENT_IP, daddr: NODE_IP, sport: CLIENT_PORT, dport: NEW_FLOW_DPORT, proto: 6 };
      if (!node.dp.maps.ct4.lookup(key)) throw new Error(`${ID}: no conntrack entry at ${JSON.stringify(key)}`);
      forget = flowForgetter(node, key);
    }
    let runs = 0;
    await perfRecord(['-g', '-F', '9999'], file, () => {
      const until = Date.now() + SECONDS * 1000;
      inNetns(node.host.netns, () => {
        while (Date.now() < until) {
          for (let i = 0; i < 1000; i++) {
            forget();
            testRun(prog, { data: f.input, ctx: skb });
          }
          runs += 1000;
        }
      });
    });
    // Each sample's stack, leaf first: those with the program in them count, by their leaf
    // (where the time went) and by the program's direct callee (which helper it was under).
    const script = execFileSync('perf', ['script', '-i', file, '-F', 'ip,sym'], { encoding: 'utf8', maxBuffer: 2 ** 31, stdio: ['ignore', 'pipe', 'ignore'] });
    const leaf = new Map<string, number>();
    const under = new Map<string, number>();
    const lines4 = jitedLines(prog.fd);
    const lines = new Map<string, number>();
    let inProgram = 0;
    for (const block of script.split(/\n\s*\n/)) {
      const parsed = block.split('\n').map((l) => l.trim().split(/\s+/)).filter((x) => x.length > 1);
      const frames = parsed.map((x) => x.slice(1).join(' '));
      const at = frames.findIndex((fr) => /^bpf_prog_[0-9a-f]{16}_/.test(fr));
      if (at < 0) continue;
      inProgram++;
      leaf.set(frames[0]!, (leaf.get(frames[0]!) ?? 0) + 1);
      if (at === 0) {
        const where = lines4.lineAt(BigInt(`0x${parsed[0]![0]}`)) ?? `${frames[0]} (no line info)`;
        lines.set(where, (lines.get(where) ?? 0) + 1);
      }
      const callee = at === 0 ? `(in ${frames[0]!.replace(/^bpf_prog_[0-9a-f]{16}_/, '')} itself)` : frames[at - 1]!;
      under.set(callee, (under.get(callee) ?? 0) + 1);
    }
    const rows = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]).filter(([, n]) => n / inProgram >= 0.002)
      .map(([sym, n]) => `${((100 * n) / inProgram).toFixed(1).padStart(6)}%  ${sym}`).join('\n');
    const report = `${inProgram} samples in the program\n\n## by the program's callee (helper)\n${rows(under)}\n\n## by leaf symbol\n${rows(leaf)}\n\n## the program's own samples by source line\n${rows(lines)}\n`;
    mkdirSync(RESULTS_DIR, { recursive: true });
    const txt = join(RESULTS_DIR, `packet-profile-${ID}.txt`);
    writeFileSync(txt, `# ${runs} single runs of ${ID}\n${report}`);
    process.stdout.write(`${txt}\n`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await node.close();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
