// The cost of a packet in the tc and XDP programs, from PROG_TEST_RUN's kernel timing: a
// new flow, an established flow, a reply to an SNATed flow and a DSR packet (the option
// added), packets passed on, and at tc egress a local backend's reply and a packet that is
// none, and on tc the same for IPv6 from outside (src/sandbox/fixtures/tc6.ts), with 1 and
// with N Services loaded, against an empty program of the same hook.
// Every case is timed as single runs: PROG_TEST_RUN repeats a program on the same buffer,
// so after the first repeat a translating program would see its own output (the node's
// address, the backend's port: a flow it does not know), and a repeated timing measures
// that miss instead. The packets are the tests' own fixtures (src/sandbox/fixtures/tc.ts),
// each checked before it is timed, and a new flow to a Service of 16 endpoints whose slot
// its master entry does not carry (checked to be redirected and to land past the 4th slot),
// new SNAT flows with a SNAT device listed (README: SNAT address per device), new DSR flows
// (their backend's shared hop taken, or not), and a DSR SYN arriving at its backend's node.
// Run as root: npx tsx bench/packet-cost.ts [--services 100000] [--runs 2000] [--cases REGEX]
import { parseArgs } from 'node:util';
import { join } from 'node:path';
import type { FrontendSpec } from '../src/model/frontend.js';
import { XDP_PROGRAM, defaultObjectsDir } from '../src/datapath/loader.js';
import * as layouts from '../src/datapath/layouts.js'; // a namespace: compare-builds' base may lack HostPortsSlot
import { BpfObject } from '../src/ebpf/object.js';
import { testRun } from '../src/ebpf/test-run.js';
import { inNetns } from '../src/sys/netns.js';
import { CLIENT_IP, NODE_IP, datapathNode, type DatapathNode } from '../src/sandbox/datapath-node.js';
import { CLIENT_PORT, LOCAL_POD, TC_FIXTURES, TC_SERVICES, fixture, fromRouter, syn } from '../src/sandbox/fixtures/tc.js';
import { dsrOption } from '../src/sandbox/fixtures/dsr.js';
import { CLIENT6, CLIENT6_PORT, LB6, TC6_FIXTURES, TC6_SERVICES } from '../src/sandbox/fixtures/tc6.js';
import { Ct6Dir } from '../src/datapath/layouts6.js';
import { buildPacket, eth, ipv4, tcp } from '../src/packet/build.js';
import { decodePacket } from '../src/packet/decode.js';
import { TcVerdict, runFixture, type PacketFixture } from '../src/sandbox/packet-fixture.js';
import { skbContext, xdpContext } from '../src/ebpf/skb-context.js';
import { serviceMapSizes } from './map-sizes.js';
import { CHUNK, interleaved } from './interleave.js';
import { flowForgetter, flowForgetter6 } from './new-flow.js';
import { barChart } from './plot.js';
import { fmtStat, markdownTable, progress, publish, ratio, stat, type Stat } from './report.js';

const { values } = parseArgs({ options: { services: { type: 'string' }, runs: { type: 'string' }, cases: { type: 'string' } } });
const MANY = Number(values.services ?? 100_000);
const BATCHES = 5; // the median and the spread come from these
// Single runs per batch, column and CPU (their interquartile mean is the batch's), whole chunks.
const RUNS = Math.max(CHUNK, Math.round(Number(values.runs ?? 2000) / CHUNK) * CHUNK);
// `--cases REGEX`: only the cases whose name matches (a quicker look at a few; the ratios
// stay against the empty program of the same batches).
const ONLY = values.cases === undefined ? undefined : new RegExp(values.cases);

const filler = (n: number): FrontendSpec[] =>
  Array.from({ length: n }, (_, i) => ({ address: `10.${100 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`, port: 80, proto: 'TCP' as const, kind: 'ExternalIP' as const, backends: [{ address: `10.244.2.${(i % 200) + 10}`, port: 8080, local: false }] }));

