// The reliability suite: each part in a fresh 2-node sandbox, under steady load through
// the NodePort, the LoadBalancer IP and the ClusterIP (TCP and UDP each). The scenarios are
// in src/sandbox/reliability/ (make test runs them short, in test/e2e/reliability.test.ts).
//   restarts    N agent restarts (SIGTERM, SIGKILL) and M kills mid-start
//   upgrade     a rolling upgrade from the previous release (map layout 1) to this build
//   outage      the API server away for S seconds, with changes made meanwhile
//   exhaustion  services/backends, SNAT ports and conntrack full, and their recovery
//   soak        S seconds of Service and endpoint churn under load
// Run as root: npx tsx bench/reliability.ts [--only restarts,upgrade,...] [--restarts 20]
//   [--crashes 5] [--outage 300] [--soak 1800]
import { parseArgs } from 'node:util';
import { exhaustionScenario } from '../src/sandbox/reliability/exhaustion.js';
import { outageScenario } from '../src/sandbox/reliability/outage.js';
import { restartsScenario } from '../src/sandbox/reliability/restarts.js';
import { soakScenario } from '../src/sandbox/reliability/soak.js';
import { upgradeScenario } from '../src/sandbox/reliability/upgrade.js';
import { reliabilityCluster, type LoadReport, type ReliabilityCluster } from '../src/sandbox/reliability/cluster.js';
import { unpackRelease } from '../src/sandbox/previous-release.js';
import { lineChart } from './plot.js';
import { fmtStat, markdownTable, progress, publish, stat } from './report.js';

const { values } = parseArgs({ options: { only: { type: 'string' }, restarts: { type: 'string' }, crashes: { type: 'string' }, outage: { type: 'string' }, soak: { type: 'string' } } });
const PARTS = (values.only ?? 'restarts,upgrade,outage,exhaustion,soak').split(',');
const RESTARTS = Number(values.restarts ?? 20);
const CRASHES = Number(values.crashes ?? 5);
const OUTAGE_S = Number(values.outage ?? 300);
const SOAK_S = Number(values.soak ?? 1800);
const LOAD = 'a new TCP connection (HTTP GET) and a new UDP flow (a datagram echoed) every 20 ms through each of: node-1\'s NodePort and the LoadBalancer IP (from the outside client; the router spreads LB traffic over both nodes by ECMP) and the ClusterIP (from a pod on node-1): 6 streams, 2 s budget per request';
const SETUP = 'a 2-node sandbox (SNAT); the Service web (LoadBalancer: HTTP, UDP echo, TCP echo) over web-1 on node-1 and web-2 on node-2';

const loadRow = (name: string, l: LoadReport) => [name, l.requests, l.failed, l.failures.slice(0, 5).map((f) => `${new Date(f.at).toISOString().slice(11, 23)} ${f.target} ${f.error}`).join('; ') || '-'];
const loadHeader = ['run', 'requests', 'failed', 'first failures'];

async function part(name: string, fn: (c: ReliabilityCluster) => Promise<void>, opts: { agentBin?: string } = {}): Promise<void> {
  progress(`reliability: ${name}\n`);
  const c = await reliabilityCluster(`rel${name.slice(0, 4)}`, opts);
  try {
    await fn(c);
  } finally {
    await c.down();
  }
}

