// Packets per second one CPU forwards through a node's NodePort to a backend on another node,
// with the testbed's own work taken out of the way: the kernel itself is the source and the
// sink sits at the forwarding node's first hop. bench/pps.ts measures the whole testbed
// (trafgen, a switch, a receiving node), whose shared CPUs hold every dataplane near the
// same rate on a small machine; this one measures what the forwarding node's dataplane costs.
//
// Source: BPF_PROG_TEST_RUN in XDP live-frames mode, in node-2's netns, on node-2's device:
// bpf/tests/xdp_inject.bpf.c writes each frame (UDP datagrams or TCP SYNs from the client's
// address to node-2's NodePort, over 1024 source ports) and hands it to the dataplane under
// test as if the frame had arrived there: ferry's xdp_ingress by a tail call, or the stack
// (XDP_PASS: ferry's tc programs, on the tcx hooks and as a clsact filter, or kube-proxy-shaped
// iptables / nftables rules). Sink:
// bpf/tests/xdp_sink.bpf.c on the switch port node-2 sends into counts and drops what arrives
// translated (to the pod on node-1, from node-2's address). The whole path runs in the
// injecting thread (one syscall per run; veth's receive work runs as the batch's softirq).
// Where the kernel refuses live-frames test runs (EPERM even as root, as 6.18.44-fc-v1300
// does), the source is the sink itself (`--source loop`): xdp_recycle writes each frame it
// counts over with the next client frame and sends it back to node-2 (XDP_TX), so that a few
// seeded frames circulate through node-2's dataplane in softirq on one CPU; node-2's device
// then runs an XDP program in every row (ferry's, the bounce, or xdp_pass: a veth takes XDP
// frames only where its peer polls), as the live-frames source did.
// Run as root: npx tsx bench/pps-node.ts [--services 1,10000] [--frames 1000000] [--rounds 5]
//   [--source live|loop] (default: live where the kernel allows it) [--in-flight 64] [--ms 1000]
//   [--dataplanes 'ferry xdp,ferry tc']: only those (and iptables, the ratios' base)
//   [--profile 'ferry tc']: after the rounds, one more run per protocol of that dataplane (at
//   the first Service count) under `perf record -a -g`; the profile's top symbols are written
//   beside the report (pps-node-profile-<dataplane>-<proto>.txt), for where a frame's time goes.
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { MiniCluster, type TestService } from '../src/sandbox/mini-cluster.js';
import { CLIENT_NET, type PodInfo } from '../src/sandbox/network.js';
import { TARGET_IP, clusterIP, iptablesRules, nftRules } from './kube-proxy-rules.js';
import { serviceMapSizes } from './map-sizes.js';
import { barChart } from './plot.js';
import { inNetns } from '../src/sys/netns.js';
import { execOk } from '../src/sys/exec.js';
import { BpfObject, type Program } from '../src/ebpf/object.js';
import { attachXdpDevice } from '../src/ebpf/link-xdp.js';
import { ifindexOf } from '../src/ebpf/link-tc.js';
import { u32Codec, u64Codec } from '../src/ebpf/codec.js';
import { runLiveFrames, testRun } from '../src/ebpf/test-run.js';
import { FrameSender } from '../src/sys/packet-socket.js';
import { ErrorCode } from '../src/errors.js';
import { XDP_PROGRAM } from '../src/datapath/xdp-devices.js';
import { defaultObjectsDir } from '../src/datapath/loader.js';
import { busyCpuNs, fmtStat, markdownTable, median, progress, publish, stat, type Stat } from './report.js';
import { be16Constant, be32Constant, injectorSettings, type InjectedFlow } from './inject-frame.js';
import { macBytes } from '../src/packet/addr.js';
import { profileWhile } from './perf-profile.js';
import { detachStrayPrograms } from '../src/datapath/stray-programs.js';
import { attachTcHooks, type TcAttachMode } from '../src/datapath/tc-hooks.js';
import { tcxSupported } from '../src/ebpf/link-tcx.js';