/** A NodePort Service of 16 remote endpoints: a master entry carries the backends of its
 * first 4 slots (map layout 5), so this case's flow is one that hashes past them and
 * looks its slot up, as every new flow did before. */
const WIDE_PORT = 30083;
const WIDE_SLOTS = 16;
// How many first slots a master carries (4; compare-builds' base may predate them).
const CARRIED = (layouts as Partial<typeof layouts>).FirstSlots?.LB4_FIRST_SLOTS ?? 4;
const WIDE: FrontendSpec = {
  address: NODE_IP, port: WIDE_PORT, proto: 'TCP', kind: 'NodePort', service: 'default/wide:http',
  backends: Array.from({ length: WIDE_SLOTS }, (_, i) => ({ address: `10.244.2.${100 + i}`, port: 8080, local: false })),
};

/** A client port whose new flow to WIDE lands in a slot past the fourth, and that flow's SYN. */
function wideFlow(node: DatapathNode): { sport: number; input: Buffer } {
  const services = node.dp.maps.lb4_services;
  const slotOf = new Map<number, number>();
  for (let slot = 1; slot <= WIDE_SLOTS; slot++) {
    const v = services.lookup({ address: NODE_IP, port: WIDE_PORT, proto: 6, scope: layouts.LbScope.LB_SCOPE_EXTERNAL, slot });
    if (v) slotOf.set(v.backendId, slot);
  }
  for (let sport = CLIENT_PORT; sport < CLIENT_PORT + 256; sport++) {
    node.flushState();
    const input = syn(NODE_IP, WIDE_PORT, { sport });
    if (node.run('tc_ingress', input).retval !== TcVerdict.REDIRECT) throw new Error(`wide: the SYN from port ${sport} was not redirected`);
    const ct = node.dp.maps.ct4.lookup({ saddr: CLIENT_IP, daddr: NODE_IP, sport, dport: WIDE_PORT, proto: 6 });
    if ((slotOf.get(ct?.backendId ?? 0) ?? 0) > CARRIED) return { sport, input };
  }
  throw new Error('wide: no client port of 256 hashed past the fourth slot');
}

/** A LoadBalancer IP whose DSR packets other nodes send to this node's pod: the option
 * names it, the node records the flow's frontend for the replies and removes the option. */
const DSR_HERE: FrontendSpec = {
  address: '10.0.100.30', port: 80, proto: 'TCP', kind: 'LoadBalancer', forwarding: 'dsr', service: 'default/dsr-here:http',
  backends: [{ address: LOCAL_POD, port: 8080, local: true }],
};

/** A DSR SYN as the LB node sends it to this node's pod, checked: passed to the stack, the option gone. */
function dsrArrival(node: DatapathNode): { sport: number; input: Buffer } {
  const input = buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: LOCAL_POD, ttl: 62, options: dsrOption(DSR_HERE.port, DSR_HERE.address) }), tcp({ sport: CLIENT_PORT, dport: 8080, flags: 'S', seq: 5 })]);
  node.flushState();
  const out = node.run('tc_ingress', input);
  const ip = decodePacket(out.data).find((l) => l.name === 'ipv4')?.fields;
  if (out.retval !== TcVerdict.OK || ip?.ihl !== 20 || ip?.checksumValid !== true || out.data.length !== input.length - 8) {
    throw new Error(`dsr arrival: verdict ${out.retval}, ihl ${String(ip?.ihl)}, length ${out.data.length}`);
  }
  return { sport: CLIENT_PORT, input };
}

/** The fixture, checked once on a clean state (setup included, through XDP then tc). */
function checked(node: DatapathNode, id: string, table = TC_FIXTURES): PacketFixture {
  const f = fixture(id, table);
  node.flushState();
  const out = runFixture(node, f);
  if (!out.ok) throw new Error(`fixture ${id} does not hold: ${out.problems.join('; ')}`);
  return f;
}

