// Forwarding modes side by side in one 2-node sandbox (node mode hybrid): the client
// reaches a pod on node-1 directly, through a NodePort on node-2 in SNAT, DSR and hybrid
// forwarding (a per-Service annotation picks SNAT or DSR; no annotation follows the node's
// hybrid mode: DSR for TCP, SNAT for UDP), and through a NodePort on node-1 with
// externalTrafficPolicy: Local. Per path: TCP request/response latency and rate (one
// connection; a new connection per request), UDP request/response, iperf3 throughput with
// 1 and 4 streams, the packets the LB node's device carries per request, and the CPU time
// the whole machine spends per request. Then SNAT and DSR again with the switch made a wire
// for XDP (complete checksums, no offloads), first with tc alone and then with node-2's
// agent restarted with acceleration native: tc against XDP on the same wire.
// Run as root: npx tsx bench/forwarding.ts [--seconds 4] [--rr-seconds 2] [--repeat 3]
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { SandboxApi } from '../src/sandbox/api-client.js';
import type { Host } from '../src/sandbox/netns/testbed.js';
import { Sandbox } from '../src/sandbox/sandbox.js';
import { WORKLOADS_BIN, startWorkloads } from '../src/sandbox/workloads/spawn.js';
import { barChart } from './plot.js';
import { busyCpuNs, fmtStat, markdownTable, progress, publish, ratio, stat, type Stat } from './report.js';

const { values } = parseArgs({ options: { seconds: { type: 'string' }, 'rr-seconds': { type: 'string' }, repeat: { type: 'string' } } });
const SECONDS = Number(values.seconds ?? 4);
const RR_SECONDS = Number(values['rr-seconds'] ?? 2);
const REPEAT = Number(values.repeat ?? 3);
const COMMAND = `npx tsx bench/forwarding.ts --seconds ${SECONDS} --rr-seconds ${RR_SECONDS} --repeat ${REPEAT}`;

const ECHO = 7000;
const IPERF = 5201;
const UDP = 5353;
const RR_CPU = '1';

interface PathSpec { name: string; ip: string; ports: { echo: number; iperf: number; udp: number }; lbNode?: Host; prepare?: () => Promise<void> }

/** `f` the first time it is called, nothing after. */
const once = (f: () => Promise<void>) => {
  let done: Promise<void> | undefined;
  return () => (done ??= f());
};

interface RrSample { count: number; failures: number; seconds: number; p50: number; p99: number }

/** Busy CPU time of the whole machine so far, in microseconds. */
const busyCpuUs = () => busyCpuNs() / 1000;

/** Packets in and out of a host's eth0. */
async function devicePackets(host: Host): Promise<number> {
  const [link] = JSON.parse(await host.execOk(['ip', '-s', '-j', 'link', 'show', 'dev', 'eth0'])) as Array<{ stats64: { rx: { packets: number }; tx: { packets: number } } }>;
  return link!.stats64.rx.packets + link!.stats64.tx.packets;
}