const { values } = parseArgs({ options: { services: { type: 'string' }, frames: { type: 'string' }, rounds: { type: 'string' }, profile: { type: 'string' }, source: { type: 'string' }, dataplanes: { type: 'string' }, 'in-flight': { type: 'string' }, ms: { type: 'string' } } });
const COUNTS = (values.services ?? '1,10000').split(',').map(Number);
const FRAMES = Number(values.frames ?? 1_000_000);
const ROUNDS = Number(values.rounds ?? 5);


const PROFILE = values.profile as Dataplane | undefined;
const IN_FLIGHT = Number(values['in-flight'] ?? 64);
const RUN_MS = Number(values.ms ?? 1000);
type Source = 'live' | 'loop';
const SOURCE_ARG = values.source as Source | undefined;
const SINK_PORT = 9000;
const NODE_PORT = { udp: 30900, tcp: 30901 } as const;
type Proto = keyof typeof NODE_PORT;
/** 'xdp bounce': the floor, a forwarder that only readdresses both ends and bounces (bpf/tests/xdp_bounce.bpf.c). */
/** 'ferry tc': its programs on the kernel's tcx hooks where it has them (the agent's default);
 * 'ferry tc (clsact)': the same programs as a clsact filter, the way before tcx (tcAttach). */
const ALL_DATAPLANES = ['xdp bounce', 'ferry xdp', 'ferry tc', 'ferry tc (clsact)', 'iptables', 'nftables'] as const;
type Dataplane = (typeof ALL_DATAPLANES)[number];
// On a kernel without tcx 'ferry tc' is the clsact filter already.
// --dataplanes picks some (iptables always: the ratios' base).
const PICKED = values.dataplanes?.split(',').map((d) => d.trim());
const DATAPLANES: readonly Dataplane[] = ALL_DATAPLANES.filter((d) => (tcxSupported() || d !== 'ferry tc (clsact)') && (!PICKED || PICKED.includes(d) || d === 'iptables'));

interface Run { pps: number; cpuNsPerPacket: number; lost: number; forwarded: number }
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** The circulating source's slots (bpf/tests/xdp_sink.bpf.c `loop`). */
const LOOP_CIRCULATE = 0;
const LOOP_DRAINED = 1;
interface Row { dataplane: Dataplane; services: number; proto: Proto; pps: Stat; cpuNsPerPacket: Stat; lost: number; perRoundVsIptables: Stat; programNs?: Record<string, number> }

/** run_time_ns and run_cnt of every loaded program, summed by name (bpftool). */
async function programStats(): Promise<Map<string, { ns: number; runs: number }>> {
  const all = JSON.parse(await execOk('bpftool', ['-j', 'prog', 'show'])) as Array<{ name?: string; run_time_ns?: number; run_cnt?: number }>;
  const out = new Map<string, { ns: number; runs: number }>();
  for (const p of all) {
    if (!p.name) continue;
    const have = out.get(p.name) ?? { ns: 0, runs: 0 };
    out.set(p.name, { ns: have.ns + (p.run_time_ns ?? 0), runs: have.runs + (p.run_cnt ?? 0) });
  }
  return out;
}

const macOf = async (host: { execOk(a: string[]): Promise<string> }, dev: string): Promise<string> =>
  (JSON.parse(await host.execOk(['ip', '-j', 'link', 'show', dev])) as Array<{ address: string }>)[0]!.address;

/** Whether this kernel runs XDP live-frames test runs (some refuse them with EPERM even to root). */
function liveFramesAllowed(inj: BpfObject, ifindex: number): boolean {
  try {
    runLiveFrames(inj.program('xdp_inject'), { data: Buffer.alloc(60), ifindex, frames: 1 });
    return true;
  } catch (e) {
    if ((e as { code?: string }).code === ErrorCode.Permission) return false;
    throw e;
  }
}