/** A packet leaving by tc egress that is no local backend's reply: a pod on this node that
 * backs no Service, to a server outside (built here: compare-builds' base has no such fixture). */
const leavingPacket = (): Buffer => buildPacket([eth(), ipv4({ src: '10.244.1.77', dst: '10.0.30.99' }), tcp({ sport: 43210, dport: 443, flags: 'A' })]);

/** A leaving packet, checked as the fixtures are: tc egress passes it on untouched. */
function leaving(node: DatapathNode, input: Buffer): { sport: number; input: Buffer } {
  const out = node.run('tc_egress', input);
  if (out.retval !== TcVerdict.UNSPEC || !out.data.equals(input)) throw new Error('leaving: tc egress did not pass the packet on untouched');
  return { sport: 0, input };
}

/** SNAT address per device (snat4_devices): a listed device's address, and an ifindex no
 * device of the node has (a tunnel the flow's route does not leave by). */
const SNAT_DEVICE_ADDRESS = '10.0.40.1';
const OTHER_IFINDEX = 4242;
type SnatDevice = 'other' | 'route';

/** List a device for SNAT, as the agent would (`on`), or list none again. A build from
 * before the map (compare-builds' base) has no such case. */
function listSnatDevice(node: DatapathNode, which: SnatDevice, on: boolean): void {
  const ifindex = which === 'route' ? node.ifindex : OTHER_IFINDEX;
  const dp = node.dp as Partial<typeof node.dp>;
  if (on) dp.maps!.snat4_devices!.update(ifindex, SNAT_DEVICE_ADDRESS);
  else dp.maps!.snat4_devices!.delete(ifindex);
  dp.hopEpoch!.setSnatByDevice(on);
}

/** A new SNAT flow's SYN with a device listed: redirected, from the address its route's device gives. */
function snatDeviceFlow(node: DatapathNode, which: SnatDevice): { sport: number; input: Buffer } {
  const input = fixture('nodeport-remote').input;
  node.flushState();
  const out = node.run('tc_ingress', input);
  const source = String(decodePacket(out.data).find((l) => l.name === 'ipv4')?.fields.src);
  const want = which === 'route' ? SNAT_DEVICE_ADDRESS : NODE_IP;
  if (out.retval !== TcVerdict.REDIRECT || source !== want) throw new Error(`snat device (${which}): verdict ${out.retval}, source ${source}, not ${want}`);
  return { sport: CLIENT_PORT, input };
}

