// Service-count scaling against kube-proxy-shaped rules: connect latency to the
// last-added Service from an external client (to its NodePort; the backend is on the node)
// and from a pod (to its ClusterIP), with N Services loaded as ferry maps, as kube-proxy's
// iptables rules (iptables-restore) and as kube-proxy's nftables rules (nft -f), plus the
// time each needs to load them. The rules are generated in kube-proxy-rules.ts; their
// structure is stated in bench/README.md.
// Run as root: npx tsx bench/rules-scaling.ts [--services 1,1000,10000] [--count 1000] [--repeat 3] [--nft-max 30000]
import { parseArgs } from 'node:util';
import { MiniCluster, WORKLOADS, type TestService } from '../src/sandbox/mini-cluster.js';
import type { Host } from '../src/sandbox/netns/testbed.js';
import { TARGET_IP, clusterIP, iptablesRules, nftRules } from './kube-proxy-rules.js';
import { serviceMapSizes } from './map-sizes.js';
import { lineChart } from './plot.js';
import { fmtStat, markdownTable, progress, publish, ratio, stat, type Stat } from './report.js';

const { values } = parseArgs({ options: { services: { type: 'string' }, count: { type: 'string' }, repeat: { type: 'string' }, 'nft-max': { type: 'string' } } });
const COUNTS = (values.services ?? '1,1000,10000').split(',').map(Number);
const COUNT = Number(values.count ?? 1000);
const REPEAT = Number(values.repeat ?? 3);
// nft -f's load time grows with the square of the Service count (one anonymous numgen map
// per Service chain): 157 s at 30k here, about half an hour at 100k.
const NFT_MAX = Number(values['nft-max'] ?? 30_000);
const COMMAND = `npx tsx bench/rules-scaling.ts --services ${COUNTS.join(',')} --count ${COUNT} --repeat ${REPEAT} --nft-max ${NFT_MAX}`;

const FIRST_PORT = 30080; // the first cell's; each cell uses the next one
const NODE_IP = '10.0.30.21';

interface Sample { p50: number; p90: number; p99: number; failures: number }
interface Latency { p50: Stat; p90: Stat; p99: Stat; failures: number }
type From = 'external client' | 'pod';
interface Row { dataplane: string; services: number; loadMs: number; from: From; latency: Latency }

