// XDP with an overlay's tunnel among ferry's devices: what generic XDP on the tunnel costs.
// A 2-node sandbox over VXLAN made as Flannel makes it (`flannel.1` on each node, both in
// the agents' devices), the switch made a wire for XDP in every mode, so that the modes
// differ only in the agents' XDP: `none` (tc alone), `best-effort` (native XDP on eth0, the
// tunnel left to tc, as the agent chooses by default) and `best-effort+tunnel` (the tunnel
// named in xdpDevices: generic XDP on it, as it has no driver XDP).
// Paths: pod to pod through the tunnel (a client pod on node-2, the server pod on node-1:
// no Service, but every packet passes ferry's programs on both tunnels), and a NodePort on
// node-2 in SNAT to the same pod (forwarded into the tunnel, its replies back out of it).
// Per path and mode: iperf3 with 1 and 4 streams, TCP request/response p50 and the
// machine's CPU per request. The modes take turns within each repeat (both agents
// restarted with the mode's setting), so a slow spell of the machine hits all of them.
// Run as root: npx tsx bench/tunnel-xdp.ts [--seconds 4] [--rr-seconds 2] [--repeat 3] [--modes none,best-effort]
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { TUNNEL } from '../src/sandbox/network.js';
import { Sandbox } from '../src/sandbox/sandbox.js';
import { WORKLOADS_BIN, startWorkloads } from '../src/sandbox/workloads/spawn.js';
import type { Host } from '../src/sandbox/netns/testbed.js';
import { barChart } from './plot.js';
import { busyCpuNs, fmtStat, markdownTable, progress, publish, ratio, stat, type Stat } from './report.js';

/** An agent setting per mode: what FERRY_ACCELERATION (and any other variable) is. */
const MODES: Record<string, Record<string, string>> = {
  none: { FERRY_ACCELERATION: 'none' },
  // The default choice leaves the tunnel to tc (src/agent/xdp-choice.ts).
  'best-effort': { FERRY_ACCELERATION: 'best-effort' },
  // The tunnel named: generic XDP on it (best-effort's choice before 2026-12-06).
  'best-effort+tunnel': { FERRY_ACCELERATION: 'best-effort', FERRY_XDP_DEVICES: `eth0,${TUNNEL.device}` },
};

const { values } = parseArgs({ options: { seconds: { type: 'string' }, 'rr-seconds': { type: 'string' }, repeat: { type: 'string' }, modes: { type: 'string' } } });
const SECONDS = Number(values.seconds ?? 4);
const RR_SECONDS = Number(values['rr-seconds'] ?? 2);
const REPEAT = Number(values.repeat ?? 3);
const MODE_NAMES = (values.modes ?? Object.keys(MODES).join(',')).split(',');
for (const m of MODE_NAMES) if (!MODES[m]) throw new Error(`--modes: unknown mode ${m} (known: ${Object.keys(MODES).join(', ')})`);
const COMMAND = `npx tsx bench/tunnel-xdp.ts --seconds ${SECONDS} --rr-seconds ${RR_SECONDS} --repeat ${REPEAT} --modes ${MODE_NAMES.join(',')}`;

const ECHO = 7000;
const IPERF = 5201;
const NODEPORT = 30700;
const RR_CPU = '1';

interface RrSample { count: number; failures: number; seconds: number; p50: number; p99: number }
interface PathSpec { name: string; from: Host; ip: string; echo: number; iperf: number }
type Metric = 'gbps1' | 'gbps4' | 'rrP50' | 'cpuUsPerRr' | 'failures';