type Hook = 'tc' | 'xdp';
const CASES: Array<{ name: string; id: string; fresh?: { dport: number }; hooks: Hook[]; askHost?: boolean; wide?: boolean; egress?: () => Buffer; snatDevice?: SnatDevice; ipv6?: boolean; unshared?: boolean; arrival?: boolean }> = [
  { name: 'new flow, local backend', id: 'nodeport-local', fresh: { dport: 30080 }, hooks: ['tc'] },
  { name: 'new flow, remote backend (SNAT)', id: 'nodeport-remote', fresh: { dport: 30081 }, hooks: ['tc', 'xdp'] },
  // The same with host_ports untrusted, as before the socket hooks marked the host's binds:
  // the host's sockets asked about the port (what the map saves).
  { name: "new flow, remote backend (SNAT), the host's sockets asked", id: 'nodeport-remote', fresh: { dport: 30081 }, hooks: ['tc', 'xdp'], askHost: true },
  { name: 'new flow, remote backend (SNAT), a Service of 16 endpoints, slot past the 4th', id: 'wide', fresh: { dport: WIDE_PORT }, hooks: ['tc', 'xdp'], wide: true },
  // SNAT address per device: a device listed (a tunnel), the flow's route by another (the
  // NIC: one lookup more, a miss), and the flow's route by the listed device (its address).
  { name: 'new flow, remote backend (SNAT), a SNAT device listed, the route by another', id: 'nodeport-remote', fresh: { dport: 30081 }, hooks: ['tc', 'xdp'], snatDevice: 'other' },
  { name: 'new flow, remote backend (SNAT), the route by a listed SNAT device', id: 'nodeport-remote', fresh: { dport: 30081 }, hooks: ['tc', 'xdp'], snatDevice: 'route' },
  // A Service annotated DSR on a SNAT node: the first packet of a flow takes the option.
  // DSR keeps the client's address, so a new flow takes its backend's shared hop only after
  // a new flow from the same client (within a second); from another, the route is looked up.
  { name: 'new flow, remote backend (DSR, IPv4 option added), the same client as the last new flow', id: 'dsr-annotated', fresh: { dport: 30082 }, hooks: ['tc', 'xdp'] },
  { name: 'new flow, remote backend (DSR, IPv4 option added), another client than the last', id: 'dsr-annotated', fresh: { dport: 30082 }, hooks: ['tc', 'xdp'], unshared: true },
  // At the backend's node, a DSR flow's first packet: its frontend recorded, the option removed (tc).
  { name: "DSR at the backend's node: a new flow's SYN (the option removed)", id: 'dsr-arrival', fresh: { dport: DSR_HERE.port }, hooks: ['tc'], arrival: true },
  { name: 'established flow, local backend', id: 'nodeport-local-established', hooks: ['tc', 'xdp'] },
  { name: 'established flow, remote backend (SNAT)', id: 'nodeport-remote-established', hooks: ['tc', 'xdp'] },
  { name: 'established flow, remote backend (DSR, no option)', id: 'dsr-established', hooks: ['tc', 'xdp'] },
  { name: 'reply to an SNATed flow', id: 'snat-reply', hooks: ['tc', 'xdp'] },
  { name: 'DSR SYN, flow in conntrack (IPv4 option added)', id: 'dsr-annotated-established', hooks: ['tc', 'xdp'] },
  // What every other packet pays: pod-to-pod across nodes, and the host's own traffic to its address (which carries NodePorts).
  { name: 'not for a Service (passed on)', id: 'not-a-service', hooks: ['tc', 'xdp'] },
  { name: 'to a node address, not a NodePort (passed on)', id: 'host-to-node-address', hooks: ['tc', 'xdp'] },
  // tc egress: a local backend's reply, and what every other packet leaving the node pays.
  { name: 'egress: reply from a local backend', id: 'local-reply', hooks: ['tc'] },
  { name: "egress: leaving, no local backend's reply (passed on)", id: 'leaving', hooks: ['tc'], egress: leavingPacket },
  // IPv6 from outside (tc only: XDP passes IPv6 on), the fixtures of src/sandbox/fixtures/tc6.ts.
  { name: 'IPv6: new flow, local backend', id: 'ipv6-lb-local', fresh: { dport: 80 }, hooks: ['tc'], ipv6: true },
  { name: 'IPv6: new flow, remote backend (SNAT)', id: 'ipv6-snat-remote', fresh: { dport: 84 }, hooks: ['tc'], ipv6: true },
  { name: 'IPv6: established flow, local backend', id: 'ipv6-lb-local-established', hooks: ['tc'], ipv6: true },
  { name: 'IPv6: established flow, remote backend (SNAT)', id: 'ipv6-snat-established', hooks: ['tc'], ipv6: true },
  { name: 'IPv6: reply to an SNATed flow', id: 'ipv6-snat-reply', hooks: ['tc'], ipv6: true },
  { name: 'IPv6 egress: reply from a local backend', id: 'ipv6-local-reply', hooks: ['tc'], ipv6: true },
];

/** One run of a case on a node, ready to be timed: the fixture checked, and for a new
 * flow the flow forgotten before each run. */
