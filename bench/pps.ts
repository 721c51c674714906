// Packets per second a node forwards for NodePort traffic to a backend on another node:
// trafgen (netsniff-ng) on the router sends small UDP datagrams and TCP SYNs from the
// client's address straight onto the node network, to node-2's NodePort at full speed, over
// 1024 source ports (so the flows are known to conntrack after the first round, as in steady
// traffic); node-2 translates (SNAT) and forwards them toward a pod on node-1.
// The rate is what node-1 counts at its ingress; the CPU is the whole machine's busy time
// per forwarded packet. The switch and node-2 run on the second CPU (RPS where the frames
// enter the switch), the sender and node-1's count on the first. Dataplanes on node-2,
// in turn: ferry's XDP program, ferry's tc programs, kube-proxy-shaped iptables rules,
// kube-proxy-shaped nftables rules, at 1 and 10k Services.
// Run as root: npx tsx bench/pps.ts [--services 1,10000] [--seconds 5] [--repeat 3]
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { MiniCluster, type TestService } from '../src/sandbox/mini-cluster.js';
import type { Host } from '../src/sandbox/netns/testbed.js';
import { CLIENT_NET, type PodInfo } from '../src/sandbox/network.js';
import { TARGET_IP, clusterIP, iptablesRules, nftRules } from './kube-proxy-rules.js';
import { serviceMapSizes } from './map-sizes.js';
import { barChart } from './plot.js';
import { execOk } from '../src/sys/exec.js';
import { inNetns } from '../src/sys/netns.js';
import { BpfObject } from '../src/ebpf/object.js';
import { attachXdpDevice } from '../src/ebpf/link-xdp.js';
import type { Link } from '../src/ebpf/link.js';
import { defaultObjectsDir } from '../src/datapath/loader.js';
import { busyCpuNs, fmtStat, markdownTable, progress, publish, ratio, stat, type Stat } from './report.js';

const { values } = parseArgs({ options: { services: { type: 'string' }, seconds: { type: 'string' }, repeat: { type: 'string' } } });
const COUNTS = (values.services ?? '1,10000').split(',').map(Number);
const SECONDS = Number(values.seconds ?? 5);
const REPEAT = Number(values.repeat ?? 3);
const COMMAND = `npx tsx bench/pps.ts --services ${COUNTS.join(',')} --seconds ${SECONDS} --repeat ${REPEAT}`;

const SINK_PORT = 9000;
const NODE_PORT = { udp: 30900, tcp: 30901 } as const;
type Proto = keyof typeof NODE_PORT;
/** 'xdp bounce': the testbed's ceiling, an XDP program that only readdresses and bounces (bpf/tests/xdp_bounce.bpf.c). */
const DATAPLANES = ['xdp bounce', 'ferry xdp', 'ferry tc', 'iptables', 'nftables'] as const;
type Dataplane = (typeof DATAPLANES)[number];

interface Row { dataplane: Dataplane; services: number; proto: Proto; sentPps: Stat; forwardedPps: Stat; cpuNsPerPacket: Stat; programNs?: Record<string, number> }

/** run_time_ns and run_cnt of the programs attached to a host's devices, by name (bpftool). */
async function attachedProgramStats(host: Host): Promise<Map<string, { ns: number; runs: number }>> {
  const net = JSON.parse(await host.execOk(['bpftool', '-j', 'net', 'show'])) as Array<{ xdp?: Array<{ id: number }>; tc?: Array<{ id: number }> }>;
  const out = new Map<string, { ns: number; runs: number }>();
  for (const id of net.flatMap((d) => [...(d.xdp ?? []), ...(d.tc ?? [])].map((x) => x.id))) {
    const p = JSON.parse(await execOk('bpftool', ['-j', 'prog', 'show', 'id', String(id)])) as { name: string; run_time_ns?: number; run_cnt?: number };
    const have = out.get(p.name) ?? { ns: 0, runs: 0 };
    out.set(p.name, { ns: have.ns + (p.run_time_ns ?? 0), runs: have.runs + (p.run_cnt ?? 0) });
  }
  return out;
}

