// LB-IPAM at scale: N LoadBalancer Services waiting when `ferry operator` starts; the time
// until every one has its address in status, the operator's peak RSS, and a restart with
// everything allocated (it must write nothing). Goal (issue 14): 10k in ≤ 2 s, ≤ 150 MiB.
// Run: npx tsx bench/ipam.ts [--services 1000,10000] [--repeat 3]
// The test API server runs in this process on loopback (no network namespace is needed:
// no packet leaves the process pair); the operator is its own process, as in a cluster.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { parse } from 'yaml';
import { testKubeconfig } from '../src/sandbox/apiserver/kubeconfig.js';
import { TestApiServer } from '../src/sandbox/apiserver/server.js';
import type { KObject } from '../src/sandbox/apiserver/store.js';
import { OPERATOR_NODE_FLAGS } from '../src/operator/operator.js';
import { FERRY_BIN, POOL_CRD } from '../src/sandbox/sandbox.js';
import { fmtStat, markdownTable, progress, publish, stat, type Stat } from './report.js';

const { values } = parseArgs({ options: { services: { type: 'string' }, repeat: { type: 'string' } } });
const SIZES = (values.services ?? '1000,10000').split(',').map(Number);
const REPEAT = Number(values.repeat ?? 3);

/** Peak resident set of a process (VmHWM), MiB. */
function peakRssMiB(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

type Svc = KObject & { status?: { loadBalancer?: { ingress?: Array<{ ip: string }> } } };
const allocated = (s: Svc) => (s.status?.loadBalancer?.ingress?.length ?? 0) > 0;

interface Run { allocateMs: number; firstWriteMs: number; rssMiB: number; statusWrites: number; eventsPosted: number; restartMs: number; restartWrites: number; restartRssMiB: number }

async function once(n: number, nodeFlags: string[]): Promise<Run> {
  const server = new TestApiServer();
  await server.start();
  const dir = mkdtempSync(join(tmpdir(), 'ferry-bench-ipam-'));
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(kubeconfig, testKubeconfig(server.url));
  const store = server.store;
  store.create('namespaces', { metadata: { name: 'kube-system' } });
  const crd = await fetch(`${server.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(parse(readFileSync(POOL_CRD, 'utf8'))) });
  if (crd.status !== 201) throw new Error(`CRD: ${crd.status}`);
  store.create('loadbalancerippools', { apiVersion: 'ferry.dev/v1alpha1', kind: 'LoadBalancerIPPool', metadata: { name: 'big' }, spec: { blocks: [{ cidr: '10.128.0.0/14' }] } } as KObject);
  for (let i = 0; i < n; i++) {
    store.create('services', { metadata: { name: `lb-${i}`, namespace: `ns-${i % 50}` }, spec: { type: 'LoadBalancer', clusterIP: `10.${96 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`, selector: { app: `a${i}` }, ports: [{ port: 80, protocol: 'TCP', nodePort: 30000 + (i % 2000) }] } } as KObject);
  }
  let done = 0;
  let firstWrite = 0;
  let lastWrite = 0;
  let t0 = 0;
  const unsubscribe = store.subscribe((e) => {
    if (e.resource !== 'services' || e.type !== 'MODIFIED' || !allocated(e.object as Svc)) return;
    firstWrite ||= performance.now();
    lastWrite = performance.now();
    done++;
  });
  const start = () => {
    t0 = performance.now();
    return spawn(process.execPath, [...nodeFlags, FERRY_BIN, 'operator', '--kubeconfig', kubeconfig, '--namespace', 'kube-system', '--identity', 'bench', '--log-level', 'warn'], {
      stdio: ['ignore', 'inherit', 'inherit'],
      env: { ...process.env, FERRY_HEALTHZ_BIND_ADDRESS: '', FERRY_METRICS_BIND_ADDRESS: '' },
    });
  };
  const stop = async (child: ReturnType<typeof spawn>) => {
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    await exited;
  };
  try {
    let child = start();
    for (const end = Date.now() + 120_000; done < n; ) {
      if (Date.now() > end) throw new Error(`only ${done} of ${n} Services allocated after 120 s`);
      await new Promise((r) => setTimeout(r, 5));
    }
    const allocateMs = lastWrite - t0;
    const firstWriteMs = firstWrite - t0;
    await new Promise((r) => setTimeout(r, 1000)); // let the event queue drain before counting
    const rssMiB = peakRssMiB(child.pid!);
    const statusWrites = server.access.filter((a) => a.verb === 'patch' && a.resource === 'services/status').length;
    const eventsPosted = store.list('events').length;
    const ips = new Set(store.list('services').map((s) => (s as Svc).status!.loadBalancer!.ingress![0]!.ip));
    if (ips.size !== n) throw new Error(`${n} Services but ${ips.size} distinct addresses`);
    await stop(child);

    // Restart with everything allocated: when is the first pass done, and what does it write?
    const writesBefore = server.access.length;
    child = start();
    const passDone = await new Promise<number>((resolve, reject) => {
      const timer = setInterval(() => {
        const lease = store.get('leases', 'kube-system', 'ferry-operator') as { spec?: { holderIdentity?: string } } | undefined;
        const pool = store.get('loadbalancerippools', undefined, 'big') as { status?: { used?: number } } | undefined;
        // The pool's status already holds n: the pass writes nothing, so "done" is the lease
        // taken plus one pass; the operator logs no pass without writes, so wait on the lease
        // and then a quiet second.
        if (lease?.spec?.holderIdentity === 'bench' && pool?.status?.used === n) {
          clearInterval(timer);
          resolve(performance.now() - t0);
        }
      }, 5);
      setTimeout(() => {
        clearInterval(timer);
        reject(new Error('restart: no lease after 60 s'));
      }, 60_000);
    });
    await new Promise((r) => setTimeout(r, 1500));
    const restartWrites = server.access.slice(writesBefore).filter((a) => a.verb === 'patch' && a.resource === 'services/status').length;
    const restartRssMiB = peakRssMiB(child.pid!);
    await stop(child);
    return { allocateMs, firstWriteMs, rssMiB, statusWrites, eventsPosted, restartMs: passDone, restartWrites, restartRssMiB };
  } finally {
    unsubscribe();
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The operator as deployed (its V8 flags), and with Node's defaults for comparison. */
const VARIANTS: Array<{ name: string; flags: string[] }> = [
  { name: 'as deployed', flags: OPERATOR_NODE_FLAGS },
  { name: 'Node defaults', flags: [] },
];

async function main(): Promise<void> {
  const rows: Array<{ services: number; variant: string; runs: Run[]; allocate: Stat; first: Stat; rss: Stat; restartRss: Stat }> = [];
  for (const n of SIZES) {
    for (const v of VARIANTS) {
      const runs: Run[] = [];
      for (let r = 0; r < REPEAT; r++) {
        progress(`ipam: ${n} Services, ${v.name}, run ${r + 1}/${REPEAT}… `);
        runs.push(await once(n, v.flags));
        progress(`${(runs.at(-1)!.allocateMs / 1000).toFixed(2)} s, ${runs.at(-1)!.rssMiB.toFixed(0)} MiB\n`);
      }
      rows.push({ services: n, variant: v.name, runs, allocate: stat(runs.map((x) => x.allocateMs / 1000)), first: stat(runs.map((x) => x.firstWriteMs / 1000)), rss: stat(runs.map((x) => x.rssMiB)), restartRss: stat(runs.map((x) => x.restartRssMiB)) });
    }
  }
  const table = markdownTable(
    ['Services waiting', 'operator', 'all allocated s', 'first address s', 'peak RSS MiB', 'status writes', 'Events posted', 'restart: writes', 'restart: peak RSS MiB'],
    rows.map((r) => [r.services, r.variant, fmtStat(r.allocate, 2), fmtStat(r.first, 2), fmtStat(r.rss, 0), Math.max(...r.runs.map((x) => x.statusWrites)), Math.min(...r.runs.map((x) => x.eventsPosted)), Math.max(...r.runs.map((x) => x.restartWrites)), fmtStat(r.restartRss, 0)]),
  );
  const big = rows.filter((r) => r.services === (SIZES.includes(10_000) ? 10_000 : SIZES.at(-1)!));
  const deployed = big.find((r) => r.variant === 'as deployed')!;
  const defaults = big.find((r) => r.variant === 'Node defaults')!;
  publish({
    name: 'ipam',
    title: 'LB-IPAM: Services waiting when the operator starts',
    command: `npx tsx bench/ipam.ts --services ${SIZES.join(',')} --repeat ${REPEAT}`,
    method: `the test API server in the benchmark process (loopback, sharing the 2 cores with the operator) holds N LoadBalancer Services in 50 namespaces and one pool (10.128.0.0/14); \`ferry operator\` starts as its own process, as deployed (node ${OPERATOR_NODE_FLAGS.join(' ')}) and with Node's default heap settings: Node start, list, Lease, one pass, N status merge patches (32 at a time); "all allocated" is from the spawn to the API server's last status write, "first address" to its first; peak RSS is the operator's VmHWM (an idle operator is about 115 MiB, most of it @kubernetes/client-node's code); then the operator restarts with everything allocated and must write no status (restart: writes). Events wait until the status writes are done; at most 1000 wait (as with client-go's recorder), the rest are dropped and counted (ferry_operator_events_dropped_total). ${REPEAT} runs per cell, median (min–max).`,
    tables: [table],
    ratios: [
      `${deployed.services} Services as deployed: ${deployed.allocate.median.toFixed(2)} s against the goal of 2 s (×${(deployed.allocate.median / 2).toFixed(2)}), peak RSS ${deployed.rss.median.toFixed(0)} MiB against 150 MiB (×${(deployed.rss.median / 150).toFixed(2)})`,
      `the deployed V8 flags against Node's defaults: peak RSS ×${(deployed.rss.median / defaults.rss.median).toFixed(2)}, time ×${(deployed.allocate.median / defaults.allocate.median).toFixed(2)}`,
    ],
    data: { nodeFlags: OPERATOR_NODE_FLAGS, rows },
  });
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
