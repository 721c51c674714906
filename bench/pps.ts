// Packets per second a node forwards for NodePort traffic to a backend on another node:
// trafgen (netsniff-ng) in the client's namespace sends small UDP datagrams and TCP SYNs
// to node-2's NodePort at full speed, over 1024 source ports (so the flows are known to
// conntrack after the first round, as in steady traffic); node-2 translates (SNAT) and
// forwards them to a pod on node-1 that drops them. The rate is what reaches the pod; the
// CPU is the whole machine's busy time per forwarded packet. node-2's receive work runs on
// the second CPU (RPS), so the rate is node-2's. Dataplanes on node-2, in turn:
// ferry's tc programs, kube-proxy-shaped iptables rules, kube-proxy-shaped nftables rules,
// at 1 and 10k Services. XDP is not built yet (issue 20).
// Run as root: npx tsx bench/pps.ts [--services 1,10000] [--seconds 5] [--repeat 3]
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { MiniCluster, type TestService } from '../src/sandbox/mini-cluster.js';
import type { Host } from '../src/sandbox/netns/testbed.js';
import type { PodInfo } from '../src/sandbox/network.js';
import { TARGET_IP, clusterIP, iptablesRules, nftRules } from './kube-proxy-rules.js';
import { serviceMapSizes } from './map-sizes.js';
import { barChart } from './plot.js';
import { execOk } from '../src/sys/exec.js';
import { busyCpuNs, fmtStat, markdownTable, progress, publish, ratio, stat, type Stat } from './report.js';

const { values } = parseArgs({ options: { services: { type: 'string' }, seconds: { type: 'string' }, repeat: { type: 'string' } } });
const COUNTS = (values.services ?? '1,10000').split(',').map(Number);
const SECONDS = Number(values.seconds ?? 5);
const REPEAT = Number(values.repeat ?? 3);
const COMMAND = `npx tsx bench/pps.ts --services ${COUNTS.join(',')} --seconds ${SECONDS} --repeat ${REPEAT}`;

const SINK_PORT = 9000;
const NODE_PORT = { udp: 30900, tcp: 30901 } as const;
type Proto = keyof typeof NODE_PORT;
const DATAPLANES = ['ferry tc', 'iptables', 'nftables'] as const;
type Dataplane = (typeof DATAPLANES)[number];

interface Row { dataplane: Dataplane; services: number; proto: Proto; sentPps: Stat; forwardedPps: Stat; cpuNsPerPacket: Stat }

async function rxPackets(host: Host, dev: string): Promise<number> {
  const [link] = JSON.parse(await host.execOk(['ip', '-s', '-j', 'link', 'show', 'dev', dev])) as Array<{ stats64: { rx: { packets: number } } }>;
  return link!.stats64.rx.packets;
}

/** trafgen's packet: 60-byte frames to node-2's NodePort, over 1024 source ports. */
function trafgenConfig(proto: Proto, gatewayMac: string, src: string, dst: string): string {
  const l4 = proto === 'udp' ? `udp(sp=dinc(1024, 2047), dp=${NODE_PORT.udp}), fill(0x00, 18)` : `tcp(sp=dinc(1024, 2047), dp=${NODE_PORT.tcp}, seq=drnd(), syn), fill(0x00, 6)`;
  return `{ eth(da=${gatewayMac}, type=0x0800), ipv4(saddr=${src}, daddr=${dst}, ttl=64), ${l4} }\n`;
}

