// Connect latency through the datapath against direct-to-pod, with 1 and with 10k Services
// loaded: client → NodePort (local backend, remote backend) and client → pod directly.
// Run as root: npx tsx bench/connect-latency.ts [--services 10000] [--count 2000] [--repeat 3]
// Prints a Markdown table and writes bench/results/connect-latency.json.
import { parseArgs } from 'node:util';
import { MiniCluster, WORKLOADS, type TestService } from '../test/harness/mini-cluster.js';
import { machine as machineName, median, writeResult } from './report.js';

const { values } = parseArgs({ options: { services: { type: 'string' }, count: { type: 'string' }, repeat: { type: 'string' } } });
const MANY = Number(values.services ?? 10_000);
const COUNT = Number(values.count ?? 2000);
const REPEAT = Number(values.repeat ?? 3);

interface Sample { p50: number; p90: number; p99: number; failures: number }


async function main(): Promise<void> {
  const c = await MiniCluster.create({ nodes: 2 });
  try {
    const web = await c.pod('web-1', 1, { whoami: 8080 });
    const target: TestService = { clusterIP: '10.96.0.10', ports: [{ port: 80, proto: 'TCP', targetPort: 8080, nodePort: 30080 }], endpoints: [web] };
    const filler = (n: number): TestService[] =>
      Array.from({ length: n }, (_, i) => ({
        clusterIP: `10.97.${i >> 8}.${i & 255}`,
        ports: [{ port: 80, proto: 'TCP' as const, targetPort: 8080 }],
        endpoints: [web],
      }));
    const paths: Array<[string, string]> = [
      ['direct to pod', `${web.ip}:8080`],
      ['NodePort, local backend', '10.0.30.21:30080'],
      ['NodePort, remote backend (SNAT)', '10.0.30.22:30080'],
    ];
    const measure = async (): Promise<Record<string, Sample>> => {
      const out: Record<string, Sample[]> = {};
      for (let r = 0; r < REPEAT; r++) {
        for (const [name, to] of paths) {
          const raw = await c.client.execOk([process.execPath, WORKLOADS, 'connect-latency', '--to', to, '--count', String(COUNT)], { timeoutMs: 300_000 });
          (out[name] ??= []).push(JSON.parse(raw) as Sample);
          process.stderr.write('.');
        }
      }
      return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, { p50: median(v.map((s) => s.p50)), p90: median(v.map((s) => s.p90)), p99: median(v.map((s) => s.p99)), failures: v.reduce((a, s) => a + s.failures, 0) }]));
    };

    c.apply([target]);
    process.stderr.write('1 Service ');
    const one = await measure();
    const t0 = Date.now();
    c.apply([...filler(MANY - 1), target]); // the measured Service is the last one added
    const loadMs = Date.now() - t0;
    process.stderr.write(`\n${MANY} Services (loaded into both nodes in ${loadMs} ms) `);
    const many = await measure();
    process.stderr.write('\n');

    const rows = paths.map(([name]) => {
      const a = one[name]!;
      const b = many[name]!;
      return { path: name, p50_1: a.p50, p99_1: a.p99, p50_many: b.p50, p99_many: b.p99, ratio_1: a.p50 / one['direct to pod']!.p50, ratio_many: b.p50 / many['direct to pod']!.p50, failures: a.failures + b.failures };
    });
    const f = (x: number) => x.toFixed(1);
    const table = [
      `| path | p50 µs (1 svc) | p99 µs (1 svc) | p50 µs (${MANY} svc) | p99 µs (${MANY} svc) | p50 / direct (1) | p50 / direct (${MANY}) |`,
      '|---|---|---|---|---|---|---|',
      ...rows.map((r) => `| ${r.path} | ${f(r.p50_1)} | ${f(r.p99_1)} | ${f(r.p50_many)} | ${f(r.p99_many)} | ${r.ratio_1.toFixed(2)} | ${r.ratio_many.toFixed(2)} |`),
    ].join('\n');
    const machine = machineName();
    process.stdout.write(`${table}\n\nmachine: ${machine}; ${COUNT} connects × ${REPEAT} runs per cell, median of runs; ${MANY} Services loaded in ${loadMs} ms\ncommand: npx tsx bench/connect-latency.ts --services ${MANY} --count ${COUNT} --repeat ${REPEAT}\n`);
    writeResult('connect-latency', { machine, services: MANY, count: COUNT, repeat: REPEAT, loadMs, rows });
  } finally {
    await c.close();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