function runner(node: DatapathNode, c: (typeof CASES)[number], hook: Hook): () => number {
  const skb = skbContext({ ifindex: node.ifindex });
  const table = c.ipv6 ? TC6_FIXTURES : TC_FIXTURES;
  const tcProgram = c.egress || (!c.wide && !c.arrival && fixture(c.id, table).program === 'tc_egress') ? 'tc_egress' : 'tc_ingress';
  const run = (data: Buffer) => inNetns(node.host.netns, () => (hook === 'tc'
    ? testRun(node.program(tcProgram), { data, ctx: skb })
    : testRun(node.program(XDP_PROGRAM), { data, ctx: xdpContext(node.ifindex, data.length) })).durationNs);
  // A build from before host_ports (compare-builds' base) has no such case.
  const hostPorts = (node.dp.maps as Partial<typeof node.dp.maps>).host_ports;
  if (hostPorts) hostPorts.update(layouts.HostPortsSlot.HOST_PORTS_TRUSTED, c.askHost ? 0n : 1n);
  const f = c.wide ? wideFlow(node) : c.arrival ? dsrArrival(node) : c.egress ? leaving(node, c.egress()) : c.snatDevice ? snatDeviceFlow(node, c.snatDevice) : { sport: c.ipv6 ? CLIENT6_PORT : CLIENT_PORT, input: checked(node, c.id, table).input };
  if (!c.fresh) return () => run(f.input);
  if (c.arrival) {
    // Its binding (the reply's key, the frontend for the replies' source) goes before each run.
    run(f.input);
    if (!node.dp.maps.nat4.entries().some(([, v]) => v.clientAddr === CLIENT_IP && v.clientPort === f.sport && v.frontendAddr === DSR_HERE.address)) {
      throw new Error('dsr arrival: no binding recorded for the client');
    }
    const forget = flowForgetter(node, { saddr: CLIENT_IP, daddr: DSR_HERE.address, sport: f.sport, dport: DSR_HERE.port, proto: 6 });
    return () => {
      forget();
      return run(f.input);
    };
  }
  // The key the runs delete must be the flow's, or every run after the first times an established flow.
  const key4 = { saddr: CLIENT_IP, daddr: NODE_IP, sport: f.sport, dport: c.fresh.dport, proto: 6 };
  const key6 = { saddr: CLIENT6, daddr: LB6, sport: f.sport, dport: c.fresh.dport, proto: 6, dir: Ct6Dir.CT6_DIR_CLIENT };
  run(f.input);
  const held = c.ipv6 ? node.dp.maps.ct6.lookup(key6) : node.dp.maps.ct4.lookup(key4);
  if (!held) throw new Error(`${c.id}: no conntrack entry at ${JSON.stringify(c.ipv6 ? key6 : key4)}`);
  // A new flow each time: its conntrack entry and its reply entries go (bench/new-flow.ts).
  const forget = c.ipv6 ? flowForgetter6(node, key6) : flowForgetter(node, key4);
  const backendId = 'backendId' in held ? held.backendId : 0;
  return () => {
    forget();
    if (c.unshared) node.dp.maps.lb4_backend_hops.delete(backendId);
    return run(f.input);
  };
}

type Cell = Record<'one' | 'many' | 'empty', Stat> & { cpus: number[] };

