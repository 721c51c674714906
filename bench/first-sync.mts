// The agent's first sync alone, without the sandbox or a list: N Services (ClusterIP, 10
// endpoints each, the shapes bench/agent-sync.ts creates) given to a Reconciler as the
// lean caches would hold them, then one sync into a testbed node's maps (the model, the
// plan, the map writes), then a restart's (the maps read back by a new writer, then a
// sync with nothing to change). Runs in a child node with the agent's V8 flags, so that
// its garbage collection is the agent's. Nothing leaves the testbed's namespaces.
// Run as root: npx tsx bench/first-sync.mts [--services 50000] [--runs 3] [--restarts 1]
import { spawnSync } from 'node:child_process';
import { PerformanceObserver } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { AGENT_NODE_FLAGS } from '../src/agent/config.js';
import { startCpuProfile } from '../src/agent/cpu-profile.js';
import { DEFAULT_MAP_SIZES } from '../src/datapath/loader.js';
import { ServiceWriter } from '../src/datapath/writer.js';
import { leanService, leanSlice } from '../src/k8s/lean.js';
import { SliceIndex } from '../src/model/slice-index.js';
import { NODE_IP, datapathNode } from '../src/sandbox/datapath-node.js';
import { nodeReconciler } from '../src/sandbox/node-reconciler.js';

const { values } = parseArgs({ options: { services: { type: 'string' }, runs: { type: 'string' }, restarts: { type: 'string' }, flags: { type: 'string' }, child: { type: 'boolean' } } });
const N = Number(values.services ?? 50_000);
const RUNS = Number(values.runs ?? 3);
const RESTARTS = Number(values.restarts ?? 1);
const ENDPOINTS = 10;
/** V8 flags after the agent's (a later flag wins): to try other settings, e.g. --flags=--max-semi-space-size=16. */
const EXTRA_FLAGS = values.flags ? values.flags.split(' ').filter(Boolean) : [];

if (!values.child) {
  // One child per run: every run starts from a fresh heap, as an agent does.
  const rows: string[] = [];
  for (let i = 0; i < RUNS; i++) {
    const r = spawnSync(process.execPath, [...AGENT_NODE_FLAGS, ...EXTRA_FLAGS, '--import', 'tsx', fileURLToPath(import.meta.url), '--child', '--services', String(N), '--restarts', String(RESTARTS)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
    if (r.status !== 0) throw new Error(`run ${i + 1} failed (${r.status})`);
    rows.push(r.stdout.trim());
  }
  const of = RESTARTS > 1 ? ` (fastest of ${RESTARTS})` : '';
  console.log(`| run | first sync ms | of it in GC ms | restart: maps read back ms${of} | restart: sync ms${of} | heap used after MiB |\n| --- | --- | --- | --- | --- | --- |`);
  rows.forEach((row, i) => console.log(`| ${i + 1} | ${row} |`));
  console.log(`\n${N} ClusterIP Services x ${ENDPOINTS} endpoints; V8 flags ${[...AGENT_NODE_FLAGS, ...EXTRA_FLAGS].join(' ')}. Command: \`npx tsx bench/first-sync.mts --services ${N} --runs ${RUNS}${RESTARTS > 1 ? ` --restarts ${RESTARTS}` : ''}${values.flags ? ` --flags='${values.flags}'` : ''}\``);
} else {
  let gcMs = 0;
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) gcMs += e.duration;
  }).observe({ entryTypes: ['gc'] });
  const services: V1Service[] = [];
  const slices: V1EndpointSlice[] = [];
  for (let i = 0; i < N; i++) {
    const name = `svc-${i}`;
    services.push(leanService({ metadata: { name, namespace: 'default', resourceVersion: String(i) }, spec: { clusterIP: `10.${96 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`, ports: [{ name: 'http', port: 80, protocol: 'TCP' }] } }));
    slices.push(leanSlice({
      metadata: { name: `${name}-x`, namespace: 'default', labels: { 'kubernetes.io/service-name': name } },
      addressType: 'IPv4',
      ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
      endpoints: Array.from({ length: ENDPOINTS }, (_, e) => ({ addresses: [`10.${244 + (e >> 2)}.${(i >> 8) & 255}.${((i & 255) ^ (e << 6)) & 255}`], nodeName: e % 2 ? 'node-1' : 'node-2', conditions: { ready: true } })),
    }));
  }
  const byName = new Map(services.map((s) => [`${s.metadata!.namespace}/${s.metadata!.name}`, s]));
  // The agent's own index of slices by Service (what its watch events keep).
  const sliceIndex = new SliceIndex();
  for (const s of slices) sliceIndex.update('add', s);
  const nodeObj: V1Node = { metadata: { name: 'node-1' }, status: { addresses: [{ type: 'InternalIP', address: NODE_IP }] } };
  const node = await datapathNode({ mapSizes: { ...DEFAULT_MAP_SIZES, backends: 262_144, services: 2 ** Math.ceil(Math.log2(N * (ENDPOINTS + 1) + 1024)), reverseNat: 2 ** Math.ceil(Math.log2(N + 1024)) } });
  const source = { services: () => services, service: (ns: string, n: string) => byName.get(`${ns}/${n}`), slices: () => slices, slicesOf: (ns: string, n: string) => sliceIndex.of(ns, n), node: () => nodeObj, nodes: () => [nodeObj] };
  const reconciler = (writer: ServiceWriter) => nodeReconciler(node, source, { writer, syncPeriodMs: 3_600_000 });
  try {
    (globalThis as { gc?: () => void }).gc?.();
    await new Promise((r) => setTimeout(r, 100)); // that collection's entry arrives late: not the sync's
    gcMs = 0;
    // FERRY_CPU_PROFILE=prefix: CPU profiles of both syncs (prefix-first.cpuprofile, prefix-restart.cpuprofile).
    const profileTo = process.env.FERRY_CPU_PROFILE;
    let profile = profileTo ? await startCpuProfile() : undefined;
    let t = performance.now();
    const first = reconciler(node.writer);
    await first.syncNow();
    const firstMs = performance.now() - t;
    await profile?.stopTo(`${profileTo}-first.cpuprofile`);
    await new Promise((r) => setTimeout(r, 100)); // the GC entries are delivered on a later turn
    const firstGcMs = gcMs;
    if (first.frontendCount !== N) throw new Error(`${first.frontendCount} frontends programmed, ${N} wanted`);
    await first.stop();
    (globalThis as { gc?: () => void }).gc?.();
    const heapMiB = process.memoryUsage().heapUsed / 2 ** 20;
    // Restarts do not change the maps: each is the same work, so the fastest of several is
    // the one this noisy machine disturbed least.
    let restoreMs = Infinity;
    let againMs = Infinity;
    for (let i = 0; i < RESTARTS; i++) {
      (globalThis as { gc?: () => void }).gc?.();
      t = performance.now();
      const writer = new ServiceWriter(node.dp.maps, { maglevTableSize: node.dp.maglevTableSize });
      restoreMs = Math.min(restoreMs, performance.now() - t);
      profile = profileTo && i === 0 ? await startCpuProfile() : undefined;
      t = performance.now();
      const again = reconciler(writer);
      await again.syncNow();
      againMs = Math.min(againMs, performance.now() - t);
      await profile?.stopTo(`${profileTo}-restart.cpuprofile`);
      await again.stop();
    }
    console.log([firstMs, firstGcMs, restoreMs, againMs, heapMiB].map((x) => Math.round(x)).join(' | '));
  } finally {
    await node.close();
  }
}