async function main(): Promise<void> {
  progress('tunnel-xdp: sandbox up (2 nodes over VXLAN, SNAT) ');
  const sb = await Sandbox.up({ name: 'tunxdp', nodes: 2, mode: 'snat', announce: 'routes', podNetwork: 'vxlan', log: pino({ level: 'silent' }) });
  try {
    await sb.net.nodeSwitch.prepareForXdp();
    const [node1, node2] = sb.net.nodes;
    await sb.put('Pod', { metadata: { name: 'server', namespace: 'default', labels: { app: 'server' } }, spec: { nodeName: node1!.name, containers: [{ name: 'w', image: 'whoami' }] } });
    await sb.put('Pod', { metadata: { name: 'client', namespace: 'default', labels: { app: 'client' } }, spec: { nodeName: node2!.name, containers: [{ name: 'w', image: 'whoami' }] } });
    const server = sb.kubelet.podInfo('default', 'server')!;
    const client = sb.kubelet.podInfo('default', 'client')!;
    await startWorkloads(server.host, [{ kind: 'tcp-echo', port: ECHO }], { cpus: RR_CPU });
    server.host.spawn(['iperf3', '-s', '-p', String(IPERF)]);
    await sb.put('Service', {
      metadata: { name: 'server', namespace: 'default' },
      spec: { type: 'NodePort', selector: { app: 'server' }, ports: [{ name: 'echo', port: ECHO, targetPort: ECHO, nodePort: NODEPORT }, { name: 'iperf', port: IPERF, targetPort: IPERF, nodePort: NODEPORT + 1 }] },
    });
    const paths: PathSpec[] = [
      { name: 'pod to pod (tunnel)', from: client.host, ip: server.ip, echo: ECHO, iperf: IPERF },
      { name: 'NodePort SNAT (node-2 to node-1 through the tunnel)', from: sb.net.client, ip: node2!.ip, echo: NODEPORT, iperf: NODEPORT + 1 },
    ];
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
        for (const n of [node1!, node2!]) {
          await sb.stopAgent(n);
          await sb.startAgent(n, 30_000, { env: MODES[mode] });
        }
        const status = JSON.parse(await node2!.host.execOk(['curl', '-sS', 'http://127.0.0.1:10249/status'])) as { xdp?: Record<string, { mode: string }> };
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
      name: 'tunnel-xdp',
      title: 'XDP with an overlay tunnel among the devices: tc alone, XDP on the NIC only, XDP on the NIC and generic on the tunnel',
      command: COMMAND,
      method: `a 2-node sandbox whose pod network is VXLAN as Flannel makes it (${TUNNEL.device}, VNI ${TUNNEL.vni}, MTU 1450), the agents serving eth0 and ${TUNNEL.device}, SNAT; the switch made a wire for XDP (complete checksums, no offloads) in every mode. Modes (the agents' XDP attachments on node-2 as /status gave them): ${MODE_NAMES.map((m) => `${m}: ${xdpModes[m]}`).join('; ')}. Pod to pod: a pod on node-2 to the server pod on node-1 by its address (through both tunnels, no Service). NodePort SNAT: the client outside the cluster to node-2's NodePort, forwarded to the pod on node-1 through the tunnel. RR: 64-byte request/response for ${RR_SECONDS} s on one connection, client and server pinned to CPU ${RR_CPU}; iperf3 for ${SECONDS} s. CPU: the whole machine's busy time per request (10 ms ticks). The modes take turns in each of ${REPEAT} repeats (both agents restarted with the mode's setting); median of the repeats, spread min–max in brackets.`,
      tables: [table],
      ratios,
      plots: [{ file: 'tunnel-xdp-throughput.svg', caption: 'iperf3 throughput per path and mode', svg: barChart({ title: 'iperf3 through the tunnel (Gbit/s, higher is better)', yLabel: 'Gbit/s', groups, series: [series('1 stream', (r) => r.gbps1), series('4 streams', (r) => r.gbps4)] }) }],
      data: { seconds: SECONDS, rrSeconds: RR_SECONDS, repeat: REPEAT, modes: MODE_NAMES.map((m) => ({ name: m, env: MODES[m], xdp: xdpModes[m] })), rows },
    });
  } finally {
    await sb.down();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
