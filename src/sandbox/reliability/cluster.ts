// The cluster every reliability scenario runs in: a 2-node sandbox (SNAT), pods web-1 on
// node-1 and web-2 on node-2 serving HTTP (8080), UDP echo (5353) and TCP echo (7), a
// LoadBalancer Service over both, and a tool pod on node-1 as an in-cluster client. Steady
// load goes through every kind of frontend at once: the NodePort and the LoadBalancer IP
// from the outside client, the ClusterIP from the tool pod; TCP and UDP each.
import { readFileSync } from 'node:fs';
import { pino } from 'pino';
import { listFrontends, listMaps } from '../../datapath/inspect.js';
import type { NodeInfo } from '../network.js';
import type { Host, Proc } from '../netns/testbed.js';
import { Sandbox } from '../sandbox.js';
import { WORKLOADS_BIN } from '../workloads/spawn.js';
import { diagnoseFailures } from './diagnose.js';
import { movedCounters, readNetCounters } from './net-counters.js';

export const HTTP_NODEPORT = 30180;
export const DNS_NODEPORT = 30153;
export const ECHO_NODEPORT = 30107;

const pod = (name: string, node: string, labels: Record<string, string>) => ({
  apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'default', labels },
  spec: {
    nodeName: node,
    containers: [
      { name: 'http', image: 'whoami', ports: [{ containerPort: 8080 }] },
      { name: 'dns', image: 'udp-echo', ports: [{ containerPort: 5353, protocol: 'UDP' }] },
      { name: 'echo', image: 'tcp-echo', ports: [{ containerPort: 7 }] },
    ],
  },
});

export const webService = {
  apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'default' },
  spec: {
    type: 'LoadBalancer', selector: { app: 'web' },
    ports: [
      { name: 'http', port: 80, targetPort: 8080, nodePort: HTTP_NODEPORT },
      { name: 'dns', port: 53, targetPort: 5353, protocol: 'UDP', nodePort: DNS_NODEPORT },
      { name: 'echo', port: 7, targetPort: 7, nodePort: ECHO_NODEPORT },
    ],
  },
};

export interface ReliabilityCluster {
  sb: Sandbox;
  node1: NodeInfo;
  node2: NodeInfo;
  clusterIP: string;
  lbIP: string;
  /** The in-cluster client (a pod on node-1). */
  tool: Host;
  down(): Promise<void>;
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export async function waitFor<T>(what: string, fn: () => Promise<T> | T, ok: (v: T) => boolean, ms = 60_000, every = 100): Promise<T> {
  let last: T | undefined;
  for (const end = Date.now() + ms; Date.now() < end; ) {
    try {
      last = await fn();
      if (ok(last)) return last;
    } catch {
      // not yet
    }
    await new Promise((r) => setTimeout(r, every));
  }
  throw new Error(`${what}: not within ${ms} ms (last: ${JSON.stringify(last)})`);
}

/** HTTP status of a GET from a host (000: no answer within a second). */
export async function httpStatus(from: Host, url: string): Promise<string> {
  return (await from.exec(['curl', '-s', '-o', '/dev/null', '-w', '%{http_code}', '--max-time', '1', url])).stdout;
}

export async function reliabilityCluster(name: string, opts: { agentBin?: string; agentEnv?: Record<string, string> } = {}): Promise<ReliabilityCluster> {
  const sb = await Sandbox.up({ name, nodes: 2, mode: 'snat', log: pino({ level: 'silent' }), ...opts });
  try {
    const [node1, node2] = sb.net.nodes as [NodeInfo, NodeInfo];
    await sb.put('Pod', pod('web-1', node1.name, { app: 'web' }));
    await sb.put('Pod', pod('web-2', node2.name, { app: 'web', only: 'node-2' }));
    await sb.put('Pod', { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'tool', namespace: 'default', labels: { app: 'tool' } }, spec: { nodeName: node1.name, containers: [{ name: 'c', image: 'whoami', ports: [{ containerPort: 9999 }] }] } });
    await sb.put('Service', webService);
    const svc = await waitFor('web gets a LoadBalancer IP', () => sb.store.get('services', 'default', 'web') as unknown as { spec: { clusterIP: string }; status?: { loadBalancer?: { ingress?: Array<{ ip: string }> } } }, (s) => Boolean(s?.status?.loadBalancer?.ingress?.[0]?.ip));
    const lbIP = svc.status!.loadBalancer!.ingress![0]!.ip;
    await waitFor('the tool pod runs', () => sb.kubelet.podInfo('default', 'tool'), Boolean);
    const tool = sb.kubelet.podInfo('default', 'tool')!.host;
    const c: ReliabilityCluster = { sb, node1, node2, clusterIP: svc.spec.clusterIP, lbIP, tool, down: () => sb.down() };
    for (const [from, url] of [[sb.net.client, `http://${node1.ip}:${HTTP_NODEPORT}/`], [sb.net.client, `http://${lbIP}/`], [tool, `http://${c.clusterIP}/`]] as const) {
      await waitFor(`${url} answers`, () => httpStatus(from, url), (s) => s === '200');
    }
    return c;
  } catch (e) {
    await sb.down();
    throw e;
  }
}

