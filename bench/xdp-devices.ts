// What XDP costs the traffic of a device without driver XDP, where it runs as generic XDP
// (only where xdpDevices names the device: best-effort alone leaves such a device to tc)
// (after the skb is built; the kernel copies a packet short of XDP's headroom, or a GRO'd
// one, into a new buffer first and keeps the device's own GRO off), against
// tc alone, in a 2-node sandbox whose switch is made a wire for XDP in every mode, so that
// the modes differ only in the agents' XDP, and with GRO on every node's eth0, as on a NIC
// (`--gro off`: off, as a veth has it by default).
// Two topologies (`--topology`):
// - tunnel: the pod network is VXLAN as Flannel makes it (`flannel.1` on each node, both in
//   the agents' devices). Modes: `none` (tc alone), `best-effort` (native XDP on eth0, the
//   tunnel left to tc, as the agent chooses by default) and `best-effort+tunnel` (the tunnel
//   named in xdpDevices: generic XDP on it). Paths: pod to pod through the tunnel (a client
//   pod on node-2, the server pod on node-1: no Service, but every packet passes ferry's
//   programs on both tunnels), and a NodePort on node-2 in SNAT to that pod (forwarded into
//   the tunnel, its replies back out of it). Both agents take each mode.
// - bridge: node-1's address is on a bridge over its NIC (`br0`, ClusterNetwork.bridgeNode),
//   the device its agent chooses. Modes: `none` and `best-effort+br0` (br0 named in
//   xdpDevices: generic XDP on it).
//   Paths: node-1's NodePort in SNAT to the server pod on node-2 (both ways through br0), its
//   NodePort with externalTrafficPolicy: Local to a pod on node-1, and the client straight
//   to that pod (routed through node-1, no Service). node-1's agent takes each mode.
// Per path and mode: iperf3 with 1 and 4 streams, TCP request/response p50 and the machine's
// CPU per request. The modes take turns within each repeat (the agents restarted with the
// mode's setting), so a slow spell of the machine hits all of them.
// Run as root: npx tsx bench/xdp-devices.ts [--topology tunnel|bridge] [--gro on|off] [--seconds 4] [--rr-seconds 2] [--repeat 3] [--modes a,b]
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { TUNNEL, type NodeInfo } from '../src/sandbox/network.js';
import { Sandbox } from '../src/sandbox/sandbox.js';
import { WORKLOADS_BIN, startWorkloads } from '../src/sandbox/workloads/spawn.js';
import type { Host } from '../src/sandbox/netns/testbed.js';
import { barChart } from './plot.js';
import { busyCpuNs, fmtStat, markdownTable, progress, publish, ratio, stat, type Stat } from './report.js';

type Topology = 'tunnel' | 'bridge';
/** An agent setting per mode: what FERRY_ACCELERATION (and any other variable) is. */
const MODES: Record<Topology, Record<string, Record<string, string>>> = {
  tunnel: {
    none: { FERRY_ACCELERATION: 'none' },
    'best-effort': { FERRY_ACCELERATION: 'best-effort' },
    'best-effort+tunnel': { FERRY_ACCELERATION: 'best-effort', FERRY_XDP_DEVICES: `eth0,${TUNNEL.device}` },
  },
  bridge: {
    none: { FERRY_ACCELERATION: 'none' },
    // br0 named: generic XDP on it (without the name, best-effort leaves a device without driver XDP alone).
    'best-effort+br0': { FERRY_ACCELERATION: 'best-effort', FERRY_XDP_DEVICES: 'br0' },
  },
};

