// The cost of a packet in the tc program, from PROG_TEST_RUN's kernel timing: a new flow,
// an established flow, a reply to an SNATed flow and a DSR packet (the option added), with
// 1 and with N Services loaded, against an empty tc program.
// Run as root: npx tsx bench/packet-cost.ts [--services 60000] [--repeat 20000]
import { parseArgs } from 'node:util';
import type { FrontendSpec } from '../src/datapath/spec.js';
import { BpfObject } from '../src/ebpf/object.js';
import { testRun } from '../src/ebpf/test-run.js';
import { buildPacket, eth, ipv4, tcp } from '../src/packet/build.js';
import { inNetns } from '../src/sys/netns.js';
import { NODE_IP, NODE_MAC, OTHER_NODE_MAC, ROUTER_MAC, datapathNode, type DatapathNode } from '../test/harness/datapath-node.js';
import { bpfObject } from '../test/harness/paths.js';
import { skbContext } from '../src/ebpf/skb-context.js';
import { machine as machineName, median, writeResult } from './report.js';

const { values } = parseArgs({ options: { services: { type: 'string' }, repeat: { type: 'string' } } });
const MANY = Number(values.services ?? 60_000);
const REPEAT = Number(values.repeat ?? 20_000);

const target: FrontendSpec[] = [
  { address: NODE_IP, port: 30080, proto: 'TCP', kind: 'NodePort', backends: [{ address: '10.244.1.5', port: 8080, local: true }] },
  { address: NODE_IP, port: 30081, proto: 'TCP', kind: 'NodePort', backends: [{ address: '10.244.2.7', port: 8080, local: false }] },
  { address: NODE_IP, port: 30082, proto: 'TCP', kind: 'NodePort', forwarding: 'dsr', backends: [{ address: '10.244.2.7', port: 8080, local: false }] },
];
const filler = (n: number): FrontendSpec[] =>
  Array.from({ length: n }, (_, i) => ({ address: `10.${100 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`, port: 80, proto: 'TCP' as const, kind: 'ExternalIP' as const, backends: [{ address: `10.244.2.${(i % 200) + 10}`, port: 8080, local: false }] }));

const syn = (dport: number, sport = 40000) => buildPacket([eth({ src: ROUTER_MAC, dst: NODE_MAC }), ipv4({ src: '10.0.10.2', dst: NODE_IP }), tcp({ sport, dport, flags: 'S' })]);
const ack = (dport: number) => buildPacket([eth({ src: ROUTER_MAC, dst: NODE_MAC }), ipv4({ src: '10.0.10.2', dst: NODE_IP }), tcp({ sport: 40000, dport, flags: 'A' })]);

function measure(node: DatapathNode, services: number): Record<string, number> {
  const run = (data: Buffer, repeat: number) => node.run('tc_ingress', data, repeat).durationNs;
  const out: Record<string, number> = {};
  // New flow: conntrack emptied before each single run.
  const fresh: number[] = [];
  for (let i = 0; i < 2000; i++) {
    node.dp.maps.ct4.delete({ saddr: '10.0.10.2', daddr: NODE_IP, sport: 40000, dport: 30080, proto: 6 });
    fresh.push(run(syn(30080), 1));
  }
  out['new flow, local backend'] = median(fresh);
  node.flushState();
  run(syn(30080), 1);
  out['established flow, local backend'] = median([run(ack(30080), REPEAT), run(ack(30080), REPEAT), run(ack(30080), REPEAT)]);
  node.flushState();
  const first = node.run('tc_ingress', syn(30081), 1);
  const natPort = first.data.readUInt16BE(14 + 20); // the SNAT source port chosen
  const reply = buildPacket([eth({ src: OTHER_NODE_MAC, dst: NODE_MAC }), ipv4({ src: '10.244.2.7', dst: NODE_IP }), tcp({ sport: 8080, dport: natPort, flags: 'A' })]);
  out['established flow, remote backend (SNAT)'] = median([run(ack(30081), REPEAT), run(ack(30081), REPEAT), run(ack(30081), REPEAT)]);
  out['reply to an SNATed flow'] = median([run(reply, REPEAT), run(reply, REPEAT), run(reply, REPEAT)]);
  out['DSR SYN, flow in conntrack (IPv4 option added)'] = median([run(syn(30082), REPEAT), run(syn(30082), REPEAT), run(syn(30082), REPEAT)]);
  process.stderr.write(`${services} Services measured\n`);
  return out;
}

async function main(): Promise<void> {
  const node = await datapathNode();
  const empty = BpfObject.open(bpfObject('tests/empty'));
  try {
    empty.load();
    const ctx = skbContext({ ifindex: node.ifindex });
    const emptyRun = (repeat: number) => inNetns(node.host.netns, () => testRun(empty.program('pass'), { data: syn(30080), ctx, repeat }).durationNs);
    const baseline = median([0, 1, 2].map(() => emptyRun(REPEAT)));
    // Single runs carry a fixed cost (cold cache, timer granularity): the new-flow row is
    // compared against the empty program measured the same way.
    const baselineSingle = median(Array.from({ length: 2000 }, () => emptyRun(1)));
    node.writer.apply(target);
    const one = measure(node, 1);
    const t0 = Date.now();
    node.writer.apply([...filler(MANY), ...target]);
    const loadMs = Date.now() - t0;
    const many = measure(node, MANY);
    const rows = Object.keys(one).map((k) => ({ case: k, ns1: one[k]!, nsMany: many[k]! }));
    const table = [
      `| case | ns/packet (1 Service) | ns/packet (${MANY} Services) | × empty program (1) | × empty (${MANY}) |`,
      '|---|---|---|---|---|',
      `| empty tc program, single run | ${baselineSingle} | ${baselineSingle} | 1.00 | 1.00 |`,
      `| empty tc program, repeated | ${baseline} | ${baseline} | 1.00 | 1.00 |`,
      ...rows.map((r) => {
        const base = r.case.startsWith('new flow') ? baselineSingle : baseline;
        return `| ${r.case} | ${r.ns1} | ${r.nsMany} | ${(r.ns1 / base).toFixed(2)} | ${(r.nsMany / base).toFixed(2)} |`;
      }),
    ].join('\n');
    const machine = machineName();
    process.stdout.write(`${table}\n\nmachine: ${machine}; BPF_PROG_TEST_RUN kernel timing, median of 3 runs × ${REPEAT} repeats (new flow: median of 2000 single runs, against the empty program's single run); ${MANY} Services loaded in ${loadMs} ms\ncommand: npx tsx bench/packet-cost.ts --services ${MANY} --repeat ${REPEAT}\n`);
    writeResult('packet-cost', { machine, baselineNs: baseline, baselineSingleRunNs: baselineSingle, services: MANY, rows });
  } finally {
    empty.close();
    await node.close();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