async function main(): Promise<void> {
  progress('forwarding: sandbox up (2 nodes, hybrid) ');
  const sb = await Sandbox.up({ name: 'fwdbench', nodes: 2, mode: 'hybrid', log: pino({ level: 'silent' }) });
  try {
    const api = new SandboxApi(sb.api.alsoUrl!);
    const put = (kind: string, obj: Record<string, unknown>) => sb.put(kind, obj);
    await put('Pod', { metadata: { name: 'server', namespace: 'default', labels: { app: 'server' } }, spec: { nodeName: 'node-1', containers: [{ name: 'w', image: 'whoami', ports: [{ containerPort: 8080 }] }] } });
    const pod = sb.kubelet.podInfo('default', 'server')!;
    // Request/response client and servers share one CPU: a round trip is then the CPU work
    // of the path, not the wake-up latency of an idle virtual CPU (which made runs bimodal).
    // Servers of their own per Service (ports + 1..4; the direct path uses the first): the
    // client reuses source ports, and through two DSR frontends of one backend port a reused
    // port would meet the backend node's binding of the other frontend's earlier connection
    // (README, "What is not done yet").
    const each = [0, 1, 2, 3, 4];
    await startWorkloads(pod.host, each.flatMap((i) => [{ kind: 'tcp-echo' as const, port: ECHO + i }, { kind: 'udp-echo' as const, port: UDP + i }]), { cpus: RR_CPU });
    for (const i of each) pod.host.spawn(['iperf3', '-s', '-p', String(IPERF + i)]);
    const [node1, node2] = sb.net.nodes;
    const paths: PathSpec[] = [{ name: 'direct', ip: pod.ip, ports: { echo: ECHO, iperf: IPERF, udp: UDP } }];
    const variants = [
      { name: 'snat', annotation: 'snat', node: node2! },
      { name: 'dsr', annotation: 'dsr', node: node2! },
      { name: 'hybrid', annotation: undefined, node: node2! },
      { name: 'etp-local', annotation: undefined, node: node1!, local: true },
    ];
    for (const [i, v] of variants.entries()) {
      const base = 30600 + i * 10;
      const [echo, iperf, udp] = [ECHO + i + 1, IPERF + i + 1, UDP + i + 1];
      await put('Service', {
        metadata: { name: `server-${v.name}`, namespace: 'default', ...(v.annotation ? { annotations: { 'ferry.dev/forwarding': v.annotation } } : {}) },
        spec: {
          type: 'NodePort', selector: { app: 'server' }, ...(v.local ? { externalTrafficPolicy: 'Local' } : {}),
          ports: [
            { name: 'echo', port: echo, targetPort: echo, nodePort: base },
            { name: 'iperf', port: iperf, targetPort: iperf, nodePort: base + 1 },
            { name: 'udp', protocol: 'UDP', port: udp, targetPort: udp, nodePort: base + 2 },
          ],
        },
      });
      paths.push({ name: v.name, ip: v.node.ip, ports: { echo: base, iperf: base + 1, udp: base + 2 }, lbNode: v.node.host });
    }
    // tc against XDP, both on the switch made a wire for XDP (it changes every path's
    // offloads, so the comparison is made there, not with the rows above).
    const wire = once(() => sb.net.nodeSwitch.prepareForXdp());
    const xdpOn = once(async () => {
      await sb.stopAgent(node2!);
      await sb.startAgent(node2!, 30_000, { env: { FERRY_ACCELERATION: 'native' } });
    });
    for (const [name, base, prepare] of [['snat, wire, tc', 30600, wire], ['dsr, wire, tc', 30610, wire], ['snat, wire, xdp', 30600, xdpOn], ['dsr, wire, xdp', 30610, xdpOn]] as const) {
      paths.push({ name, ip: node2!.ip, ports: { echo: base, iperf: base + 1, udp: base + 2 }, lbNode: node2!.host, prepare: async () => { await wire(); await prepare(); } });
    }
    await new Promise((r) => setTimeout(r, 500));

    const client = sb.net.client;
    /** Requests unanswered within 3 s, by target (reported, not hidden). */
    const failed = new Map<string, number>();
    const rr = async (to: string, extra: string[], seconds = RR_SECONDS): Promise<RrSample> => {
      const out = JSON.parse(await client.execOk(['taskset', '-c', RR_CPU, process.execPath, WORKLOADS_BIN, 'rr', '--to', to, '--seconds', String(seconds), ...extra], { timeoutMs: (seconds + 60) * 1000 })) as RrSample;
      failed.set(to, (failed.get(to) ?? 0) + out.failures);
      return out;
    };
    interface Row {
      path: string;
      rrP50: Stat; rrP99: Stat; rrRate: Stat; crrP50: Stat; crrRate: Stat; udpP50: Stat;
      gbps1: Stat; gbps4: Stat; lbPacketsPerRr: Stat | null; cpuUsPerRr: Stat; cpuUsPerCrr: Stat; failed: number;
    }
    const rows: Row[] = [];
    for (const p of paths) {
      progress(`\n${p.name} `);
      await p.prepare?.();
      const acc: Record<string, number[]> = {};
      const add = (k: string, v: number) => void (acc[k] ??= []).push(v);
      // Warm-up, not counted: neighbour entries, the first flows, the CPUs' frequency.
      await rr(`${p.ip}:${p.ports.echo}`, [], 0.5);
      await rr(`${p.ip}:${p.ports.echo}`, ['--new-connection'], 0.5);
      for (let r = 0; r < REPEAT; r++) {
        const pk0 = p.lbNode ? await devicePackets(p.lbNode) : 0;
        const cpu0 = busyCpuUs();
        const tcp = await rr(`${p.ip}:${p.ports.echo}`, []);
        const cpu1 = busyCpuUs();
        const pk1 = p.lbNode ? await devicePackets(p.lbNode) : 0;
        add('rrP50', tcp.p50);
        add('rrP99', tcp.p99);
        add('rrRate', tcp.count / tcp.seconds);
        add('cpuUsPerRr', (cpu1 - cpu0) / tcp.count);
        if (p.lbNode) add('lbPacketsPerRr', (pk1 - pk0) / tcp.count);
        const crr = await rr(`${p.ip}:${p.ports.echo}`, ['--new-connection']);
        add('crrP50', crr.p50);
        add('crrRate', crr.count / crr.seconds);
        add('cpuUsPerCrr', (busyCpuUs() - cpu1) / crr.count);
        add('udpP50', (await rr(`${p.ip}:${p.ports.udp}`, ['--udp'])).p50);
        for (const streams of [1, 4]) {
          const j = JSON.parse(await client.execOk(['iperf3', '-c', p.ip, '-p', String(p.ports.iperf), '-t', String(SECONDS), '-P', String(streams), '-J'], { timeoutMs: (SECONDS + 30) * 1000 })) as { end: { sum_received: { bits_per_second: number } } };
          add(`gbps${streams}`, j.end.sum_received.bits_per_second / 1e9);
        }
        progress('.');
      }
      const s = (k: string) => stat(acc[k]!);
      rows.push({
        path: p.name, rrP50: s('rrP50'), rrP99: s('rrP99'), rrRate: s('rrRate'), crrP50: s('crrP50'), crrRate: s('crrRate'), udpP50: s('udpP50'),
        gbps1: s('gbps1'), gbps4: s('gbps4'), lbPacketsPerRr: acc.lbPacketsPerRr ? s('lbPacketsPerRr') : null, cpuUsPerRr: s('cpuUsPerRr'), cpuUsPerCrr: s('cpuUsPerCrr'),
        failed: [p.ports.echo, p.ports.udp].reduce((a, port) => a + (failed.get(`${p.ip}:${port}`) ?? 0), 0),
      });
    }
    progress('\n');
    const by = (n: string) => rows.find((r) => r.path === n)!;
    const direct = by('direct');
    const snat = by('snat');
    const dsr = by('dsr');
    const latency = markdownTable(
      ['path', 'TCP RR p50 µs', 'TCP RR p99 µs', 'RR/s', 'new conn + RR p50 µs', 'conn/s', 'UDP RR p50 µs', 'p50 / direct', 'failed'],
      rows.map((r) => [r.path, fmtStat(r.rrP50), fmtStat(r.rrP99), fmtStat(r.rrRate, 0), fmtStat(r.crrP50), fmtStat(r.crrRate, 0), fmtStat(r.udpP50), ratio(r.rrP50.median, direct.rrP50.median), r.failed]),
    );
    const volume = markdownTable(
      ['path', 'iperf3 1 stream Gbit/s', 'iperf3 4 streams Gbit/s', '1 stream / direct', 'LB-node packets per RR', 'CPU µs per RR', 'CPU µs per new conn + RR'],
      rows.map((r) => [r.path, fmtStat(r.gbps1, 2), fmtStat(r.gbps4, 2), ratio(r.gbps1.median, direct.gbps1.median), r.lbPacketsPerRr ? fmtStat(r.lbPacketsPerRr, 2) : '-', fmtStat(r.cpuUsPerRr), fmtStat(r.cpuUsPerCrr)]),
    );
    const ratios = [
      `dsr/snat: RR p50 ${ratio(dsr.rrP50.median, snat.rrP50.median)}, conn/s ${ratio(dsr.crrRate.median, snat.crrRate.median)}, 1 stream ${ratio(dsr.gbps1.median, snat.gbps1.median)}, 4 streams ${ratio(dsr.gbps4.median, snat.gbps4.median)}, LB-node packets ${ratio(dsr.lbPacketsPerRr!.median, snat.lbPacketsPerRr!.median)}, CPU per RR ${ratio(dsr.cpuUsPerRr.median, snat.cpuUsPerRr.median)}`,
      `snat/direct: RR p50 ${ratio(snat.rrP50.median, direct.rrP50.median)}, conn/s ${ratio(snat.crrRate.median, direct.crrRate.median)}, 1 stream ${ratio(snat.gbps1.median, direct.gbps1.median)}`,
      `dsr/direct: RR p50 ${ratio(dsr.rrP50.median, direct.rrP50.median)}, conn/s ${ratio(dsr.crrRate.median, direct.crrRate.median)}, 1 stream ${ratio(dsr.gbps1.median, direct.gbps1.median)}`,
      `hybrid/snat UDP RR p50 ${ratio(by('hybrid').udpP50.median, snat.udpP50.median)} (hybrid sends UDP through SNAT), hybrid/dsr TCP RR p50 ${ratio(by('hybrid').rrP50.median, dsr.rrP50.median)}`,
      ...(['snat', 'dsr'] as const).map((m) => {
        const [t, x] = [by(`${m}, wire, tc`), by(`${m}, wire, xdp`)];
        return `${m} on the wire, xdp/tc: RR p50 ${ratio(x.rrP50.median, t.rrP50.median)}, conn/s ${ratio(x.crrRate.median, t.crrRate.median)}, UDP RR p50 ${ratio(x.udpP50.median, t.udpP50.median)}, 1 stream ${ratio(x.gbps1.median, t.gbps1.median)}, 4 streams ${ratio(x.gbps4.median, t.gbps4.median)}, CPU per RR ${ratio(x.cpuUsPerRr.median, t.cpuUsPerRr.median)}`;
      }),
    ];
    const groups = rows.map((r) => r.path);
    const bars = (title: string, yLabel: string, series: Array<[string, (r: Row) => Stat | null]>) =>
      barChart({ title, yLabel, groups, series: series.map(([name, f]) => ({ name, values: rows.map((r) => f(r)?.median ?? null), spread: rows.map((r) => { const x = f(r); return x ? { lo: x.min, hi: x.max } : null; }) })) });
    publish({
      name: 'forwarding',
      title: 'Forwarding modes: direct, SNAT, DSR, hybrid, externalTrafficPolicy: Local; tc against XDP',
      command: COMMAND,
      method: `a 2-node sandbox in hybrid mode; the client (outside the cluster, behind a router namespace) reaches a pod on node-1 directly, through a NodePort on node-2 (snat and dsr by annotation, hybrid by the node's mode) and through a NodePort on node-1 with externalTrafficPolicy: Local. RR: 64-byte request/response for ${RR_SECONDS} s (one connection; or a new connection per request, closed with a reset), client and echo server pinned to CPU ${RR_CPU}; iperf3 for ${SECONDS} s. LB-node packets: the LB node's eth0 rx+tx packet counters over the TCP RR run divided by the requests (a request and its reply cross the LB node's device twice each under SNAT, only the request under DSR). CPU: busy time of the whole machine (/proc/stat, all namespaces: client, router, nodes, pod) per request, in 10 ms ticks. The last four rows: the switch made a wire for XDP (every member sends complete checksums, so no checksum or segmentation offload, and its bridge ports poll: src/sandbox/netns/switch.ts), SNAT and DSR through node-2 with tc alone, then with node-2's agent restarted with acceleration native (xdp_ingress in veth's driver before tc); compare them with each other, not with the rows above. Each path is warmed up first (1 s, not counted). Median of ${REPEAT} runs, spread min–max in brackets.`,
      tables: [latency, volume],
      ratios,
      plots: [
        { file: 'forwarding-latency.svg', caption: 'request/response latency p50 per path', svg: bars('Request/response p50 (µs, lower is better)', 'µs', [['TCP RR', (r) => r.rrP50], ['new connection + RR', (r) => r.crrP50], ['UDP RR', (r) => r.udpP50]]) },
        { file: 'forwarding-throughput.svg', caption: 'iperf3 throughput per path', svg: bars('iperf3 throughput (Gbit/s, higher is better)', 'Gbit/s', [['1 stream', (r) => r.gbps1], ['4 streams', (r) => r.gbps4]]) },
        { file: 'forwarding-cost.svg', caption: 'LB-node packets and CPU per request', svg: bars('Per request: LB-node packets and machine CPU µs', 'packets / µs', [['LB-node packets per RR', (r) => r.lbPacketsPerRr], ['CPU µs per RR', (r) => r.cpuUsPerRr]]) },
      ],
      data: { seconds: SECONDS, rrSeconds: RR_SECONDS, repeat: REPEAT, rows },
    });
  } finally {
    await sb.down();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
