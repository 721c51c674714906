// Control plane: initial sync time and agent RSS with N Services (10 endpoints each), and
// one-change propagation (the API server's write → the map updated), p50/p99.
// Run as root: npx tsx bench/agent-sync.ts [--services 1000,10000] [--changes 50]
// The initial sync is one agent start per size (a start from empty maps needs a fresh
// sandbox); the propagation figures are percentiles of --changes samples.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { lb4KeyCodec, lb4ServiceCodec } from '../src/datapath/layouts.js';
import { openPinnedMap } from '../src/ebpf/pinned.js';
import type { KObject } from '../src/sandbox/apiserver/store.js';
import { pino } from 'pino';
import { Sandbox } from '../src/sandbox/sandbox.js';
import { lineChart } from './plot.js';
import { markdownTable, progress, publish } from './report.js';

const { values } = parseArgs({ options: { services: { type: 'string' }, changes: { type: 'string' }, type: { type: 'string' } } });
/** ClusterIP, or LoadBalancer: each Service also has an LB IP (no node port: 50k would not fit the range). */
const TYPE = values.type ?? 'ClusterIP';
if (TYPE !== 'ClusterIP' && TYPE !== 'LoadBalancer') throw new Error(`--type ${TYPE}: ClusterIP or LoadBalancer`);
const LB = TYPE === 'LoadBalancer';
const NAME = LB ? 'agent-sync-loadbalancer' : 'agent-sync';
const SIZES = (values.services ?? '1000,10000').split(',').map(Number);
const CHANGES = Number(values.changes ?? 50);
const ENDPOINTS = 10;

function rssMiB(pid: number): number {
  // The agent runs as `sh → nsenter → node`; exec keeps the PID.
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** The agent's GC pauses so far (prom-client's nodejs_gc_duration_seconds), from its metrics port in the node's namespace. */
async function gcStats(node: { host: { exec(cmd: string[]): Promise<{ stdout: string }> } }): Promise<{ count: number; sum: number; over10ms: number; heapUsedMiB: number; heapTotalMiB: number; externalMiB: number }> {
  const text = (await node.host.exec(['curl', '-s', '--max-time', '5', 'http://127.0.0.1:10249/metrics'])).stdout;
  const total = (re: RegExp) => [...text.matchAll(re)].reduce((a, m) => a + Number(m[1]), 0);
  const count = total(/^nodejs_gc_duration_seconds_count\{[^}]*\} (\S+)$/gm);
  const upTo10ms = total(/^nodejs_gc_duration_seconds_bucket\{le="0\.01",[^}]*\} (\S+)$/gm);
  const mib = (name: string) => Math.round(total(new RegExp(`^${name} (\\S+)$`, 'gm')) / 2 ** 20);
  return { count, sum: total(/^nodejs_gc_duration_seconds_sum\{[^}]*\} (\S+)$/gm), over10ms: count - upTo10ms, heapUsedMiB: mib('nodejs_heap_size_used_bytes'), heapTotalMiB: mib('nodejs_heap_size_total_bytes'), externalMiB: mib('nodejs_external_memory_bytes') };
}

/** The phases of an agent's start, from its "initial sync done" log line (ms each). */
function startPhases(output: string): { ms: number; loadMs: number; restoreMs: number; listMs: number; firstSyncMs: number } {
  const line = output.split('\n').find((l) => l.includes('initial sync done')) ?? '';
  const field = (name: string) => Number(new RegExp(`"${name}":(\\d+)`).exec(line)?.[1] ?? NaN);
  return { ms: field('ms'), loadMs: field('loadMs'), restoreMs: field('restoreMs'), listMs: field('listMs'), firstSyncMs: field('syncMs') };
}

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))]!;

