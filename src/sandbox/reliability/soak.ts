// A soak: steady load through every frontend while Services and their endpoints churn at a
// bounded rate (one change a second), sampled over time: the agents' resident memory,
// conntrack and NAT occupancy on node-1, and requests and failures per interval.
import { readCounters } from '../../datapath/inspect.js';
import { mapFill, rssMiB, startSteadyLoad, type LoadReport, type ReliabilityCluster, sleep } from './cluster.js';
import { TELLING } from './diagnose.js';

export interface SoakSample {
  atS: number;
  rssMiB: Record<string, number>;
  ct4: number;
  nat4: number;
  requests: number;
  failed: number;
}

export interface SoakResult {
  seconds: number;
  changes: number;
  samples: SoakSample[];
  load: LoadReport;
  /** node-1's counts of lost, remapped and contested flows over the soak (diagnose.ts's TELLING paths). */
  telling: Record<string, number>;
}

const CHURN_SERVICES = 10;

const churnService = (i: number) => ({ apiVersion: 'v1', kind: 'Service', metadata: { name: `churn-${i}`, namespace: 'default' }, spec: { ports: [{ port: 80, protocol: 'TCP' }] } });
const churnSlice = (i: number, endpoints: string[]) => ({
  apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', addressType: 'IPv4',
  metadata: { name: `churn-${i}-a`, namespace: 'default', labels: { 'kubernetes.io/service-name': `churn-${i}` } },
  ports: [{ port: 80, protocol: 'TCP' }],
  endpoints: endpoints.map((a) => ({ addresses: [a], conditions: { ready: true } })),
});

export async function soakScenario(c: ReliabilityCluster, opts: { seconds: number; sampleEveryS: number }): Promise<SoakResult> {
  const { sb } = c;
  const pids = new Map([c.node1, c.node2].map((n) => [n.name, sb.agents.get(n.name)!.pid]));
  const load = startSteadyLoad(c);
  const start = Date.now();
  const samples: Array<Omit<SoakSample, 'requests' | 'failed'>> = [];
  const exists = new Set<number>();
  let changes = 0;
  let seed = 1;
  const random = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  try {
    let nextSample = 0;
    for (let tick = 0; Date.now() - start < opts.seconds * 1000; tick++) {
      const i = tick % CHURN_SERVICES;
      if (!exists.has(i) || random() < 0.5) {
        // Created, or its endpoints replaced by another random set.
        const endpoints = Array.from({ length: 1 + Math.floor(random() * 4) }, (_, k) => `10.244.8.${1 + ((i * 16 + k * 3 + tick) % 250)}`);
        if (!exists.has(i)) await sb.put('Service', churnService(i));
        await sb.put('EndpointSlice', churnSlice(i, [...new Set(endpoints)]));
        exists.add(i);
      } else {
        sb.store.delete('services', 'default', `churn-${i}`);
        sb.store.delete('endpointslices', 'default', `churn-${i}-a`);
        exists.delete(i);
      }
      changes++;
      const atS = (Date.now() - start) / 1000;
      if (atS >= nextSample) {
        const rss: Record<string, number> = {};
        for (const [name, pid] of pids) rss[name] = rssMiB(pid);
        samples.push({ atS: Math.round(atS), rssMiB: rss, ct4: mapFill(c, c.node1, 'ct4').entries, nat4: mapFill(c, c.node1, 'nat4').entries });
        nextSample += opts.sampleEveryS;
      }
      await sleep(1000);
    }
  } catch (e) {
    await load.stop();
    throw e;
  }
  const report = await load.stop();
  const counters = readCounters(c.sb.pinDir(c.node1));
  const telling = Object.fromEntries(TELLING.map((name) => [name, Number(counters.forwarded.find((r) => r.name === name)?.packets ?? 0)]));
  for (const i of exists) {
    sb.store.delete('services', 'default', `churn-${i}`);
    sb.store.delete('endpointslices', 'default', `churn-${i}-a`);
  }
  // Requests and failures per sample interval, from the load's per-second counts.
  const withLoad = samples.map((s, k) => {
    const from = start + s.atS * 1000;
    const to = k + 1 < samples.length ? start + samples[k + 1]!.atS * 1000 : Infinity;
    const inside = report.perSecond.filter((p) => p.at >= from - 1000 && p.at < to - 1000);
    return { ...s, requests: inside.reduce((a, p) => a + p.ok + p.failed, 0), failed: inside.reduce((a, p) => a + p.failed, 0) };
  });
  return { seconds: opts.seconds, changes, samples: withLoad, load: report, telling };
}
