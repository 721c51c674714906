// SNAT capacity: how many new connections a second one node sustains through a NodePort to
// one remote backend ip:port when every connection closes with a FIN, as HTTP/1.0 clients
// do. Each closed flow keeps its SNAT port for the closing lifetime (10 s), so the port range
// is the ceiling: range / 10 s. Two runs on the same build, one per range: 61000–65535 (the
// range before the hardening issue) and the default now (DEFAULT_SNAT_PORTS).
// Run as root: npx tsx bench/snat-capacity.ts [--seconds 30] [--concurrency 16]
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { DEFAULT_SNAT_PORTS } from '../src/datapath/loader.js';
import { Sandbox } from '../src/sandbox/sandbox.js';
import { WORKLOADS_BIN } from '../src/sandbox/workloads/spawn.js';
import { barChart } from './plot.js';
import { markdownTable, progress, publish, ratio } from './report.js';

const { values } = parseArgs({ options: { seconds: { type: 'string' }, concurrency: { type: 'string' } } });
const SECONDS = Number(values.seconds ?? 30);
const CONCURRENCY = Number(values.concurrency ?? 16);
const COMMAND = `npx tsx bench/snat-capacity.ts --seconds ${SECONDS} --concurrency ${CONCURRENCY}`;
const NODEPORT = 30700;
const RANGES = [
  { name: 'before (61000–65535)', min: 61000, max: 65535 },
  { name: `now (${DEFAULT_SNAT_PORTS.min}–${DEFAULT_SNAT_PORTS.max})`, min: DEFAULT_SNAT_PORTS.min, max: DEFAULT_SNAT_PORTS.max },
];

interface Run { ok: number; failed: number; perSecond: Array<{ ok: number; failed: number }> }

async function measure(range: { min: number; max: number }): Promise<Run> {
  const sb = await Sandbox.up({ name: 'snatcap', nodes: 2, mode: 'snat', log: pino({ level: 'silent' }), agentEnv: { FERRY_SNAT_PORT_MIN: String(range.min), FERRY_SNAT_PORT_MAX: String(range.max) } });
  try {
    const put = (kind: string, obj: Record<string, unknown>) => sb.put(kind, obj);
    await put('Pod', { metadata: { name: 'echo', namespace: 'default', labels: { app: 'echo' } }, spec: { nodeName: 'node-1', containers: [{ name: 'e', image: 'tcp-echo', ports: [{ containerPort: 7000 }] }] } });
    await put('Service', { metadata: { name: 'echo', namespace: 'default' }, spec: { type: 'NodePort', selector: { app: 'echo' }, ports: [{ port: 7000, targetPort: 7000, nodePort: NODEPORT }] } });
    // Through node-2: the backend is on node-1, so every flow is SNATed to node-2.
    const to = `${sb.net.node(2).ip}:${NODEPORT}`;
    // The client closes first and so keeps TIME_WAIT: let it reuse those ports and use them
    // all, or its own port range, not the node's SNAT ports, would be what runs out.
    await sb.net.client.execOk(['sysctl', '-qw', 'net.ipv4.tcp_tw_reuse=1']);
    await sb.net.client.execOk(['sysctl', '-qw', 'net.ipv4.ip_local_port_range=1024 65535']);
    for (let i = 0; i < 50; i++) {
      const probe = JSON.parse(await sb.net.client.execOk([process.execPath, WORKLOADS_BIN, 'connect-rate', '--to', to, '--seconds', '1', '--concurrency', '1'], { timeoutMs: 10_000 })) as Run;
      if (probe.ok > 0) break;
    }
    // Let the warm-up's ports age out of their closing lifetime.
    await new Promise((r) => setTimeout(r, 11_000));
    const out = await sb.net.client.execOk([process.execPath, WORKLOADS_BIN, 'connect-rate', '--to', to, '--seconds', String(SECONDS), '--concurrency', String(CONCURRENCY)], { timeoutMs: (SECONDS + 30) * 1000 });
    return JSON.parse(out) as Run;
  } finally {
    await sb.down();
  }
}

async function main(): Promise<void> {
  const runs: Array<{ name: string; ports: number; run: Run; sustained: number; ceiling: number }> = [];
  for (const r of RANGES) {
    progress(`snat-capacity: ${r.name} `);
    const run = await measure(r);
    // Sustained: the second half of the run, after the first closing lifetime has passed.
    const tail = run.perSecond.slice(Math.floor(run.perSecond.length / 2));
    const sustained = tail.reduce((a, x) => a + x.ok, 0) / tail.length;
    const ports = r.max - r.min + 1;
    runs.push({ name: r.name, ports, run, sustained, ceiling: ports / 10 });
    progress(`${Math.round(sustained)}/s\n`);
  }
  const table = markdownTable(
    ['SNAT ports', 'ports', 'ceiling (ports / 10 s closing)', 'connections/s, sustained (2nd half)', 'completed', 'failed (no answer within 1 s)'],
    runs.map((x) => [x.name, String(x.ports), `${Math.round(x.ceiling)}/s`, `${Math.round(x.sustained)}/s`, String(x.run.ok), String(x.run.failed)]),
  );
  publish({
    name: 'snat-capacity',
    title: 'SNAT capacity: new connections a second to one backend, closed with FIN',
    command: COMMAND,
    method: `a 2-node sandbox in snat mode; a tcp-echo pod on node-1 behind NodePort ${NODEPORT}; the client connects through node-2 (every flow SNATed) in ${CONCURRENCY} parallel loops of connect, one byte echoed, close with FIN, for ${SECONDS} s; a connection not done within 1 s counts as failed. The client's namespace reuses its TIME_WAIT ports (tcp_tw_reuse=1) over 1024–65535, so that its own ports are not the limit. Closed flows keep their SNAT port for the closing lifetime (10 s). One run per port range, same build; sustained = mean of the second half of the run.`,
    tables: [table],
    ratios: [`sustained connections/s, now against before: ${ratio(runs[1]!.sustained, runs[0]!.sustained)}`],
    plots: [{
      file: 'snat-capacity.svg', caption: 'sustained new connections per second through SNAT, by port range',
      svg: barChart({ title: 'SNAT: sustained new connections/s to one backend (higher is better)', yLabel: 'conn/s', groups: runs.map((x) => x.name), series: [{ name: 'sustained', values: runs.map((x) => x.sustained) }, { name: 'ceiling', values: runs.map((x) => x.ceiling) }] }),
    }],
    data: { seconds: SECONDS, concurrency: CONCURRENCY, runs },
  });
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