async function run(n: number) {
  const c = await Sandbox.up({
    name: 'bench',
    nodes: 1,
    mode: 'snat',
    log: pino({ level: 'silent' }),
    // Every Service takes a master entry and 10 slots in lb4_services (with an LB IP, the
    // same again and the address's "unknown port" entry).
    // FERRY_CPU_PROFILE=file: the agent writes a CPU profile of its list and first sync there.
    agentEnv: { ...(process.env.FERRY_CPU_PROFILE ? { FERRY_CPU_PROFILE: process.env.FERRY_CPU_PROFILE } : {}), FERRY_MIN_SYNC_PERIOD_MS: '50', FERRY_MAP_SIZES: JSON.stringify({ backends: 262144, services: Math.max(524288, 2 ** Math.ceil(Math.log2(n * (LB ? 2 * (ENDPOINTS + 1) + 1 : ENDPOINTS + 1) + 1024))) }) },
  });
  try {
    const node = c.net.node(1);
    await c.stopAgent(node); // measure a start with every object already there
    const store = c.store;
    for (let i = 0; i < n; i++) {
      const name = `svc-${i}`;
      // Another class: the LB IPs are given here, and the sandbox's ferry operator leaves them be.
      const lb = LB ? { spec: { type: 'LoadBalancer', loadBalancerClass: 'bench.example/static', allocateLoadBalancerNodePorts: false }, status: { loadBalancer: { ingress: [{ ip: `192.168.${(i >> 8) & 255}.${i & 255}` }] } } } : { spec: {}, status: {} };
      store.create('services', { metadata: { name, namespace: 'default' }, spec: { ...lb.spec, clusterIP: `10.${96 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`, ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }, status: lb.status } as KObject);
      store.create('endpointslices', {
        metadata: { name: `${name}-x`, namespace: 'default', labels: { 'kubernetes.io/service-name': name } },
        addressType: 'IPv4',
        ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
        endpoints: Array.from({ length: ENDPOINTS }, (_, e) => ({ addresses: [`10.${244 + (e >> 2)}.${(i >> 8) & 255}.${((i & 255) ^ (e << 6)) & 255}`], nodeName: e % 2 ? 'node-1' : 'node-2', conditions: { ready: true } })),
      } as KObject);
    }
    // The probe Service whose endpoint count the propagation test flips.
    store.create('services', { metadata: { name: 'probe', namespace: 'default' }, spec: { clusterIP: '10.111.0.1', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] } } as KObject);
    const probeSlice = (count: number) => ({
      metadata: { name: 'probe-x', namespace: 'default', labels: { 'kubernetes.io/service-name': 'probe' } },
      addressType: 'IPv4',
      ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
      endpoints: Array.from({ length: count }, (_, e) => ({ addresses: [`10.250.0.${e + 1}`], nodeName: 'node-1', conditions: { ready: true } })),
    }) as KObject;
    store.create('endpointslices', probeSlice(1));

    const t0 = Date.now();
    let agent = await c.startAgent(node, 600_000);
    const { ms, ...phases } = startPhases(agent.output());
    const syncMs = Number.isNaN(ms) ? Date.now() - t0 : ms;
    const rss = rssMiB(agent.pid);
    const gcBefore = await gcStats(node);

    const services = openPinnedMap(join(c.pinDir(node), 'lb4_services'), lb4KeyCodec, lb4ServiceCodec);
    const master = { address: '10.111.0.1', port: 80, proto: 6, scope: 0, slot: 0 };
    const lat: number[] = [];
    try {
      for (let i = 0; i < CHANGES; i++) {
        const want = i % 2 === 0 ? 2 : 1;
        const have = store.get('endpointslices', 'default', 'probe-x')!;
        const t = process.hrtime.bigint();
        store.update('endpointslices', { ...probeSlice(want), metadata: { ...probeSlice(want).metadata, resourceVersion: have.metadata.resourceVersion } });
        for (;;) {
          if (services.lookup(master)?.count === want) break;
          await new Promise((r) => setImmediate(r));
        }
        lat.push(Number(process.hrtime.bigint() - t) / 1e6);
        await new Promise((r) => setTimeout(r, 120)); // past minSyncPeriod: each change is its own sync
      }
    } finally {
      services.close();
    }
    const rssAfter = rssMiB(agent.pid);
    const gcAfter = await gcStats(node);
    // A restart (an upgrade's, a crash's): the maps stay pinned with everything in them; the
    // new agent reads them back (the writer's restore), lists, and syncs without a change.
    await c.stopAgent(node);
    agent = await c.startAgent(node, 600_000);
    const restart = startPhases(agent.output());
    return {
      services: n, endpointsPerService: ENDPOINTS, initialSyncMs: syncMs, ...phases, rssMiB: Math.round(Math.max(rss, rssAfter)),
      propagationMs: { p50: pct(lat, 0.5), p99: pct(lat, 0.99), samples: lat.length },
      gcDuringChanges: { pauses: gcAfter.count - gcBefore.count, seconds: gcAfter.sum - gcBefore.sum, over10ms: gcAfter.over10ms - gcBefore.over10ms },
      // Where the RSS is: V8's heap (used of total) and memory outside it (Buffers), after the changes.
      heap: { usedMiB: gcAfter.heapUsedMiB, totalMiB: gcAfter.heapTotalMiB, externalMiB: gcAfter.externalMiB },
      restart: { ms: restart.ms, restoreMs: restart.restoreMs, listMs: restart.listMs, firstSyncMs: restart.firstSyncMs, rssMiB: Math.round(rssMiB(agent.pid)) },
    };
  } finally {
    await c.down();
  }
}