async function main(): Promise<void> {
  // Two nodes alive at once, maps of one size (an ExternalIP frontend takes a master entry
  // and a slot in each lookup scope): one with the fixtures' Services, one with MANY more.
  const nodes = { one: await datapathNode({ mapSizes: serviceMapSizes(4 * MANY, 2 * MANY), acceleration: 'native' }), many: await datapathNode({ mapSizes: serviceMapSizes(4 * MANY, 2 * MANY), acceleration: 'native' }) };
  const empty = { tc: BpfObject.open(join(defaultObjectsDir(), 'tests', 'empty.bpf.o')), xdp: BpfObject.open(join(defaultObjectsDir(), 'tests', 'xdp_pass.bpf.o')) };
  try {
    // The socket hooks too, as the agent attaches them: a new SNAT binding then asks the
    // host's sockets only about ports the host has bound (host_ports).
    for (const node of Object.values(nodes)) node.dp.attachCgroup({ path: node.host.cgroup, expect: 'subtree' }, { hostNetns: node.host.netns });
    empty.tc.load();
    empty.xdp.load();
    const packet = fixture('nodeport-local').input;
    const probe = nodes.one;
    const emptyRun: Record<Hook, () => number> = {
      tc: () => inNetns(probe.host.netns, () => testRun(empty.tc.program('pass'), { data: packet, ctx: skbContext({ ifindex: probe.ifindex }) }).durationNs),
      xdp: () => inNetns(probe.host.netns, () => testRun(empty.xdp.program('xdp_pass'), { data: packet, ctx: xdpContext(probe.ifindex, packet.length) }).durationNs),
    };
    nodes.one.writer.apply([...TC_SERVICES, WIDE, DSR_HERE, ...TC6_SERVICES]);
    const t0 = Date.now();
    nodes.many.writer.apply([...filler(MANY), ...TC_SERVICES, WIDE, DSR_HERE, ...TC6_SERVICES]);
    const loadMs = Date.now() - t0;
    const rows: Array<{ case: string; hook: Hook } & Cell> = [];
    for (const c of CASES) {
      if (ONLY && !ONLY.test(c.name)) continue;
      for (const hook of c.hooks) {
        if (c.askHost && !(nodes.one.dp.maps as Partial<typeof nodes.one.dp.maps>).host_ports) continue;
        if (c.snatDevice && !(nodes.one.dp.maps as Partial<typeof nodes.one.dp.maps>).snat4_devices) continue;
        if (c.snatDevice) for (const node of Object.values(nodes)) listSnatDevice(node, c.snatDevice, true);
        const cell = interleaved({ one: runner(nodes.one, c, hook), many: runner(nodes.many, c, hook), empty: emptyRun[hook] }, ['one', 'many'], BATCHES, RUNS);
        if (c.snatDevice) for (const node of Object.values(nodes)) listSnatDevice(node, c.snatDevice, false);
        rows.push({ case: `${hook}: ${c.name}`, hook, ...cell.columns, cpus: cell.cpus });
        progress('.');
      }
    }
    progress('\n');
    // The empty program's time is bimodal here (about 60 or about 90 ns in a batch, whatever
    // the cases' times do), so each ratio is against the median of its hook's empty columns
    // over the whole run, not against the flip of its own batches.
    // A hook none of the cases chosen (--cases) runs on has no baseline, row or bars.
    const hooks = (['tc', 'xdp'] as const).filter((h) => rows.some((r) => r.hook === h));
    const baseline = Object.fromEntries(hooks.map((h) => [h, stat(rows.filter((r) => r.hook === h).map((r) => r.empty.median))])) as Partial<Record<Hook, Stat>>;
    const base = (h: Hook): Stat => baseline[h]!;
    const table = markdownTable(
      ['case', 'ns/packet, 1 Service', `ns/packet, ${MANY} Services`, 'empty program, same batches', '× empty (1)', `× empty (${MANY})`, `${MANY} / 1`, 'CPU per batch'],
      [
        ...hooks.map((h) => [`${h}: empty program (median of its column)`, fmtStat(base(h), 0), '', '', '1.00', '', '', '']),
        ...rows.map((r) => [r.case, fmtStat(r.one, 0), fmtStat(r.many, 0), fmtStat(r.empty, 0), ratio(r.one.median, base(r.hook).median), ratio(r.many.median, base(r.hook).median), ratio(r.many.median, r.one.median), r.cpus.join(' ')]),
      ],
    );
    const series = (hook: Hook) => rows.filter((r) => r.hook === hook);
    publish({
      name: 'packet-cost',
      title: 'Per-packet cost of the tc and XDP programs (BPF_PROG_TEST_RUN)',
      command: `npx tsx bench/packet-cost.ts --services ${MANY} --runs ${RUNS}`,
      method: `tc_ingress and xdp_ingress run by BPF_PROG_TEST_RUN in two testbed nodes' namespaces (one with the fixtures' Services, one with ${MANY} more, maps of the same sizes), the kernel's own timing of single runs (PROG_TEST_RUN's repeat runs a program on its own output: after the first repeat a translated packet is a flow the program does not know, so repeats would time that miss). Each case is timed on both nodes and against the empty program of its hook in the same batches, interleaved (bench/interleave.ts): a batch is ${RUNS / CHUNK} rounds in which each CPU in turn (the main thread pinned) makes ${CHUNK} single runs on the first node, ${CHUNK} on the second and ${CHUNK} of the empty program; the batch keeps the CPU on which the two nodes' times summed were lowest, and each column's interquartile mean (the mean of the middle half) of its ${RUNS} runs there ("CPU per batch"); ${BATCHES} batches per case, then the median and spread (min–max) of the batches. The interquartile mean rather than the median, as the kernel's clock here moves in steps of about 10 ns and a median of readings that straddle two steps jumps a whole step (six batches of the empty program: medians 60-90 ns, interquartile means 84.5-90). The two nodes are two loads with maps in other memory: two nodes of one build differed by 1-3% over six batches (up to 10% in one), so differences of a few % between the columns are within that. This machine's two vCPUs take turns being slow for minutes (a program touching many cache lines at about half speed on one of them, the empty program hardly slower), so a column measured alone, or on one CPU, times the host as much as the program; interleaved on every CPU, the columns compared come from one CPU in the same seconds. The empty program carries the timer's fixed cost, as every run does; beyond the clock's steps its time itself drops to about 60 ns in some batches (from about 90), independently of the cases', so the "× empty" ratios are against the median of the hook's empty column over the whole run (the top rows, and the plot's empty bars). Established cases send the fixture's packet of a flow set up once; new flows have their conntrack entry and reply entries (SNAT binding, reverse translation) deleted before each run, so that each run reserves a port and inserts both as a new client's flow does. xdp rows: what XDP does itself (remote backends, replies, DSR), and for a local backend what it costs to hand the packet to tc untouched. ${MANY} Services (ExternalIP frontends, remote backends) loaded in ${loadMs} ms.`,
      tables: [table],
      ratios: rows.map((r) => `${r.case}: ${ratio(r.one.median, base(r.hook).median)}× the empty ${r.hook} program with 1 Service, ${ratio(r.many.median, base(r.hook).median)}× with ${MANY}`),
      plots: [{
        file: 'packet-cost.svg', caption: 'ns per packet by case and hook, 1 and N Services',
        svg: barChart({
          title: 'ns per packet, single runs (lower is better)', yLabel: 'ns',
          groups: hooks.flatMap((h) => [`${h} empty`, ...series(h).map((r) => r.case)]).map((g) => g.replace(/ \(.*\)$/, '').replace('established flow', 'est.').replace('backend', '')),
          series: [
            { name: '1 Service', values: hooks.flatMap((h) => [base(h).median, ...series(h).map((r) => r.one.median)]), spread: hooks.flatMap((h) => [{ lo: base(h).min, hi: base(h).max }, ...series(h).map((r) => ({ lo: r.one.min, hi: r.one.max }))]) },
            { name: `${MANY} Services`, values: hooks.flatMap((h) => [null, ...series(h).map((r) => r.many.median)]), spread: hooks.flatMap((h) => [null, ...series(h).map((r) => ({ lo: r.many.min, hi: r.many.max }))]) },
          ],
        }),
      }],
      data: { services: MANY, batches: BATCHES, runs: RUNS, loadMs, baselineNs: baseline, rows },
    });
  } finally {
    empty.tc.close();
    empty.xdp.close();
    await nodes.one.close();
    await nodes.many.close();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