/** Packets the sink rule on node-1 counted (and dropped). */
async function sunk(host: Host): Promise<number> {
  const out = JSON.parse(await host.execOk(['nft', '-j', 'list', 'table', 'netdev', 'sink'])) as { nftables: Array<{ rule?: { expr: Array<{ counter?: { packets: number } }> } }> };
  return out.nftables.reduce((a, x) => a + (x.rule?.expr.find((e) => e.counter)?.counter?.packets ?? 0), 0);
}

/** trafgen's packet: 60-byte frames to node-2's NodePort, over 1024 source ports. */
function trafgenConfig(proto: Proto, gatewayMac: string, src: string, dst: string): string {
  const l4 = proto === 'udp' ? `udp(sp=dinc(1024, 2047), dp=${NODE_PORT.udp}), fill(0x00, 18)` : `tcp(sp=dinc(1024, 2047), dp=${NODE_PORT.tcp}, seq=drnd(), syn), fill(0x00, 6)`;
  return `{ eth(da=${gatewayMac}, type=0x0800), ipv4(saddr=${src}, daddr=${dst}, ttl=64), ${l4} }\n`;
}

async function main(): Promise<void> {
  const max = Math.max(...COUNTS);
  progress('pps: 2-node testbed ');
  const c = await MiniCluster.create({ nodes: 2, mapSizes: serviceMapSizes(4 * max, 2 * max), xdp: true });
  try {
    const sink = await c.pod('sink', 1);
    const sinkNode = c.nodes[0]!;
    // What node-2 forwards is counted and dropped as it enters node-1 (nftables' ingress
    // hook, before routing): no delivery work, no replies, no ICMP errors back to node-2.
    await sinkNode.host.execOk(['nft', '-f', '-'], { input: ['table netdev sink {', '  chain in {', `    type filter hook ingress device ${sinkNode.device} priority 0; policy accept;`, `    ip daddr ${sink.ip} udp dport ${SINK_PORT} counter drop`, `    ip daddr ${sink.ip} tcp dport ${SINK_PORT} counter drop`, '  }', '}', ''].join('\n') });
    const lb = c.nodes[1]!;
    const sw = c.net.nodeSwitch;
    // Everything past the sender on the other CPU: RPS where the frames enter the switch
    // (or on node-2's device when the switch is macvlan), so the switch, node-2 and what the
    // XDP program sends back out run there; trafgen keeps CPU 0. (veth runs XDP where the
    // frame is handed to it: with RPS on node-2's device instead, XDP would run on the
    // sender's CPU.)
    const [rpsNs, rpsDev] = sw.kind === 'bridge' ? [sw.host.netns, sw.portsByHost().router!] : [lb.host.netns, lb.device];
    await execOk('ip', ['netns', 'exec', rpsNs, 'sh', '-c', `echo 2 > /sys/class/net/${rpsDev}/queues/rx-0/rps_cpus`]);
    // node-1's count and drop on CPU 0, beside the sender: CPU 1 is the switch's and node-2's.
    await execOk('ip', ['netns', 'exec', sinkNode.host.netns, 'sh', '-c', `echo 1 > /sys/class/net/${sinkNode.device}/queues/rx-0/rps_cpus`]);
    // The router sends, onto the node network: no forwarding hop of its own on CPU 0.
    const sender = c.net.router;
    const lbMac = (JSON.parse(await lb.host.execOk(['ip', '-j', 'link', 'show', lb.device])) as Array<{ address: string }>)[0]!.address;
    const xdpMode = sw.kind === 'bridge' ? 'native' : 'generic';
    const sinkMac = (JSON.parse(await sinkNode.host.execOk(['ip', '-j', 'link', 'show', sinkNode.device])) as Array<{ address: string }>)[0]!.address;
    const macBytes = (m: string) => Buffer.from(m.split(':').map((h) => parseInt(h, 16)));
    const bounce = BpfObject.open(join(defaultObjectsDir(), 'tests', 'xdp_bounce.bpf.o'));
    bounce.setConstant('src_mac', macBytes(lbMac));
    bounce.setConstant('dst_mac', macBytes(sinkMac));
    bounce.setConstant('dst_addr', Buffer.from(sink.ip.split('.').map(Number)).readUInt32LE(0));
    bounce.setConstant('dst_port', Buffer.from([SINK_PORT >> 8, SINK_PORT & 255]).readUInt16LE(0));
    bounce.load();
    let bounceLink: Link | undefined;
    const configs = new Map<Proto, string>();
    for (const proto of ['udp', 'tcp'] as Proto[]) {
      const file = join('/run/ferry', `${c.tb.prefix}-trafgen-${proto}.cfg`);
      writeFileSync(file, trafgenConfig(proto, lbMac, CLIENT_NET.client, lb.ip));
      c.tb.ownPath(file);
      configs.set(proto, file);
    }
    const run = async (proto: Proto, seconds: number) => {
      const rx0 = await sunk(sinkNode.host);
      const cpu0 = busyCpuNs();
      const t0 = process.hrtime.bigint();
      const out = await sender.exec(['timeout', '-s', 'INT', String(seconds), 'taskset', '-c', '0', 'trafgen', '--dev', 'nodes', '--conf', configs.get(proto)!, '--cpus', '1'], { timeoutMs: (seconds + 30) * 1000 });
      const wall = Number(process.hrtime.bigint() - t0) / 1e9;
      const cpu = busyCpuNs() - cpu0;
      const forwarded = (await sunk(sinkNode.host)) - rx0;
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
        inNetns(lb.host.netns, () => {
          // One program at a time: closing the bounce's link detaches whatever is attached.
          bounceLink?.close();
          lb.dp.setXdp(lb.device, dp === 'ferry xdp' ? xdpMode : 'off');
          bounceLink = dp === 'xdp bounce' ? attachXdpDevice(bounce.program('xdp_bounce'), lb.device, xdpMode) : undefined;
        });
        for (const proto of ['udp', 'tcp'] as Proto[]) {
          if (dp !== 'iptables' && dp !== 'nftables') {
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
          // ferry's programs' own time per packet under this load: one more run with the
          // kernel's BPF statistics on (they cost a little, so not during the counted runs).
          let programNs: Record<string, number> | undefined;
          if (dp === 'ferry xdp' || dp === 'ferry tc') {
            const was = (await execOk('sysctl', ['-n', 'kernel.bpf_stats_enabled'])).trim();
            await execOk('sysctl', ['-qw', 'kernel.bpf_stats_enabled=1']);
            try {
              const before = await attachedProgramStats(lb.host);
              await run(proto, 2);
              const after = await attachedProgramStats(lb.host);
              programNs = Object.fromEntries([...after].filter(([name]) => ['xdp_ingress', 'tc_ingress', 'tc_egress'].includes(name)).map(([name, a]) => {
                const b = before.get(name) ?? { ns: 0, runs: 0 };
                return [name, a.runs > b.runs ? (a.ns - b.ns) / (a.runs - b.runs) : 0];
              }));
            } finally {
              await execOk('sysctl', ['-qw', `kernel.bpf_stats_enabled=${was || '0'}`]);
            }
          }
          rows.push({ dataplane: dp, services: n, proto, sentPps: stat(runs.map((x) => x.sentPps)), forwardedPps: stat(runs.map((x) => x.forwardedPps)), cpuNsPerPacket: stat(runs.map((x) => x.cpuNsPerPacket)), ...(programNs ? { programNs } : {}) });
          await lb.host.execOk(['iptables', '-t', 'nat', '-F']);
          await lb.host.execOk(['nft', 'flush', 'ruleset']);
        }
      }
    }
    c.apply([]);
    inNetns(lb.host.netns, () => lb.dp.setXdp(lb.device, 'off'));
    bounce.close();
    progress('\n');

    const find = (dp: Dataplane, n: number, proto: Proto) => rows.find((r) => r.dataplane === dp && r.services === n && r.proto === proto)!;
    const kpps = (s: Stat) => fmtStat({ median: s.median / 1000, min: s.min / 1000, max: s.max / 1000 }, 0);
    const table = markdownTable(
      ['dataplane', 'Services', 'packets', 'sent kpps', 'forwarded kpps', 'forwarded / iptables', 'CPU ns per forwarded packet', 'program ns per run (BPF statistics)'],
      rows.map((r) => [r.dataplane, r.services, r.proto === 'udp' ? 'UDP 60 B' : 'TCP SYN 60 B', kpps(r.sentPps), kpps(r.forwardedPps), ratio(r.forwardedPps.median, find('iptables', r.services, r.proto).forwardedPps.median), fmtStat(r.cpuNsPerPacket, 0),
        r.programNs ? Object.entries(r.programNs).filter(([, ns]) => ns > 0).map(([name, ns]) => `${name} ${ns.toFixed(0)}`).join(', ') : '-']),
    );
    const ratios = COUNTS.flatMap((n) => (['udp', 'tcp'] as Proto[]).map((proto) => {
      const [b, x, t, i, f] = DATAPLANES.map((dp) => find(dp, n, proto).forwardedPps.median) as [number, number, number, number, number];
      return `${n} Services, ${proto === 'udp' ? 'UDP' : 'TCP SYN'}: ferry xdp / iptables ${ratio(x, i)}, ferry tc / iptables ${ratio(t, i)}, ferry xdp / nftables ${ratio(x, f)}, ferry tc / nftables ${ratio(t, f)}; the testbed's ceiling (xdp bounce) / iptables ${ratio(b, i)}, ferry xdp / ceiling ${ratio(x, b)} (forwarded packets per second)`;
    }));
    publish({
      name: 'pps',
      title: 'Packets per second through a NodePort to a remote backend: ferry XDP and tc against kube-proxy-shaped iptables and nftables rules',
      command: COMMAND,
      method: `a 2-node testbed (MiniCluster, its switch a ${sw.kind}); trafgen (netsniff-ng, one thread on CPU 0) on the router sends 60-byte frames from the client's address at full speed onto the node network, to node-2's NodePort (UDP datagrams, or TCP SYNs), cycling over 1024 source ports; node-2 translates (SNAT, as kube-proxy's masquerade) and forwards them toward a pod on node-1, where an nftables ingress rule counts and drops them before routing (no replies; that work runs on CPU 0, RPS). The switch and node-2 run on CPU 1 (RPS on ${sw.kind === 'bridge' ? 'the switch port the frames enter by' : "node-2's device"}), so the forwarded rate is what the switch's two passes (into node-2 and out of it: the same for every dataplane) and node-2's dataplane sustain on one CPU; what they cannot take is dropped at a backlog (sent − forwarded). ferry xdp: xdp_ingress attached ${xdpMode} to node-2's device (veth runs it in its driver: no skb is built for a forwarded packet), the tc programs behind it; ferry tc: the same without XDP. xdp bounce: the testbed's ceiling, an XDP program on node-2 that only readdresses each frame to the sink and bounces it (bpf/tests/xdp_bounce.bpf.c: no lookup, no state); no dataplane can forward more here, so a ratio against iptables above the ceiling's is out of this testbed's reach. Forwarded: packets node-1's sink rule counted, per second of the run. Program ns per run: for ferry's rows, one more 2 s run with kernel.bpf_stats_enabled=1, node-2's xdp_ingress, tc_ingress and tc_egress (which a redirected packet passes too) run time over their run count (a program that saw nothing is left out). CPU: the whole machine's busy time (/proc/stat) per forwarded packet, sender included (both CPUs are busy, so it is high and only comparable between rows). ${SECONDS} s per run after a 1 s warm-up, ${REPEAT} runs per cell: median [min–max]. The kube-proxy-shaped rules are the ones of rules-scaling (bench/kube-proxy-rules.ts) with N−1 ClusterIP fillers; ferry's tc programs stay attached with no Services for those rows (they pass unknown traffic: about 0.07 µs a packet, see packet-cost).`,
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