async function main(): Promise<void> {
  if (!Number.isInteger(FRAMES) || FRAMES < 10_000) throw new Error('--frames: at least 10000');
  if (SOURCE_ARG !== undefined && SOURCE_ARG !== 'live' && SOURCE_ARG !== 'loop') throw new Error('--source: live or loop');
  if (!Number.isInteger(IN_FLIGHT) || IN_FLIGHT < 1 || IN_FLIGHT > 200) throw new Error('--in-flight: 1..200 (a veth ring holds 256)');
  if (!Number.isInteger(RUN_MS) || RUN_MS < 100) throw new Error('--ms: at least 100');
  const unknown = PICKED?.filter((d) => !(ALL_DATAPLANES as readonly string[]).includes(d));
  if (unknown?.length) throw new Error(`--dataplanes: ${unknown.join(', ')} unknown (${ALL_DATAPLANES.join(', ')})`);
  if (PROFILE !== undefined && !DATAPLANES.includes(PROFILE)) throw new Error(`--profile: one of ${DATAPLANES.join(', ')}`);
  const max = Math.max(...COUNTS);
  progress('pps-node: 2-node testbed ');
  const c = await MiniCluster.create({ nodes: 2, mapSizes: serviceMapSizes(4 * max, 2 * max), xdp: true });
  const opened: Array<{ close(): void }> = [];
  try {
    const sw = c.net.nodeSwitch;
    if (sw.kind !== 'bridge') throw new Error(`pps-node needs the bridge switch (the sink runs on node-2's switch port); this machine gave a ${sw.kind}`);
    const sink = await c.pod('sink', 1);
    const lb = c.nodes[1]!;
    const lbMac = await macOf(lb.host, lb.device);
    const port = sw.portsByHost()[lb.host.name]!;

    const bounce = BpfObject.open(join(defaultObjectsDir(), 'tests', 'xdp_bounce.bpf.o'));
    opened.push(bounce);
    bounce.setConstant('src_mac', macBytes(lbMac));
    bounce.setConstant('dst_mac', macBytes(await macOf(c.nodes[0]!.host, c.nodes[0]!.device)));
    bounce.setConstant('dst_addr', be32Constant(sink.ip));
    bounce.setConstant('dst_port', be16Constant(SINK_PORT));
    bounce.setConstant('src_addr', be32Constant(lb.ip));
    bounce.load();

    // Per protocol: the injector (live frames; else the seeds' writer) and the sink, which
    // for the circulating source writes that protocol's frames.
    const injectors = new Map<Proto, BpfObject>();
    const sinks = new Map<Proto, BpfObject>();
    for (const proto of ['udp', 'tcp'] as Proto[]) {
      const flow: InjectedFlow = { proto, srcMac: '02:00:00:00:00:01', dstMac: lbMac, saddr: CLIENT_NET.client, daddr: lb.ip, dport: NODE_PORT[proto] };
      const inj = BpfObject.open(join(defaultObjectsDir(), 'tests', 'xdp_inject.bpf.o'));
      opened.push(inj);
      const sinkObj = BpfObject.open(join(defaultObjectsDir(), 'tests', 'xdp_sink.bpf.o'));
      opened.push(sinkObj);
      for (const [name, v] of Object.entries(injectorSettings(flow))) {
        inj.setConstant(name, v);
        sinkObj.setConstant(name, v);
      }
      sinkObj.setConstant('sink_addr', be32Constant(sink.ip));
      sinkObj.setConstant('sink_port', be16Constant(SINK_PORT));
      sinkObj.setConstant('from_addr', be32Constant(lb.ip));
      inj.load();
      sinkObj.load();
      injectors.set(proto, inj);
      sinks.set(proto, sinkObj);
    }
    const ifindex = inNetns(lb.host.netns, () => ifindexOf(lb.device));
    const source: Source = SOURCE_ARG ?? (inNetns(lb.host.netns, () => liveFramesAllowed(injectors.get('udp')!, ifindex)) ? 'live' : 'loop');
    progress(`(source: ${source}) `);
    const portIndex = inNetns(sw.host.netns, () => ifindexOf(port));
    // The switch port's program, replacing its pass-all one (which lets veth take XDP_TX
    // frames: so do these): one per protocol for the circulating source.
    let sinkLink: { close(): void } | undefined;
    let sinkProto: Proto | undefined;
    const sinkFor = (proto: Proto): BpfObject => {
      if (sinkProto !== (source === 'loop' ? proto : 'udp')) {
        sinkLink?.close();
        sinkProto = source === 'loop' ? proto : 'udp';
        sinkLink = inNetns(sw.host.netns, () => attachXdpDevice(sinks.get(sinkProto!)!.program(source === 'loop' ? 'xdp_recycle' : 'xdp_sink'), port, 'native'));
      }
      return sinks.get(sinkProto)!;
    };
    opened.push({ close: () => sinkLink?.close() });
    const sunk = (proto: Proto): number => (sinkFor(proto).map('sunk', u32Codec, u64Codec).lookupPerCpu(0) ?? []).reduce((a, b) => a + Number(b), 0);

    const runLive = (proto: Proto, frames: number): Run => {
      const inj = injectors.get(proto)!;
      const s0 = sunk(proto);
      const cpu0 = busyCpuNs();
      const { wallNs } = inNetns(lb.host.netns, () => runLiveFrames(inj.program('xdp_inject'), { data: Buffer.alloc(60), ifindex, frames }));
      const cpu = busyCpuNs() - cpu0;
      const forwarded = sunk(proto) - s0;
      return { pps: forwarded / (wallNs / 1e9), cpuNsPerPacket: forwarded ? cpu / forwarded : NaN, lost: frames - forwarded, forwarded };
    };
    /** The circulating source: IN_FLIGHT seeds sent into node-2 from its switch port, counted
     * for `ms` after a settling tenth, then drained; lost: the seeds that did not come back. */
    const seeder = new FrameSender();
    opened.push(seeder);
    const runLoop = async (proto: Proto, ms: number): Promise<Run> => {
      const loop = sinkFor(proto).map('loop', u32Codec, u64Codec);
      const drained0 = Number(loop.lookup(LOOP_DRAINED) ?? 0n);
      const inj = injectors.get(proto)!;
      const seeds = Array.from({ length: IN_FLIGHT }, () => testRun(inj.program('xdp_inject'), { data: Buffer.alloc(60) }).data);
      loop.update(LOOP_CIRCULATE, 1n);
      inNetns(sw.host.netns, () => seeder.send(portIndex, seeds));
      await sleep(Math.max(50, ms / 10));
      const s0 = sunk(proto);
      const cpu0 = busyCpuNs();
      const t0 = process.hrtime.bigint();
      await sleep(ms);
      const s1 = sunk(proto);
      const cpu = busyCpuNs() - cpu0;
      const wallNs = Number(process.hrtime.bigint() - t0);
      loop.update(LOOP_CIRCULATE, 0n);
      await sleep(50);
      const forwarded = s1 - s0;
      return { pps: forwarded / (wallNs / 1e9), cpuNsPerPacket: forwarded ? cpu / forwarded : NaN, lost: IN_FLIGHT - (Number(loop.lookup(LOOP_DRAINED) ?? 0n) - drained0), forwarded };
    };
    const run = async (proto: Proto, frames: number): Promise<Run> => (source === 'live' ? runLive(proto, frames) : runLoop(proto, Math.round((RUN_MS * frames) / FRAMES)));
    const services = (n: number): TestService[] => [
      ...Array.from({ length: n - 1 }, (_, i) => ({ clusterIP: clusterIP(i), ports: [{ port: 80, proto: 'TCP' as const, targetPort: 8080 }], endpoints: [sink] })),
      { clusterIP: TARGET_IP, ports: [{ port: NODE_PORT.udp, proto: 'UDP', targetPort: SINK_PORT, nodePort: NODE_PORT.udp }, { port: NODE_PORT.tcp, proto: 'TCP', targetPort: SINK_PORT, nodePort: NODE_PORT.tcp }], endpoints: [sink] },
    ];
    const rules = (dp: 'iptables' | 'nftables', n: number, proto: Proto, pod: PodInfo) => (dp === 'iptables' ? iptablesRules : nftRules)(n - 1, pod.ip, NODE_PORT[proto], { proto, podPort: SINK_PORT });
    let ferryAttached = true;
    let tcMode: TcAttachMode = lb.dp.tcMode;
    /** Node-2 set up for one dataplane and protocol; the injector's tail call set. */
    // The circulating source's frames reach node-2 by XDP_TX from its switch port, which a
    // veth takes only where node-2's device runs an XDP program: ferry's, the bounce, or this.
    const pass = BpfObject.open(join(defaultObjectsDir(), 'tests', 'xdp_pass.bpf.o'));
    opened.push(pass);
    pass.load();
    let nodeXdpLink: { close(): void } | undefined;
    const nodeXdp = (program?: Program): void => {
      nodeXdpLink?.close();
      nodeXdpLink = program && inNetns(lb.host.netns, () => attachXdpDevice(program, lb.device, 'native'));
    };
    opened.push({ close: () => nodeXdp() });
    const setUp = async (dp: Dataplane, n: number, proto: Proto): Promise<void> => {
      nodeXdp();
      await lb.host.execOk(['iptables', '-t', 'nat', '-F']);
      await lb.host.execOk(['nft', 'flush', 'ruleset']);
      const ferry = dp === 'ferry xdp' || dp === 'ferry tc' || dp === 'ferry tc (clsact)';
      c.apply(ferry ? services(n) : []);
      // The netfilter rows run with none of ferry's programs on node-2's device: even passing
      // everything on, they run for each packet (tc_ingress and tc_egress 0.06-0.14 µs each here).
      if (ferry && !ferryAttached) {
        inNetns(lb.host.netns, () => lb.dp.attachDevice(lb.device));
        tcMode = lb.dp.tcMode;
      }
      // The clsact row: the same programs moved into a clsact filter (tcx ones taken off), and back.
      const mode: TcAttachMode = dp === 'ferry tc (clsact)' ? 'clsact' : lb.dp.tcMode;
      if (ferry && mode !== tcMode) {
        inNetns(lb.host.netns, () => attachTcHooks({ ingress: lb.dp.tc.program('tc_ingress'), egress: lb.dp.tc.program('tc_egress') }, lb.device, mode, false).forEach((l) => l.disown()));
        tcMode = mode;
      }
      if (!ferry && ferryAttached) {
        inNetns(lb.host.netns, () => (lb.dp.setXdp(lb.device, 'off'), lb.dp.forgetDevice(lb.device), detachStrayPrograms([lb.device], new Set())));
        await lb.host.exec(['tc', 'qdisc', 'del', 'dev', lb.device, 'clsact']); // if the clsact row made one
      }
      ferryAttached = ferry;
      if (ferry) inNetns(lb.host.netns, () => lb.dp.setXdp(lb.device, dp === 'ferry xdp' ? 'native' : 'off'));
      if (dp === 'iptables') await lb.host.execOk(['iptables-restore'], { input: rules(dp, n, proto, sink), timeoutMs: 600_000 });
      if (dp === 'nftables') await lb.host.execOk(['nft', '-f', '-'], { input: rules(dp, n, proto, sink), timeoutMs: 600_000 });
      // Live frames: the injector hands each frame on by a tail call. (Not the circulating
      // source's: its seeds are the injector's test runs, which must not go through it.)
      const next = injectors.get(proto)!.map('next', u32Codec, u32Codec);
      const target = source === 'loop' ? undefined : dp === 'ferry xdp' ? lb.dp.xdpProgram(lb.device) : dp === 'xdp bounce' ? bounce.program('xdp_bounce') : undefined;
      if (target) next.update(0, target.fd);
      else next.delete(0);
      if (source === 'loop' && dp !== 'ferry xdp') nodeXdp(dp === 'xdp bounce' ? bounce.program('xdp_bounce') : pass.program('xdp_pass'));
    };

    const runs = new Map<string, Run[]>();
    const key = (dp: Dataplane, n: number, proto: Proto) => `${dp}|${n}|${proto}`;
    // The programs' own time per frame: one more run per cell with the kernel's BPF
    // statistics on (they cost a little, so not in the counted runs). xdp_inject's includes
    // the program it tail-calls (ferry's xdp_ingress, or the bounce); the circulating source's
    // programs run each on their own (xdp_recycle on the switch port, node-2's XDP program).
    const programNs = new Map<string, Record<string, number>>();
    const measurePrograms = async (k: string, proto: Proto): Promise<void> => {
      const was = (await execOk('sysctl', ['-n', 'kernel.bpf_stats_enabled'])).trim();
      await execOk('sysctl', ['-qw', 'kernel.bpf_stats_enabled=1']);
      try {
        const before = await programStats();
        const { forwarded } = await run(proto, 200_000);
        const after = await programStats();
        programNs.set(k, Object.fromEntries(['xdp_inject', 'xdp_recycle', 'xdp_pass', 'xdp_bounce', XDP_PROGRAM, 'tc_ingress', 'tc_egress'].flatMap((name) => {
          const a = after.get(name) ?? { ns: 0, runs: 0 };
          const b = before.get(name) ?? { ns: 0, runs: 0 };
          return a.runs - b.runs > forwarded / 2 ? [[name, (a.ns - b.ns) / (a.runs - b.runs)]] : [];
        })));
      } finally {
        await execOk('sysctl', ['-qw', `kernel.bpf_stats_enabled=${was || '0'}`]);
      }
    };
    for (const n of COUNTS) {
      for (let r = 0; r < ROUNDS; r++) {
        progress(`\n${n} Services, round ${r + 1}: `);
        // Each round in another order, so that a slow spell of the machine falls on different dataplanes.
        const order = DATAPLANES.map((_, i) => DATAPLANES[(i + r) % DATAPLANES.length]!);
        for (const dp of order) {
          for (const proto of ['udp', 'tcp'] as Proto[]) {
            await setUp(dp, n, proto);
            await run(proto, 4096); // warm-up: flows, conntrack entries, neighbours
            const k = key(dp, n, proto);
            runs.set(k, [...(runs.get(k) ?? []), await run(proto, FRAMES)]);
            if (r === 0) await measurePrograms(k, proto);
            progress('.');
          }
        }
      }
    }
    if (PROFILE) {
      for (const proto of ['udp', 'tcp'] as Proto[]) {
        await setUp(PROFILE, COUNTS[0]!, proto);
        await run(proto, 4096);
        await profileWhile(`pps-node-profile-${PROFILE.replace(/[^a-z0-9]+/g, '-').replace(/-$/, '')}-${proto}`, async () => void (await run(proto, FRAMES)));
        progress('p');
      }
    }
    await setUp('ferry tc', 1, 'udp'); // rules flushed, ferry attached as the testbed made it
    c.apply([]);
    progress('\n');

    const rows: Row[] = [];
    for (const n of COUNTS) {
      for (const proto of ['udp', 'tcp'] as Proto[]) {
        const base = runs.get(key('iptables', n, proto))!;
        for (const dp of DATAPLANES) {
          const rs = runs.get(key(dp, n, proto))!;
          rows.push({ dataplane: dp, services: n, proto, pps: stat(rs.map((x) => x.pps)), cpuNsPerPacket: stat(rs.map((x) => x.cpuNsPerPacket)), lost: rs.reduce((a, x) => a + x.lost, 0), perRoundVsIptables: stat(rs.map((x, i) => x.pps / base[i]!.pps)), ...(programNs.has(key(dp, n, proto)) ? { programNs: programNs.get(key(dp, n, proto))! } : {}) });
        }
      }
    }
    const loopMethod = `a 2-node testbed (MiniCluster, its switch a bridge). The source circulates (this kernel refuses XDP live-frames test runs): ${IN_FLIGHT} frames, seeded once per run from the switch's port for node-2 (node-2's veth peer; AF_PACKET), go round between node-2's dataplane and bpf/tests/xdp_sink.bpf.c's xdp_recycle on that port, which counts each frame that arrives translated (to the pod on node-1, from node-2's address) and writes it over with the next client frame (bpf/tests/inject_frame.h: 60-byte UDP datagrams or TCP SYNs from the client's address to node-2's NodePort, cycling over 1024 source ports, the flows known to conntrack after the warm-up, as in steady traffic) sent back to node-2 with XDP_TX. Node-2's device runs an XDP program in every row (a veth takes XDP_TX frames only where its peer polls): ferry xdp: ferry's xdp_ingress (as the agent attaches it natively); xdp bounce: a forwarder that only readdresses both ends and bounces (no lookup, no state: the floor, what the testbed itself costs); the others: bpf/tests/xdp_pass.bpf.c, the frame becomes an skb received on node-2's device, through ferry's tc programs (ferry tc: on the kernel's tcx hooks; ferry tc (clsact): as a clsact qdisc's cls_bpf filter) or kube-proxy-shaped rules (bench/kube-proxy-rules.ts, with N−1 ClusterIP fillers; ferry's programs taken off node-2's device for those rows), routed and sent out. The loop runs in softirq on one CPU: frames counted over a run's wall time (${RUN_MS} ms, after a settling tenth) are the forwarded rate of one CPU, including the recycler's write and bounce (the same in every row). Machine CPU: both CPUs' busy time (/proc/stat) over the run per forwarded packet. Frames lost: seeds that were not drained back when the run ended (a frame any hop dropped leaves the loop). Program ns per frame: one more 200 ms run per cell in the first round with kernel.bpf_stats_enabled=1, run time over run count of each program that ran for at least half the frames. ${ROUNDS} rounds, each round every dataplane in turn (in a rotated order) and the ratios taken within the round: median [min–max].`;
    const kpps = (s: Stat) => fmtStat({ median: s.median / 1000, min: s.min / 1000, max: s.max / 1000 }, 0);
    const table = markdownTable(
      ['dataplane', 'Services', 'packets', 'forwarded kpps (one CPU)', 'forwarded / iptables, per round', 'machine CPU ns per packet', source === 'live' ? 'frames not forwarded' : `frames lost (of ${IN_FLIGHT} going round, per run)`, 'program ns per frame (BPF statistics)'],
      rows.map((r) => [r.dataplane, r.services, r.proto === 'udp' ? 'UDP 60 B' : 'TCP SYN 60 B', kpps(r.pps), fmtStat(r.perRoundVsIptables, 2), fmtStat(r.cpuNsPerPacket, 0), r.lost,
        Object.entries(r.programNs ?? {}).map(([name, ns]) => `${name} ${ns.toFixed(0)}`).join(', ') || '-']),
    );
    const find = (dp: Dataplane, n: number, proto: Proto) => rows.find((r) => r.dataplane === dp && r.services === n && r.proto === proto)!;
    const ratios = COUNTS.flatMap((n) => (['udp', 'tcp'] as Proto[]).map((proto) => {
      const has = (dp: Dataplane) => DATAPLANES.includes(dp);
      const m = (dp: Dataplane) => find(dp, n, proto).perRoundVsIptables.median.toFixed(2);
      const perRound = (a: Dataplane, b: Dataplane) => median(runs.get(key(a, n, proto))!.map((x, i) => x.pps / runs.get(key(b, n, proto))![i]!.pps)).toFixed(2);
      const parts = [
        ...(['ferry xdp', 'ferry tc', 'ferry tc (clsact)', 'nftables'] as const).filter(has).map((dp) => `${dp} / iptables ${m(dp)}`),
        ...(has('ferry tc') && has('ferry tc (clsact)') ? [`tcx / clsact ${perRound('ferry tc', 'ferry tc (clsact)')}`] : []),
        ...(has('ferry tc') && has('nftables') ? [`ferry tc / nftables ${perRound('ferry tc', 'nftables')}`] : []),
        ...(has('xdp bounce') ? [`the floor (xdp bounce) / iptables ${m('xdp bounce')}`] : []),
      ];
      return `${n} Services, ${proto === 'udp' ? 'UDP' : 'TCP SYN'}: ${parts.join(', ')} (medians of per-round ratios)`;
    }));
    publish({
      name: 'pps-node',
      title: "Packets per second one CPU forwards through a node's NodePort to a remote backend: ferry XDP and tc against kube-proxy-shaped iptables and nftables rules",
      command: `npx tsx bench/pps-node.ts --services ${COUNTS.join(',')} --rounds ${ROUNDS} --source ${source}${source === 'live' ? ` --frames ${FRAMES}` : ` --in-flight ${IN_FLIGHT} --ms ${RUN_MS}`}${PROFILE ? ` --profile '${PROFILE}'` : ''}`,
      method: source === 'loop' ? loopMethod : `a 2-node testbed (MiniCluster, its switch a bridge). The source is the kernel: BPF_PROG_TEST_RUN in XDP live-frames mode (BPF_F_TEST_XDP_LIVE_FRAMES, batches of 64) of bpf/tests/xdp_inject.bpf.c, in node-2's netns on node-2's device, so each frame enters node-2 as if received there: 60-byte UDP datagrams or TCP SYNs from the client's address to node-2's NodePort, cycling over 1024 source ports (the flows known to conntrack after the warm-up, as in steady traffic). ferry xdp: the injector tail-calls ferry's xdp_ingress (the program the agent attaches natively, with its device settings), whose XDP_TX goes out of node-2's device; xdp bounce: it tail-calls a forwarder that only readdresses both ends and bounces (no lookup, no state: the floor, what the testbed itself costs); the others: XDP_PASS, the frame becomes an skb received on node-2's device, through ferry's tc programs (ferry tc: on the kernel's tcx hooks, as the agent attaches them where the kernel has tcx; ferry tc (clsact): the same programs as a clsact qdisc's cls_bpf filter, as before tcx and on older kernels) or kube-proxy-shaped rules (bench/kube-proxy-rules.ts, with N−1 ClusterIP fillers; ferry's programs taken off node-2's device for those rows), routed and sent out. The sink is bpf/tests/xdp_sink.bpf.c on the switch's port for node-2 (node-2's veth peer): it counts and drops the frames that arrive translated (to the pod on node-1, from node-2's address), so no further hop is paid. Everything runs in the injecting thread: the run's wall time over the frames the sink counted is the forwarded rate of one CPU. Machine CPU: both CPUs' busy time (/proc/stat) over the run per forwarded packet (about the injecting CPU's alone when nothing else runs). Program ns per frame: one more run of 200000 frames per cell in the first round with kernel.bpf_stats_enabled=1, run time over run count of xdp_inject (which includes the program it tail-calls), tc_ingress and tc_egress (a program that ran for fewer than half the frames is left out). ${FRAMES} frames per run after a 4096-frame warm-up, ${ROUNDS} rounds, each round every dataplane in turn (in a rotated order) and the ratios taken within the round: median [min–max].`,
      tables: [table],
      ratios,
      plots: [{
        file: 'pps-node.svg', caption: 'forwarded packets per second, one CPU',
        svg: barChart({
          title: 'NodePort → remote backend, one CPU: forwarded kpps (median, min–max)', yLabel: 'kpps',
          groups: COUNTS.flatMap((n) => (['udp', 'tcp'] as Proto[]).map((p) => `${n} Services, ${p === 'udp' ? 'UDP' : 'SYN'}`)),
          series: DATAPLANES.map((dp) => {
            const cells = COUNTS.flatMap((n) => (['udp', 'tcp'] as Proto[]).map((p) => find(dp, n, p).pps));
            return { name: dp, values: cells.map((s) => s.median / 1000), spread: cells.map((s) => ({ lo: s.min / 1000, hi: s.max / 1000 })) };
          }),
        }),
      }],
      data: { frames: FRAMES, rounds: ROUNDS, rows },
    });
  } finally {
    for (const o of opened.reverse()) o.close();
    await c.close();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
