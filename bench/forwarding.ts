// SNAT against DSR against direct-to-pod: client → NodePort on node-2 → backend on node-1.
// iperf3 throughput (1 and 4 streams) and TCP connect latency, one sandbox, one run.
// Run as root: npx tsx bench/forwarding.ts [--seconds 5] [--count 2000] [--repeat 3]
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { SandboxApi } from '../src/cli/sandbox-command.js';
import { Sandbox } from '../src/sandbox/sandbox.js';
import { WORKLOADS_BIN } from '../src/sandbox/workloads/spawn.js';
import { machine as machineName, median, writeResult } from './report.js';

const { values } = parseArgs({ options: { seconds: { type: 'string' }, count: { type: 'string' }, repeat: { type: 'string' } } });
const SECONDS = Number(values.seconds ?? 5);
const COUNT = Number(values.count ?? 2000);
const REPEAT = Number(values.repeat ?? 3);

async function main(): Promise<void> {
  const sb = await Sandbox.up({ name: 'fwdbench', nodes: 2, mode: 'snat', log: pino({ level: 'silent' }) });
  try {
    const api = new SandboxApi(sb.api.alsoUrl!);
    const put = async (kind: string, obj: Record<string, unknown>) => {
      const r = await api.call('POST', api.url(kind, 'default'), obj);
      if (r.status >= 300) throw new Error(String(r.json.message));
      await sb.settle();
    };
    await put('Pod', { metadata: { name: 'server', namespace: 'default', labels: { app: 'server' } }, spec: { nodeName: 'node-1', containers: [{ name: 'w', image: 'whoami', ports: [{ containerPort: 8080 }] }] } });
    const pod = sb.kubelet.podInfo('default', 'server')!;
    pod.host.spawn(['iperf3', '-s', '-p', '5201']);
    for (const [name, fwd, np1, np2] of [['snat', 'snat', 30600, 30601], ['dsr', 'dsr', 30610, 30611]] as const) {
      await put('Service', {
        metadata: { name: `server-${name}`, namespace: 'default', annotations: { 'ferry.dev/forwarding': fwd } },
        spec: { type: 'NodePort', selector: { app: 'server' }, ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort: np1 }, { name: 'iperf', port: 5201, targetPort: 5201, nodePort: np2 }] },
      });
    }
    await new Promise((r) => setTimeout(r, 500));
    const paths: Array<[string, string, number, number]> = [
      ['direct to pod', pod.ip, 8080, 5201],
      ['SNAT (NodePort on node-2)', '10.0.30.22', 30600, 30601],
      ['DSR (NodePort on node-2)', '10.0.30.22', 30610, 30611],
    ];
    interface Row { path: string; connectP50us: number; connectP99us: number; gbps1: number; gbps4: number }
    const rows: Row[] = [];
    for (const [name, ip, http, iperf] of paths) {
      const lat: number[] = [];
      const p99: number[] = [];
      const gbit1: number[] = [];
      const gbit4: number[] = [];
      for (let r = 0; r < REPEAT; r++) {
        const l = JSON.parse(await sb.net.client.execOk([process.execPath, WORKLOADS_BIN, 'connect-latency', '--to', `${ip}:${http}`, '--count', String(COUNT)], { timeoutMs: 300_000 })) as { p50: number; p99: number; failures: number };
        lat.push(l.p50);
        p99.push(l.p99);
        for (const [streams, out] of [[1, gbit1], [4, gbit4]] as const) {
          const j = JSON.parse(await sb.net.client.execOk(['iperf3', '-c', ip, '-p', String(iperf), '-t', String(SECONDS), '-P', String(streams), '-J'], { timeoutMs: (SECONDS + 30) * 1000 })) as { end: { sum_received: { bits_per_second: number } } };
          out.push(j.end.sum_received.bits_per_second / 1e9);
        }
        process.stderr.write('.');
      }
      rows.push({ path: name, connectP50us: median(lat), connectP99us: median(p99), gbps1: median(gbit1), gbps4: median(gbit4) });
    }
    process.stderr.write('\n');
    const direct = rows[0]!;
    const snat = rows[1]!;
    const f = (x: number, d = 1) => x.toFixed(d);
    const table = [
      '| path | connect p50 µs | connect p99 µs | iperf3 1 stream Gbit/s | iperf3 4 streams Gbit/s | p50 / direct | 1-stream / direct |',
      '|---|---|---|---|---|---|---|',
      ...rows.map((r) => `| ${r.path} | ${f(r.connectP50us)} | ${f(r.connectP99us)} | ${f(r.gbps1, 2)} | ${f(r.gbps4, 2)} | ${(r.connectP50us / direct.connectP50us).toFixed(2)} | ${(r.gbps1 / direct.gbps1).toFixed(2)} |`),
    ].join('\n');
    const dsr = rows[2]!;
    const ratios = `DSR/SNAT: connect p50 ${(dsr.connectP50us / snat.connectP50us).toFixed(2)}, throughput 1 stream ${(dsr.gbps1 / snat.gbps1).toFixed(2)}, 4 streams ${(dsr.gbps4 / snat.gbps4).toFixed(2)}`;
    const machine = machineName();
    process.stdout.write(`${table}\n\n${ratios}\nmachine: ${machine}; veth pairs through a router namespace; median of ${REPEAT} runs; ${COUNT} connects, ${SECONDS} s iperf3 per run\ncommand: npx tsx bench/forwarding.ts --seconds ${SECONDS} --count ${COUNT} --repeat ${REPEAT}\n`);
    writeResult('forwarding', { machine, rows, ratios });
  } finally {
    await sb.down();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