async function main(): Promise<void> {
  // A ClusterIP frontend takes a master entry and a slot in both lookup scopes.
  const maxServices = Math.max(...COUNTS);
  const c = await MiniCluster.create({ nodes: 1, mapSizes: serviceMapSizes(4 * maxServices, 2 * maxServices) });
  try {
    const web = await c.pod('web-1', 1, { whoami: 8080 });
    const clientPod = await c.pod('client-1', 1);
    const node = c.nodes[0]!;
    // Connections close with a reset, and every cell gets its own port: thousands of
    // connects to one address:port would leave as many TIME_WAIT sockets, and once they
    // fill the port range the port search (not the dataplane) sets the latency. ferry's
    // connect() hook makes the backend the socket's peer, so without resets the pod's
    // cells would all share one backend's tuples whatever the Service port.
    let port = FIRST_PORT;
    const connect = async (from: Host, to: string): Promise<Latency> => {
      const runs: Sample[] = [];
      for (let r = 0; r < REPEAT; r++) {
        runs.push(JSON.parse(await from.execOk([process.execPath, WORKLOADS, 'connect-latency', '--to', to, '--count', String(COUNT), '--reset'], { timeoutMs: 600_000 })) as Sample);
        progress('.');
      }
      return { p50: stat(runs.map((s) => s.p50)), p90: stat(runs.map((s) => s.p90)), p99: stat(runs.map((s) => s.p99)), failures: runs.reduce((a, s) => a + s.failures, 0) };
    };
    const timed = async (load: () => Promise<unknown> | void): Promise<number> => {
      const t0 = process.hrtime.bigint();
      await load();
      return Number(process.hrtime.bigint() - t0) / 1e6;
    };
    const target = (p: number): TestService => ({ clusterIP: TARGET_IP, ports: [{ port: p, proto: 'TCP', targetPort: 8080, nodePort: p }], endpoints: [web] });
    const fillerServices = (n: number): TestService[] =>
      Array.from({ length: n }, (_, i) => ({ clusterIP: clusterIP(i), ports: [{ port: 80, proto: 'TCP' as const, targetPort: 8080 }], endpoints: [web] }));

    const rows: Row[] = [];
    /** Both paths to the measured Service of one cell. */
    const cell = async (dataplane: string, services: number, loadMs: number, p: number) => {
      rows.push({ dataplane, services, loadMs, from: 'external client', latency: await connect(c.client, `${NODE_IP}:${p}`) });
      rows.push({ dataplane, services, loadMs, from: 'pod', latency: await connect(clientPod.host, `${TARGET_IP}:${p}`) });
    };
    progress('rules-scaling: direct ');
    // Warm-up, not counted: neighbour entries, the first flows, the CPUs' frequency.
    for (const from of [c.client, clientPod.host]) await from.execOk([process.execPath, WORKLOADS, 'connect-latency', '--to', `${web.ip}:8080`, '--count', '300']);
    rows.push({ dataplane: 'direct', services: 0, loadMs: 0, from: 'external client', latency: await connect(c.client, `${web.ip}:8080`) });
    rows.push({ dataplane: 'direct', services: 0, loadMs: 0, from: 'pod', latency: await connect(clientPod.host, `${web.ip}:8080`) });
    const skipped: number[] = [];
    for (const n of COUNTS) {
      progress(`\n${n} Services: ferry `);
      port++;
      const ferryMs = await timed(() => c.apply([...fillerServices(n - 1), target(port)]));
      await cell('ferry', n, ferryMs, port);
      c.apply([]); // ferry passes what it does not know to the host's stack

      progress(' iptables ');
      port++;
      const iptMs = await timed(() => node.host.execOk(['iptables-restore'], { input: iptablesRules(n - 1, web.ip, port), timeoutMs: 1_800_000 }));
      await cell('iptables', n, iptMs, port);
      await node.host.execOk(['nft', 'flush', 'ruleset']);

      if (n > NFT_MAX) {
        skipped.push(n);
        continue;
      }
      progress(' nftables ');
      port++;
      const nftMs = await timed(() => node.host.execOk(['nft', '-f', '-'], { input: nftRules(n - 1, web.ip, port), timeoutMs: 3_600_000 }));
      await cell('nftables', n, nftMs, port);
      await node.host.execOk(['nft', 'flush', 'ruleset']);
    }
    progress('\n');

    const find = (dataplane: string, from: From, services: number) => rows.find((r) => r.dataplane === dataplane && r.from === from && (r.services === services || dataplane === 'direct'));
    const table = (from: From) => markdownTable(
      ['dataplane', 'Services', 'load ms', 'p50 µs', 'p90 µs', 'p99 µs', 'p50 / direct', 'p50 / ferry', 'failed'],
      rows.filter((r) => r.from === from).map((r) => [
        r.dataplane, r.services || '-', r.dataplane === 'direct' ? '-' : r.loadMs.toFixed(0), fmtStat(r.latency.p50), fmtStat(r.latency.p90), fmtStat(r.latency.p99),
        ratio(r.latency.p50.median, find('direct', from, 0)!.latency.p50.median), r.services ? ratio(r.latency.p50.median, find('ferry', from, r.services)!.latency.p50.median) : '-', r.latency.failures,
      ]),
    );
    const ratios = COUNTS.map((n) => {
      const parts = (['external client', 'pod'] as From[]).map((from) => {
        const f = find('ferry', from, n)!.latency.p50.median;
        const nft = find('nftables', from, n);
        return `from ${from === 'pod' ? 'a pod' : 'outside'}: ferry/direct ${ratio(f, find('direct', from, 0)!.latency.p50.median)}, iptables/ferry ${ratio(find('iptables', from, n)!.latency.p50.median, f)}${nft ? `, nftables/ferry ${ratio(nft.latency.p50.median, f)}` : ''}`;
      });
      return `${n} Services: ${parts.join('; ')}`;
    });
    const lines = (from: From) => ['ferry', 'iptables', 'nftables'].map((dp) => ({
      name: dp,
      points: rows.filter((r) => r.dataplane === dp && r.from === from).map((r) => ({ x: r.services, y: r.latency.p50.median, spread: { lo: r.latency.p50.min, hi: r.latency.p50.max } })),
    })).filter((s) => s.points.length);
    const direct = (from: From) => ({ name: 'direct', points: COUNTS.map((x) => ({ x, y: find('direct', from, 0)!.latency.p50.median })) });
    publish({
      name: 'rules-scaling',
      title: 'Service-count scaling: ferry against kube-proxy-shaped iptables and nftables rules',
      command: COMMAND,
      method: `a 1-node testbed; each dataplane in turn on the same node (ferry's programs pass what they do not know, so with no Services they leave the packets to netfilter). The measured Service is added last, after N−1 ClusterIP-only fillers; from the external client to its NodePort, from a pod on the node to its ClusterIP (ferry: the connect() hook; iptables/nftables: DNAT in PREROUTING); the backend is a pod on the node. ${COUNT} connects per run, ${REPEAT} runs per cell: the median of the runs' percentiles, spread min–max in brackets. Connections close with a reset (no TIME_WAIT sockets pile up), every cell uses its own port, and both clients are warmed up first (300 connects, not counted).${skipped.length ? ` nftables not run at ${skipped.join(', ')} Services (--nft-max ${NFT_MAX}): nft -f grows with the square of the Service count (see its load column).` : ''}`,
      tables: ['From an external client, to the NodePort:', table('external client'), 'From a pod, to the ClusterIP:', table('pod')],
      ratios,
      plots: [
        { file: 'rules-scaling-external.svg', caption: 'connect p50 from an external client against the Service count', svg: lineChart({ title: 'External client → NodePort: connect p50 (µs)', xLabel: 'Services', yLabel: 'µs', logY: true, series: [...lines('external client'), direct('external client')] }) },
        { file: 'rules-scaling-pod.svg', caption: 'connect p50 from a pod against the Service count', svg: lineChart({ title: 'Pod → ClusterIP: connect p50 (µs)', xLabel: 'Services', yLabel: 'µs', logY: true, series: [...lines('pod'), direct('pod')] }) },
        {
          file: 'rules-scaling-load.svg', caption: 'time to load N Services',
          svg: lineChart({ title: 'Time to load N Services (ms)', xLabel: 'Services', yLabel: 'ms', logY: true, series: ['ferry', 'iptables', 'nftables'].map((dp) => ({ name: dp, points: rows.filter((r) => r.dataplane === dp && r.from === 'pod').map((r) => ({ x: r.services, y: Math.max(r.loadMs, 0.1) })) })).filter((s) => s.points.length) }),
        },
      ],
      data: { count: COUNT, repeat: REPEAT, nftMax: NFT_MAX, rows },
    });
  } finally {
    await c.close();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