async function main(): Promise<void> {
  if (PARTS.includes('restarts')) {
    await part('restarts', async (c) => {
      const r = await restartsScenario(c, { restarts: RESTARTS, crashes: CRASHES });
      publish({
        name: 'restarts', title: 'Reliability: agent restarts under load',
        command: `npx tsx bench/reliability.ts --only restarts --restarts ${RESTARTS} --crashes ${CRASHES}`,
        method: `${SETUP}; ${LOAD}. node-1's agent is stopped (SIGTERM) and started ${RESTARTS / 2} times, killed (SIGKILL) and started ${RESTARTS / 2} times, with 0.3 s without any agent each time, then killed ${CRASHES} times 150–550 ms after its spawn (starting Node, loading the programs, listing or syncing) and started again. Time to ready: from the spawn to "initial sync done".`,
        tables: [markdownTable(['restarts', 'how', 'time to ready, ms'], r.rows.map((x) => [x.count, x.how, fmtStat(stat(x.readyMs), 0)])), markdownTable(loadHeader, [loadRow('all restarts', r.load)]), markdownTable(['stream', 'requests', 'failed'], Object.entries(r.load.byTarget).map(([t, v]) => [t, v.ok + v.failed, v.failed]))],
        data: r,
      });
    });
  }
  if (PARTS.includes('upgrade')) {
    const release = unpackRelease();
    try {
      await part('upgrade', async (c) => {
        const r = await upgradeScenario(c, { fromCommit: release.commit, held: 16 });
        publish({
          name: 'upgrade', title: 'Reliability: rolling upgrade across a map-layout change, under load',
          command: 'npx tsx bench/reliability.ts --only upgrade',
          method: `${SETUP}; both agents start from the previous release (commit ${release.commit}, map layout 1: test/fixtures/releases/layout-1.tar.gz). ${r.held.count} long-lived TCP connections through node-1's NodePort to the echo port (spread over the local and the remote backend, SNAT), each sending 8 bytes every 100 ms and wanting them back within 1 s; and ${LOAD}. Then node by node: the old agent stopped, this build's agent started over the same pins (conntrack migrated to layout 2), 3 s apart.`,
          tables: [
            markdownTable(['node', 'time to ready, ms', 'maps migrated (from layout: copied + caught up, dropped)', 'previous programs chained behind', 'packets dropped in the switch (handover_unbound)'], r.nodes.map((n) => [n.node, n.readyMs, n.migrated.map((m) => `${m.map} (${m.fromLayout}: ${m.copied} + ${m.caughtUp}, ${m.dropped})`).join(', ') || '-', n.chained === true ? 'yes' : `no: ${String(n.chained)}`, n.handoverDrops])),
            markdownTable(['long-lived connections', 'survived', 'broke at, ms'], [[r.held.count, r.held.survived, r.held.brokeAtMs.join(', ') || '-']]),
            markdownTable(loadHeader, [loadRow('during the upgrade', r.load)]),
          ],
          data: r,
        });
      }, { agentBin: release.bin });
    } finally {
      release.remove();
    }
  }
  if (PARTS.includes('outage')) {
    await part('outage', async (c) => {
      const r = await outageScenario(c, { seconds: OUTAGE_S });
      publish({
        name: 'api-outage', title: 'Reliability: the API server away',
        command: `npx tsx bench/reliability.ts --only outage --outage ${OUTAGE_S}`,
        method: `${SETUP}; ${LOAD}. The API server stops (connections refused, watches cut) for ${OUTAGE_S} s; meanwhile a new NodePort Service is written to its store. Every 5 s: node-1's served table (frontends and backends, read from its pinned maps) compared with the one before the outage, its /livez, its process. Converged: from the API server's return until node-1's maps hold the new Service; answering: until its NodePort answers from the client.`,
        tables: [
          markdownTable(['outage, s', 'checks', 'table changed', '/livez failed', 'agent restarted', 'converged after, ms', 'answering after, ms'], [[r.seconds, r.checks, r.tableChanged, r.livezFailed, r.agentRestarted ? 'yes' : 'no', r.convergedMs, r.answeringMs]]),
          markdownTable(loadHeader, [loadRow('through the outage', r.load)]),
        ],
        data: r,
      });
    });
  }
  if (PARTS.includes('exhaustion')) {
    await part('exhaustion', async (c) => {
      const r = await exhaustionScenario(c);
      publish({
        name: 'exhaustion', title: 'Reliability: full maps, and recovery',
        command: 'npx tsx bench/reliability.ts --only exhaustion',
        method: `${SETUP}. node-1's agent restarted with small maps (resized in place, entries kept). Services: room for ${r.services.capacity} lb4_services entries (what web uses plus 24); ${r.services.offered} more Services, each with one endpoint of its own, under ${LOAD}; then ${r.services.deleted} of them deleted. SNAT: ${r.nat.ports} ports per backend; ${r.nat.held} long-lived connections to a Service whose only backend is on node-2, then ${r.nat.probes} new connections one after the other (2 s budget each), then the long-lived ones closed. Conntrack: ${r.conntrack.capacity} entries (an LRU map); ${r.conntrack.held} long-lived connections through node-1's NodePort while the steady load runs at twice the rate above (each UDP flow lives 60 s in conntrack).`,
          tables: [
            markdownTable(['services map entries', 'Services offered', 'refused (ferry_services_unprogrammed)', 'FERRY_MAP_FULL errors logged', 'deleted', 'refused ones programmed after, ms'], [[r.services.capacity, r.services.offered, r.services.refused, r.services.mapFullErrors, r.services.deleted, r.services.recoveredMs]]),
            markdownTable(loadHeader, [loadRow('web while the map was full', r.services.load)]),
            markdownTable(['SNAT ports', 'held', 'new connections', 'refused', 'nat_exhausted drops', 'new connections work again after, ms'], [[r.nat.ports, r.nat.held, r.nat.probes, r.nat.probesRefused, r.nat.natDrops, r.nat.recoveredMs]]),
            markdownTable(['conntrack entries', 'long-lived connections', 'survived', 'segments of lost flows balanced again (ct_midstream)'], [[r.conntrack.capacity, r.conntrack.held, r.conntrack.survived, r.conntrack.midstream]]),
            markdownTable(loadHeader, [loadRow('with conntrack overfull', r.conntrack.load)]),
          ],
        data: r,
      });
    });
  }
  if (PARTS.includes('soak')) {
    await part('soak', async (c) => {
      const r = await soakScenario(c, { seconds: SOAK_S, sampleEveryS: Math.max(10, Math.round(SOAK_S / 60)) });
      const minutes = (s: number) => s / 60;
      const first = r.samples[0]!;
      const last = r.samples[r.samples.length - 1]!;
      publish({
        name: 'soak', title: 'Reliability: soak under churn',
        command: `npx tsx bench/reliability.ts --only soak --soak ${SOAK_S}`,
        method: `${SETUP}; ${LOAD}. For ${SOAK_S} s, one change a second to 10 more Services (created; endpoints replaced by 1–4 others; deleted), through the API server. Sampled: each agent's resident memory, node-1's ct4 and nat4 entries, requests and failures per interval; at the end, node-1's counts of flows balanced again (ct_rebalanced, ct_midstream), remapped at a local pod (local_remapped), contested (local_contested, dsr_contested) and dropped early (nat_early_drop).`,
        tables: [
          markdownTable(['changes', 'requests', 'failed', 'agent RSS node-1 first → last, MiB', 'node-2, MiB', 'ct4 entries, max', 'nat4 entries, max'], [[r.changes, r.load.requests, r.load.failed, `${first.rssMiB['node-1']!.toFixed(0)} → ${last.rssMiB['node-1']!.toFixed(0)}`, `${first.rssMiB['node-2']!.toFixed(0)} → ${last.rssMiB['node-2']!.toFixed(0)}`, Math.max(...r.samples.map((s) => s.ct4)), Math.max(...r.samples.map((s) => s.nat4))]]),
          markdownTable(loadHeader, [loadRow('soak', r.load)]),
          markdownTable(Object.keys(r.telling).map((name) => `node-1 ${name}`), [Object.values(r.telling)]),
        ],
        plots: [
          { file: 'soak-rss.svg', caption: 'Agent resident memory over the soak', svg: lineChart({ linearX: true, title: 'Agent RSS', xLabel: 'minutes', yLabel: 'MiB', series: ['node-1', 'node-2'].map((n) => ({ name: n, points: r.samples.map((s) => ({ x: minutes(s.atS), y: s.rssMiB[n]! })) })) }) },
          { file: 'soak-occupancy.svg', caption: 'node-1 conntrack and NAT entries over the soak', svg: lineChart({ linearX: true, title: 'Occupancy on node-1', xLabel: 'minutes', yLabel: 'entries', series: [{ name: 'ct4', points: r.samples.map((s) => ({ x: minutes(s.atS), y: s.ct4 })) }, { name: 'nat4', points: r.samples.map((s) => ({ x: minutes(s.atS), y: s.nat4 })) }] }) },
          { file: 'soak-requests.svg', caption: 'Requests and failed requests per sample interval', svg: lineChart({ linearX: true, title: 'Requests per interval', xLabel: 'minutes', yLabel: 'requests', series: [{ name: 'requests', points: r.samples.map((s) => ({ x: minutes(s.atS), y: s.requests })) }, { name: 'failed', points: r.samples.map((s) => ({ x: minutes(s.atS), y: s.failed })) }] }) },
        ],
        data: r,
      });
    });
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
