// Control plane: initial sync time and agent RSS with N Services (10 endpoints each), and
// one-change propagation (the API server's write → the map updated), p50/p99.
// Run as root: npx tsx bench/agent-sync.ts [--services 1000,10000] [--changes 50]
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { lb4KeyCodec, lb4ServiceCodec } from '../src/datapath/layouts.js';
import { openPinnedMap } from '../src/ebpf/pinned.js';
import type { KObject } from '../src/sandbox/apiserver/store.js';
import { pino } from 'pino';
import { Sandbox } from '../src/sandbox/sandbox.js';
import { machine as machineName, writeResult } from './report.js';

const { values } = parseArgs({ options: { services: { type: 'string' }, changes: { type: 'string' } } });
const SIZES = (values.services ?? '1000,10000').split(',').map(Number);
const CHANGES = Number(values.changes ?? 50);
const ENDPOINTS = 10;

function rssMiB(pid: number): number {
  // The agent runs as `sh → nsenter → node`; exec keeps the PID.
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))]!;

async function run(n: number) {
  const c = await Sandbox.up({
    name: 'bench',
    nodes: 1,
    mode: 'snat',
    log: pino({ level: 'silent' }),
    agentEnv: { FERRY_MIN_SYNC_PERIOD_MS: '50', FERRY_MAP_SIZES: JSON.stringify({ backends: 262144, services: 524288 }) },
  });
  try {
    const node = c.net.node(1);
    await c.stopAgent(node); // measure a start with every object already there
    const store = c.store;
    for (let i = 0; i < n; i++) {
      const name = `svc-${i}`;
      store.create('services', { metadata: { name, namespace: 'default' }, spec: { clusterIP: `10.${96 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`, ports: [{ name: 'http', port: 80, protocol: 'TCP' }] } } as KObject);
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
    const agent = await c.startAgent(node);
    const syncLine = agent.output().split('\n').find((l: string) => l.includes('initial sync done')) ?? '';
    const syncMs = Number(/"ms":(\d+)/.exec(syncLine)?.[1] ?? Date.now() - t0);
    const rss = rssMiB(agent.pid);

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
    return { services: n, endpointsPerService: ENDPOINTS, initialSyncMs: syncMs, rssMiB: Math.round(Math.max(rss, rssAfter)), propagationMs: { p50: pct(lat, 0.5), p99: pct(lat, 0.99), samples: lat.length } };
  } finally {
    await c.down();
  }
}

async function main(): Promise<void> {
  const rows = [];
  for (const n of SIZES) {
    process.stderr.write(`${n} Services… `);
    rows.push(await run(n));
    process.stderr.write('done\n');
  }
  const machine = machineName();
  const table = [
    '| Services (10 endpoints each) | initial sync | agent RSS | one change p50 | one change p99 |',
    '|---|---|---|---|---|',
    ...rows.map((r) => `| ${r.services} | ${(r.initialSyncMs / 1000).toFixed(2)} s | ${r.rssMiB} MiB | ${r.propagationMs.p50.toFixed(1)} ms | ${r.propagationMs.p99.toFixed(1)} ms |`),
  ].join('\n');
  process.stdout.write(`${table}\n\nmachine: ${machine}; ${CHANGES} changes per size; minSyncPeriod 50 ms\ncommand: npx tsx bench/agent-sync.ts --services ${SIZES.join(',')} --changes ${CHANGES}\n`);
  writeResult('agent-sync', { machine, rows });
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