const { values } = parseArgs({ options: { topology: { type: 'string' }, gro: { type: 'string' }, seconds: { type: 'string' }, 'rr-seconds': { type: 'string' }, repeat: { type: 'string' }, modes: { type: 'string' } } });
const TOPOLOGY = (values.topology ?? 'tunnel') as Topology;
if (!MODES[TOPOLOGY]) throw new Error(`--topology ${TOPOLOGY}: tunnel or bridge`);
const GRO = values.gro ?? 'on';
if (GRO !== 'on' && GRO !== 'off') throw new Error(`--gro ${GRO}: on or off`);
const SECONDS = Number(values.seconds ?? 4);
const RR_SECONDS = Number(values['rr-seconds'] ?? 2);
const REPEAT = Number(values.repeat ?? 3);
const MODE_NAMES = (values.modes ?? Object.keys(MODES[TOPOLOGY]).join(',')).split(',');
for (const m of MODE_NAMES) if (!MODES[TOPOLOGY][m]) throw new Error(`--modes: unknown mode ${m} (known: ${Object.keys(MODES[TOPOLOGY]).join(', ')})`);
const COMMAND = `npx tsx bench/xdp-devices.ts --topology ${TOPOLOGY} --gro ${GRO} --seconds ${SECONDS} --rr-seconds ${RR_SECONDS} --repeat ${REPEAT} --modes ${MODE_NAMES.join(',')}`;

const ECHO = 7000;
const IPERF = 5201;
const NODEPORT = 30700;
const RR_CPU = '1';

interface RrSample { count: number; failures: number; seconds: number; p50: number; p99: number }
interface PathSpec { name: string; from: Host; ip: string; echo: number; iperf: number }
type Metric = 'gbps1' | 'gbps4' | 'rrP50' | 'cpuUsPerRr' | 'failures';

/** A pod serving the echo and iperf3 on `node`, and a NodePort Service for it at `nodePort` (echo) and `nodePort + 1` (iperf3). */
async function server(sb: Sandbox, name: string, node: NodeInfo, nodePort: number, spec: Record<string, unknown> = {}) {
  await sb.put('Pod', { metadata: { name, namespace: 'default', labels: { app: name } }, spec: { nodeName: node.name, containers: [{ name: 'w', image: 'whoami' }] } });
  const pod = sb.kubelet.podInfo('default', name)!;
  await startWorkloads(pod.host, [{ kind: 'tcp-echo', port: ECHO }], { cpus: RR_CPU });
  pod.host.spawn(['iperf3', '-s', '-p', String(IPERF)]);
  await sb.put('Service', {
    metadata: { name, namespace: 'default' },
    spec: { type: 'NodePort', selector: { app: name }, ports: [{ name: 'echo', port: ECHO, targetPort: ECHO, nodePort }, { name: 'iperf', port: IPERF, targetPort: IPERF, nodePort: nodePort + 1 }], ...spec },
  });
  return pod;
}

/** The sandbox of a topology, its paths, and the nodes whose agents take each mode. */
async function setUp(sb: Sandbox): Promise<{ paths: PathSpec[]; agents: NodeInfo[]; what: string }> {
  const [node1, node2] = sb.net.nodes as [NodeInfo, NodeInfo];
  if (TOPOLOGY === 'tunnel') {
    const target = await server(sb, 'server', node1, NODEPORT);
    await sb.put('Pod', { metadata: { name: 'client', namespace: 'default', labels: { app: 'client' } }, spec: { nodeName: node2.name, containers: [{ name: 'w', image: 'whoami' }] } });
    const client = sb.kubelet.podInfo('default', 'client')!;
    return {
      paths: [
        { name: 'pod to pod (tunnel)', from: client.host, ip: target.ip, echo: ECHO, iperf: IPERF },
        { name: 'NodePort SNAT (node-2 to node-1 through the tunnel)', from: sb.net.client, ip: node2.ip, echo: NODEPORT, iperf: NODEPORT + 1 },
      ],
      agents: [node1, node2],
      what: `the pod network is VXLAN as Flannel makes it (${TUNNEL.device}, VNI ${TUNNEL.vni}, MTU 1450), the agents serving eth0 and ${TUNNEL.device}. Pod to pod: a pod on node-2 to the server pod on node-1 by its address (through both tunnels, no Service). NodePort SNAT: the client outside the cluster to node-2's NodePort, forwarded to the pod on node-1 through the tunnel. Both agents take each mode`,
    };
  }
  await server(sb, 'remote', node2, NODEPORT);
  const local = await server(sb, 'local', node1, NODEPORT + 10, { externalTrafficPolicy: 'Local' });
  await sb.stopAgent(node1);
  await sb.net.bridgeNode(node1);
  return {
    paths: [
      { name: 'NodePort SNAT (node-1 br0 to a pod on node-2)', from: sb.net.client, ip: node1.ip, echo: NODEPORT, iperf: NODEPORT + 1 },
      { name: 'NodePort ETP=Local (node-1 br0 to its pod)', from: sb.net.client, ip: node1.ip, echo: NODEPORT + 10, iperf: NODEPORT + 11 },
      { name: 'to a pod on node-1 (routed through br0)', from: sb.net.client, ip: local.ip, echo: ECHO, iperf: IPERF },
    ],
    agents: [node1],
    what: 'node-1\'s address is on a bridge br0 over its eth0 (a host bridging its NIC), which its agent chooses; node-2\'s agent runs tc alone. Paths from the client outside the cluster: node-1\'s NodePort in SNAT to a pod on node-2, its NodePort with externalTrafficPolicy: Local to a pod on node-1, and straight to that pod by its address. node-1\'s agent takes each mode',
  };
}