export interface LoadReport {
  requests: number;
  failed: number;
  byTarget: Record<string, { ok: number; failed: number }>;
  failures: Array<{ at: number; target: string; error: string }>;
  /** Per second of the run: requests that worked and failed. */
  perSecond: Array<{ at: number; ok: number; failed: number }>;
  /** The kernel counters of the router, the nodes and the web pods that moved during the load (ICMP errors and resets sent, packets without a route). */
  netCounters: string[];
  /** With failures: what the nodes' maps held for them (diagnose.ts). */
  diagnosis: string[];
}

export interface SteadyLoad {
  /** Failures so far (for a scenario that watches). */
  failedSoFar(): number;
  stop(): Promise<LoadReport>;
}

/** A new TCP connection and a new UDP flow every `intervalMs` through each frontend, until stopped. */
export function startSteadyLoad(c: ReliabilityCluster, intervalMs = 20): SteadyLoad {
  const outside = [`tcp:${c.node1.ip}:${HTTP_NODEPORT}`, `udp:${c.node1.ip}:${DNS_NODEPORT}`, `tcp:${c.lbIP}:80`, `udp:${c.lbIP}:53`];
  const inside = [`tcp:${c.clusterIP}:80`, `udp:${c.clusterIP}:53`];
  // The web pods too: a pod's resets name it as the end that broke a connection.
  const pods = ['web-1', 'web-2'].map((name) => c.sb.kubelet.podInfo('default', name)?.host).filter((h): h is Host => h !== undefined);
  const hosts = [c.sb.net.router, ...c.sb.net.nodes.map((n) => n.host), ...pods];
  const before = readNetCounters(hosts).catch(() => undefined);
  const procs: Proc[] = [
    c.sb.net.client.spawn([process.execPath, WORKLOADS_BIN, 'steady', '--targets', outside.join(','), '--interval-ms', String(intervalMs)]),
    c.tool.spawn([process.execPath, WORKLOADS_BIN, 'steady', '--targets', inside.join(','), '--interval-ms', String(intervalMs)]),
  ];
  const parse = (): LoadReport => {
    const r: LoadReport = { requests: 0, failed: 0, byTarget: {}, failures: [], perSecond: [], netCounters: [], diagnosis: [] };
    const seconds = new Map<number, { ok: number; failed: number }>();
    for (const p of procs) {
      for (const line of p.output().split('\n')) {
        if (!line.startsWith('{')) continue;
        const m = JSON.parse(line) as { at: number; counts?: Record<string, [number, number]>; target?: string; error?: string };
        if (m.error) r.failures.push({ at: m.at, target: m.target!, error: m.error });
        for (const [t, [ok, failed]] of Object.entries(m.counts ?? {})) {
          const bt = (r.byTarget[t] ??= { ok: 0, failed: 0 });
          bt.ok += ok;
          bt.failed += failed;
          r.requests += ok + failed;
          r.failed += failed;
          const s = Math.floor(m.at / 1000);
          const ps = seconds.get(s) ?? { ok: 0, failed: 0 };
          ps.ok += ok;
          ps.failed += failed;
          seconds.set(s, ps);
        }
      }
    }
    r.perSecond = [...seconds].sort((a, b) => a[0] - b[0]).map(([s, v]) => ({ at: s * 1000, ...v }));
    return r;
  };
  return {
    failedSoFar: () => procs.reduce((n, p) => n + p.output().split('\n').filter((l) => l.includes('"error"')).length, 0),
    stop: async () => {
      await Promise.all(procs.map((p) => p.stop(5000)));
      const r = parse();
      const [was, now] = [await before, await readNetCounters(hosts).catch(() => undefined)];
      r.netCounters = was && now ? movedCounters(was, now) : ['the kernel counters could not be read'];
      if (r.failures.length) r.diagnosis = diagnoseFailures(c, r.failures);
      return r;
    },
  };
}

/** A scenario's steps (epoch ms), to place a failure in. */
export type Steps = Array<{ at: number; step: string }>;

/** Each failure (the first five) with the step it came closest after: what a failed run is read by. */
export function failuresInSteps(load: LoadReport, steps: Steps): string[] {
  const where = placeAmongSteps(steps);
  return load.failures.slice(0, 5).map((f) => `${f.target} ${f.error}, started ${where(f.at)}`);
}

/** Where a moment (epoch ms) lies among the steps: "N ms after <the latest step before it>". */
export function placeAmongSteps(steps: Steps): (at: number) => string {
  const sorted = [...steps].sort((a, b) => a.at - b.at);
  return (at) => {
    const before = sorted.filter((s) => s.at <= at).at(-1);
    return before ? `${at - before.at} ms after ${before.step}` : 'before the first step';
  };
}

/** What node-1's datapath serves: frontend → backends, sorted (to see that it does not change). */
export function servedTable(c: ReliabilityCluster, node: NodeInfo): string[] {
  return listFrontends(c.sb.pinDir(node)).map((f) => `${f.frontend} ${f.type} → ${f.backends.map((b) => b.address).sort().join(',')}`).sort();
}

/** Entries in a pinned map of a node. */
export function mapFill(c: ReliabilityCluster, node: NodeInfo, map: string): { entries: number; capacity: number } {
  const m = listMaps(c.sb.pinDir(node)).find((x) => x.name === map);
  return { entries: m?.entries ?? 0, capacity: m?.capacity ?? 0 };
}

/** Resident memory of a process, in MiB. */
export function rssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0) / 1024;
}