async function main(): Promise<void> {
  const max = Math.max(...COUNTS);
  progress('pps: 2-node testbed ');
  const c = await MiniCluster.create({ nodes: 2, mapSizes: serviceMapSizes(4 * max, 2 * max) });
  try {
    const sink = await c.pod('sink', 1);
    // The sink drops what it gets: no replies, no ICMP errors back through node-2.
    await sink.host.execOk(['nft', '-f', '-'], { input: ['table ip sink {', '  chain in {', '    type filter hook input priority 0; policy accept;', `    udp dport ${SINK_PORT} drop`, `    tcp dport ${SINK_PORT} drop`, '  }', '}', ''].join('\n') });
    const lb = c.nodes[1]!;
    // node-2's receive work on the other CPU (RPS): the sender and the router keep CPU 0, so
    // the rate is what node-2's stack (and node-1's delivery, the same for every dataplane)
    // sustains on one CPU, not the sender's.
    await execOk('ip', ['netns', 'exec', lb.host.netns, 'sh', '-c', `echo 2 > /sys/class/net/${lb.device}/queues/rx-0/rps_cpus`]);
    const client = c.client;
    // The client's next hop toward node-2, and its MAC (trafgen writes whole frames).
    const route = JSON.parse(await client.execOk(['ip', '-j', 'route', 'get', lb.ip])) as Array<{ gateway?: string; dev: string; prefsrc: string }>;
    const gw = route[0]!.gateway ?? lb.ip;
    await client.exec(['ping', '-c', '1', '-W', '1', gw]);
    const neigh = JSON.parse(await client.execOk(['ip', '-j', 'neigh', 'show', gw, 'dev', route[0]!.dev])) as Array<{ lladdr: string }>;
    const configs = new Map<Proto, string>();
    for (const proto of ['udp', 'tcp'] as Proto[]) {
      const file = join('/run/ferry', `${c.tb.prefix}-trafgen-${proto}.cfg`);
      writeFileSync(file, trafgenConfig(proto, neigh[0]!.lladdr, route[0]!.prefsrc, lb.ip));
      c.tb.ownPath(file);
      configs.set(proto, file);
    }
    const run = async (proto: Proto, seconds: number) => {
      const rx0 = await rxPackets(sink.host, 'eth0');
      const cpu0 = busyCpuNs();
      const t0 = process.hrtime.bigint();
      const out = await client.exec(['timeout', '-s', 'INT', String(seconds), 'taskset', '-c', '0', 'trafgen', '--dev', route[0]!.dev, '--conf', configs.get(proto)!, '--cpus', '1'], { timeoutMs: (seconds + 30) * 1000 });
      const wall = Number(process.hrtime.bigint() - t0) / 1e9;
      const cpu = busyCpuNs() - cpu0;
      const forwarded = (await rxPackets(sink.host, 'eth0')) - rx0;
      const sent = Number(/(\d+) packets outgoing/.exec(out.stdout + out.stderr)?.[1] ?? NaN);
      return { sentPps: sent / wall, forwardedPps: forwarded / wall, cpuNsPerPacket: forwarded ? cpu / forwarded : NaN };
    };
    const services = (n: number): TestService[] => [
      ...Array.from({ length: n - 1 }, (_, i) => ({ clusterIP: clusterIP(i), ports: [{ port: 80, proto: 'TCP' as const, targetPort: 8080 }], endpoints: [sink] })),
      { clusterIP: TARGET_IP, ports: [{ port: NODE_PORT.udp, proto: 'UDP', targetPort: SINK_PORT, nodePort: NODE_PORT.udp }, { port: NODE_PORT.tcp, proto: 'TCP', targetPort: SINK_PORT, nodePort: NODE_PORT.tcp }], endpoints: [sink] },
    ];
    const rules = (dp: Dataplane, n: number, proto: Proto, pod: PodInfo) => (dp === 'iptables' ? iptablesRules : nftRules)(n - 1, pod.ip, NODE_PORT[proto], { proto, podPort: SINK_PORT });

    const rows: Row[] = [];
    for (const n of COUNTS) {
      for (const dp of DATAPLANES) {
        progress(`\n${n} Services, ${dp}: `);
        for (const proto of ['udp', 'tcp'] as Proto[]) {
          if (dp === 'ferry tc') {
            c.apply(services(n));
          } else {
            // ferry's programs stay attached with no Services: they pass everything to netfilter.
            c.apply([]);
            if (dp === 'iptables') await lb.host.execOk(['iptables-restore'], { input: rules(dp, n, proto, sink), timeoutMs: 600_000 });
            else await lb.host.execOk(['nft', '-f', '-'], { input: rules(dp, n, proto, sink), timeoutMs: 600_000 });
          }
          await run(proto, 1); // warm-up: conntrack entries, neighbours, CPU frequency
          const runs = [];
          for (let r = 0; r < REPEAT; r++) {
            runs.push(await run(proto, SECONDS));
            progress('.');
          }
          rows.push({ dataplane: dp, services: n, proto, sentPps: stat(runs.map((x) => x.sentPps)), forwardedPps: stat(runs.map((x) => x.forwardedPps)), cpuNsPerPacket: stat(runs.map((x) => x.cpuNsPerPacket)) });
          await lb.host.execOk(['iptables', '-t', 'nat', '-F']);
          await lb.host.execOk(['nft', 'flush', 'ruleset']);
        }
      }
    }
    c.apply([]);
    progress('\n');

    const find = (dp: Dataplane, n: number, proto: Proto) => rows.find((r) => r.dataplane === dp && r.services === n && r.proto === proto)!;
    const kpps = (s: Stat) => fmtStat({ median: s.median / 1000, min: s.min / 1000, max: s.max / 1000 }, 0);
    const table = markdownTable(
      ['dataplane', 'Services', 'packets', 'sent kpps', 'forwarded kpps', 'forwarded / iptables', 'CPU ns per forwarded packet'],
      rows.map((r) => [r.dataplane, r.services, r.proto === 'udp' ? 'UDP 60 B' : 'TCP SYN 60 B', kpps(r.sentPps), kpps(r.forwardedPps), ratio(r.forwardedPps.median, find('iptables', r.services, r.proto).forwardedPps.median), fmtStat(r.cpuNsPerPacket, 0)]),
    );
    const ratios = COUNTS.flatMap((n) => (['udp', 'tcp'] as Proto[]).map((proto) => {
      const f = find('ferry tc', n, proto).forwardedPps.median;
      return `${n} Services, ${proto === 'udp' ? 'UDP' : 'TCP SYN'}: ferry tc / iptables ${ratio(f, find('iptables', n, proto).forwardedPps.median)}, ferry tc / nftables ${ratio(f, find('nftables', n, proto).forwardedPps.median)} (forwarded packets per second)`;
    }));
    publish({
      name: 'pps',
      title: 'Packets per second through a NodePort to a remote backend: ferry tc against kube-proxy-shaped iptables and nftables rules',
      command: COMMAND,
      method: `a 2-node testbed (MiniCluster); trafgen (netsniff-ng, one thread on CPU 0) in the client's namespace sends 60-byte frames at full speed to node-2's NodePort (UDP datagrams, or TCP SYNs), cycling over 1024 source ports; node-2 translates (SNAT, as kube-proxy's masquerade) and forwards to a pod on node-1, whose own nftables rule drops them (no replies). node-2's receive work runs on CPU 1 (RPS on its device), so the forwarded rate is what node-2's stack (plus node-1's delivery, the same for every dataplane) sustains on one CPU; what it cannot take is dropped at its backlog (sent − forwarded). Forwarded: packets the pod's eth0 received, per second of the run. CPU: the whole machine's busy time (/proc/stat) per forwarded packet, sender included (both CPUs are busy, so it is high and only comparable between rows). ${SECONDS} s per run after a 1 s warm-up, ${REPEAT} runs per cell: median [min–max]. The kube-proxy-shaped rules are the ones of rules-scaling (bench/kube-proxy-rules.ts) with N−1 ClusterIP fillers; ferry's tc programs stay attached with no Services for those rows (they pass unknown traffic: about 0.07 µs a packet, see packet-cost). XDP: not built yet.`,
      tables: [table],
      ratios,
      plots: [{
        file: 'pps.svg', caption: 'forwarded packets per second',
        svg: barChart({
          title: 'NodePort → remote backend: forwarded kpps (median, min–max)', yLabel: 'kpps',
          groups: COUNTS.flatMap((n) => (['udp', 'tcp'] as Proto[]).map((p) => `${n} Services, ${p === 'udp' ? 'UDP' : 'SYN'}`)),
          series: DATAPLANES.map((dp) => {
            const cells = COUNTS.flatMap((n) => (['udp', 'tcp'] as Proto[]).map((p) => find(dp, n, p).forwardedPps));
            return { name: dp, values: cells.map((s) => s.median / 1000), spread: cells.map((s) => ({ lo: s.min / 1000, hi: s.max / 1000 })) };
          }),
        }),
      }],
      data: { seconds: SECONDS, repeat: REPEAT, rows },
    });
  } finally {
    await c.close();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