async function main(): Promise<void> {
  progress(`xdp-devices (${TOPOLOGY}): sandbox up `);
  const sb = await Sandbox.up({ name: 'xdpdev', nodes: 2, mode: 'snat', announce: 'routes', podNetwork: TOPOLOGY === 'tunnel' ? 'vxlan' : 'routed', log: pino({ level: 'silent' }) });
  try {
    await sb.net.nodeSwitch.prepareForXdp();
    // GRO on every node's eth0 in every mode, as a NIC's driver has it (a veth's is off by
    // default); `--gro off` leaves it off, as the sandbox has it.
    for (const n of sb.net.nodes) await n.host.execOk(['ethtool', '-K', 'eth0', 'gro', GRO]);
    const { paths, agents, what } = await setUp(sb);
    const acc = new Map<string, Record<Metric, number[]>>();
    const add = (path: string, mode: string, k: Metric, v: number) => {
      const key = `${path}\0${mode}`;
      if (!acc.has(key)) acc.set(key, { gbps1: [], gbps4: [], rrP50: [], cpuUsPerRr: [], failures: [] });
      acc.get(key)![k].push(v);
    };
    const rr = async (from: Host, to: string, seconds: number): Promise<RrSample> =>
      JSON.parse(await from.execOk(['taskset', '-c', RR_CPU, process.execPath, WORKLOADS_BIN, 'rr', '--to', to, '--seconds', String(seconds)], { timeoutMs: (seconds + 60) * 1000 })) as RrSample;
    const xdpModes: Record<string, string> = {};
    for (let r = 0; r < REPEAT; r++) {
      for (const mode of MODE_NAMES) {
        progress(`\n[${r + 1}/${REPEAT}] ${mode} `);
        for (const n of agents) {
          await sb.stopAgent(n);
          await sb.startAgent(n, 30_000, { env: MODES[TOPOLOGY][mode] });
        }
        const status = JSON.parse(await agents[0]!.host.execOk(['curl', '-sS', 'http://127.0.0.1:10249/status'])) as { xdp?: Record<string, { mode: string }> };
        xdpModes[mode] = Object.entries(status.xdp ?? {}).map(([d, x]) => `${d} ${x.mode}`).join(', ') || 'none';
        for (const p of paths) {
          await rr(p.from, `${p.ip}:${p.echo}`, 0.5); // warm-up: neighbours, the first flow
          const cpu0 = busyCpuNs();
          const s = await rr(p.from, `${p.ip}:${p.echo}`, RR_SECONDS);
          add(p.name, mode, 'cpuUsPerRr', (busyCpuNs() - cpu0) / 1000 / s.count);
          add(p.name, mode, 'rrP50', s.p50);
          add(p.name, mode, 'failures', s.failures);
          for (const streams of [1, 4] as const) {
            const j = JSON.parse(await p.from.execOk(['iperf3', '-c', p.ip, '-p', String(p.iperf), '-t', String(SECONDS), '-P', String(streams), '-J'], { timeoutMs: (SECONDS + 30) * 1000 })) as { end: { sum_received: { bits_per_second: number } } };
            add(p.name, mode, `gbps${streams}`, j.end.sum_received.bits_per_second / 1e9);
          }
          progress('.');
        }
      }
    }
    progress('\n');
    interface Row { path: string; mode: string; gbps1: Stat; gbps4: Stat; rrP50: Stat; cpuUsPerRr: Stat; failures: number }
    const rows: Row[] = paths.flatMap((p) => MODE_NAMES.map((mode) => {
      const a = acc.get(`${p.name}\0${mode}`)!;
      return { path: p.name, mode, gbps1: stat(a.gbps1), gbps4: stat(a.gbps4), rrP50: stat(a.rrP50), cpuUsPerRr: stat(a.cpuUsPerRr), failures: a.failures.reduce((x, y) => x + y, 0) };
    }));
    const base = (path: string) => rows.find((r) => r.path === path && r.mode === MODE_NAMES[0])!;
    const table = markdownTable(
      ['path', 'mode', 'iperf3 1 stream Gbit/s', 'iperf3 4 streams Gbit/s', 'TCP RR p50 µs', 'CPU µs per RR', `1 stream / ${MODE_NAMES[0]}`, `4 streams / ${MODE_NAMES[0]}`, 'RR failed'],
      rows.map((r) => [r.path, r.mode, fmtStat(r.gbps1, 2), fmtStat(r.gbps4, 2), fmtStat(r.rrP50), fmtStat(r.cpuUsPerRr), ratio(r.gbps1.median, base(r.path).gbps1.median), ratio(r.gbps4.median, base(r.path).gbps4.median), r.failures]),
    );
    const ratios = rows.filter((r) => r.mode !== MODE_NAMES[0]).map((r) => {
      const b = base(r.path);
      return `${r.path}, ${r.mode}/${b.mode}: 1 stream ${ratio(r.gbps1.median, b.gbps1.median)}, 4 streams ${ratio(r.gbps4.median, b.gbps4.median)}, RR p50 ${ratio(r.rrP50.median, b.rrP50.median)}, CPU per RR ${ratio(r.cpuUsPerRr.median, b.cpuUsPerRr.median)}`;
    });
    const groups = rows.map((r) => `${r.path.split(' (')[0]}, ${r.mode}`);
    const series = (name: string, f: (r: Row) => Stat) => ({ name, values: rows.map((r) => f(r).median), spread: rows.map((r) => ({ lo: f(r).min, hi: f(r).max })) });
    publish({
      name: `xdp-devices-${TOPOLOGY}${GRO === 'off' ? '-no-gro' : ''}`,
      title: `XDP on a device without driver XDP (${TOPOLOGY === 'tunnel' ? 'an overlay\'s tunnel' : 'a bridge carrying the node\'s address'}): tc alone against XDP`,
      command: COMMAND,
      method: `a 2-node sandbox in SNAT, the switch made a wire for XDP (complete checksums, no offloads) and GRO ${GRO} on every node's eth0 (${GRO === 'on' ? 'as a NIC has it' : 'as a veth has it by default'}) in every mode; ${what}. Modes (XDP per device on node-1 as its agent's /status gave it): ${MODE_NAMES.map((m) => `${m}: ${xdpModes[m]}`).join('; ')}. RR: 64-byte request/response for ${RR_SECONDS} s on one connection, client and server pinned to CPU ${RR_CPU}; iperf3 for ${SECONDS} s. CPU: the whole machine's busy time per request (10 ms ticks). The modes take turns in each of ${REPEAT} repeats (the agents restarted with the mode's setting); median of the repeats, spread min–max in brackets.`,
      tables: [table],
      ratios,
      plots: [{ file: `xdp-devices-${TOPOLOGY}${GRO === 'off' ? '-no-gro' : ''}.svg`, caption: 'iperf3 throughput per path and mode', svg: barChart({ title: `iperf3 (${TOPOLOGY}, GRO ${GRO}; Gbit/s, higher is better)`, yLabel: 'Gbit/s', groups, series: [series('1 stream', (r) => r.gbps1), series('4 streams', (r) => r.gbps4)] }) }],
      data: { topology: TOPOLOGY, gro: GRO, seconds: SECONDS, rrSeconds: RR_SECONDS, repeat: REPEAT, modes: MODE_NAMES.map((m) => ({ name: m, env: MODES[TOPOLOGY][m], xdp: xdpModes[m] })), rows },
    });
  } finally {
    await sb.down();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