async function main(): Promise<void> {
  const rows = [];
  for (const n of SIZES) {
    progress(`agent-sync: ${n} Services… `);
    rows.push(await run(n));
    progress('done\n');
  }
  const s = (ms: number) => (ms / 1000).toFixed(2);
  const table = markdownTable(
    ['Services (10 endpoints each)', 'initial sync s (list + first sync)', 'list s', 'first sync s', 'agent start to synced s (with BPF load)', 'agent RSS MiB', 'one change p50 ms', 'one change p99 ms', 'GC pauses during the changes (over 10 ms), total ms', 'restart to synced s (maps read back s, list s, first sync s)'],
    rows.map((r) => [r.services, s(r.listMs + r.firstSyncMs), s(r.listMs), s(r.firstSyncMs), s(r.initialSyncMs), r.rssMiB, r.propagationMs.p50.toFixed(1), r.propagationMs.p99.toFixed(1), `${r.gcDuringChanges.pauses} (${r.gcDuringChanges.over10ms}), ${(r.gcDuringChanges.seconds * 1000).toFixed(0)}`, `${s(r.restart.ms)} (${s(r.restart.restoreMs)}, ${s(r.restart.listMs)}, ${s(r.restart.firstSyncMs)})`]),
  );
  const first = rows[0]!;
  const last = rows[rows.length - 1]!;
  publish({
    name: NAME,
    title: `Control plane: initial sync, RSS, one-change propagation, restart (${TYPE} Services)`,
    command: `npx tsx bench/agent-sync.ts --services ${SIZES.join(',')} --changes ${CHANGES}${LB ? ' --type LoadBalancer' : ''}`,
    method: `a 1-node sandbox with the test API server (in the benchmark's process, on the same 2 cores) holding N ${TYPE} Services × ${ENDPOINTS} endpoints${LB ? ' (each with an LB IP of another loadBalancerClass, which the agent programs as kube-proxy does and the operator leaves alone; no node port)' : ''}; the agent is stopped, then started with everything in the store, one start per size; from its "initial sync done" log: list (every cache listed in pages of 500), first sync (model and map writes), and the whole start including loading and attaching the BPF programs; RSS of the agent process after the sync and after the changes (the larger); propagation: ${CHANGES} writes of a probe EndpointSlice (1 ↔ 2 endpoints), each timed from the API server's write to the pinned map holding the new count, 120 ms apart (minSyncPeriod 50 ms); then a restart: the agent stopped and started again with its maps pinned and full, which it reads back (the maps read back), lists and syncs without a change.`,
    tables: [table],
    ratios: [
      `${last.services}/${first.services} Services: initial sync ×${((last.listMs + last.firstSyncMs) / (first.listMs + first.firstSyncMs)).toFixed(1)}, RSS ×${(last.rssMiB / first.rssMiB).toFixed(1)}, one change p50 ×${(last.propagationMs.p50 / first.propagationMs.p50).toFixed(1)} (Services ×${(last.services / first.services).toFixed(0)})`,
    ],
    plots: [
      { file: `${NAME}.svg`, caption: 'initial sync time against the Service count', svg: lineChart({ title: 'Agent initial sync (s)', xLabel: 'Services (10 endpoints each)', yLabel: 's', series: [{ name: 'list + first sync', points: rows.map((r) => ({ x: r.services, y: (r.listMs + r.firstSyncMs) / 1000 })) }, { name: 'whole start', points: rows.map((r) => ({ x: r.services, y: r.initialSyncMs / 1000 })) }] }) },
      { file: LB ? 'agent-propagation-loadbalancer.svg' : 'agent-propagation.svg', caption: 'one-change propagation against the Service count', svg: lineChart({ title: 'One change: API write → map (ms)', xLabel: 'Services (10 endpoints each)', yLabel: 'ms', series: [{ name: 'p50', points: rows.map((r) => ({ x: r.services, y: r.propagationMs.p50 })) }, { name: 'p99', points: rows.map((r) => ({ x: r.services, y: r.propagationMs.p99 })) }] }) },
    ],
    data: { changes: CHANGES, rows },
  });
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
