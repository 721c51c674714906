// Map exhaustion, each with its recovery, on node-1 (its agent restarted with small maps;
// the maps are resized in place, entries kept):
// - services and backends: more Services than fit. The ones that fit work, the others are
//   refused with FERRY_MAP_FULL and counted (ferry_services_unprogrammed); once Services
//   are deleted, the refused ones are programmed.
// - SNAT ports: more connections to one remote backend than the port range holds. New
//   flows are dropped and counted (nat_exhausted); once the old ones close, new ones work.
// - conntrack: many more flows than the table holds. It is an LRU map: it never refuses,
//   it forgets the least recently used flow; live connections must survive that.
import { readCounters } from '../../datapath/inspect.js';
import { WORKLOADS_BIN } from '../workloads/spawn.js';
import { ECHO_NODEPORT, mapFill, servedTable, startSteadyLoad, waitFor, type LoadReport, type ReliabilityCluster, type Steps, sleep } from './cluster.js';

export interface ExhaustionResult {
  services: { capacity: number; offered: number; refused: number; mapFullErrors: number; deleted: number; recoveredMs: number; load: LoadReport };
  nat: { ports: number; held: number; probes: number; probesRefused: number; natDrops: number; recoveredMs: number };
  /** midstream: TCP segments of flows conntrack had lost (evicted), balanced again (STAT_CT_MIDSTREAM). */
  conntrack: { capacity: number; held: number; survived: number; brokeAtMs: number[]; midstream: number; load: LoadReport };
  /** The parts' steps and the router's route changes (epoch ms), to place a failure in. */
  steps: Steps;
}

const FILL = 20;

async function metric(c: ReliabilityCluster, name: string): Promise<number> {
  const text = (await c.node1.host.execOk(['curl', '-s', '--max-time', '2', 'http://127.0.0.1:10249/metrics'])).split('\n');
  const line = text.find((l) => l.startsWith(`${name} `));
  return line ? Number(line.split(' ')[1]) : NaN;
}

const fillService = (i: number) => ({ apiVersion: 'v1', kind: 'Service', metadata: { name: `fill-${i}`, namespace: 'default' }, spec: { ports: [{ port: 80, protocol: 'TCP' }] } });
const fillSlice = (i: number) => ({
  apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', addressType: 'IPv4',
  metadata: { name: `fill-${i}-a`, namespace: 'default', labels: { 'kubernetes.io/service-name': `fill-${i}` } },
  ports: [{ port: 80, protocol: 'TCP' }],
  endpoints: [{ addresses: [`10.244.9.${10 + i}`], conditions: { ready: true } }],
});

function removeFill(c: ReliabilityCluster, i: number): void {
  c.sb.store.delete('services', 'default', `fill-${i}`);
  c.sb.store.delete('endpointslices', 'default', `fill-${i}-a`);
}

async function restartNode1(c: ReliabilityCluster, env: Record<string, string>): Promise<string> {
  await c.sb.stopAgent(c.node1);
  return (await c.sb.startAgent(c.node1, 60_000, { env })).output();
}

async function servicesAndBackends(c: ReliabilityCluster): Promise<ExhaustionResult['services']> {
  const { sb, node1 } = c;
  const room = 24;
  const services = mapFill(c, node1, 'lb4_services').entries + room; // each fill Service takes 2: its frontend and one slot
  const backends = mapFill(c, node1, 'lb4_backends').entries + room / 2;
  await restartNode1(c, { FERRY_MAP_SIZES: JSON.stringify({ services, backends }) });
  const load = startSteadyLoad(c);
  try {
    for (let i = 0; i < FILL; i++) {
      await sb.put('Service', fillService(i));
      await sb.put('EndpointSlice', fillSlice(i));
    }
    const refused = await waitFor('the agent reports what does not fit', () => metric(c, 'ferry_services_unprogrammed'), (n) => n > 0, 30_000, 200);
    await sleep(3000); // settled: more Services keep arriving for a moment
    const settled = await metric(c, 'ferry_services_unprogrammed');
    const mapFullErrors = sb.agents.get(node1.name)!.output().split('\n').filter((l) => l.includes('FERRY_MAP_FULL')).length;
    const deleted = 14;
    const t0 = Date.now();
    for (let i = 0; i < deleted; i++) removeFill(c, i);
    await waitFor('the refused Services are programmed', () => metric(c, 'ferry_services_unprogrammed'), (n) => n === 0, 30_000, 50);
    const recoveredMs = Date.now() - t0;
    const kept = (sb.store.list('services') as Array<{ metadata: { name?: string }; spec?: { clusterIP?: string } }>).filter((s) => s.metadata.name?.startsWith('fill-'));
    const served = servedTable(c, node1).join('\n');
    const missing = kept.filter((s) => !served.includes(`${s.spec?.clusterIP}:80/`));
    if (missing.length) throw new Error(`after recovery, not served: ${missing.map((s) => s.metadata.name).join(', ')}`);
    for (let i = deleted; i < FILL; i++) removeFill(c, i);
    await sleep(1000);
    return { capacity: services, offered: FILL, refused: Math.max(refused, settled), mapFullErrors, deleted, recoveredMs, load: await load.stop() };
  } catch (e) {
    await load.stop();
    throw e;
  }
}

/** node-1's packets under one datapath counter (`ferry status` names: nat_exhausted, ct_midstream). */
function counted(c: ReliabilityCluster, kind: 'forwarded' | 'drops', name: string): number {
  return readCounters(c.sb.pinDir(c.node1))[kind].find((d) => d.name === name)?.packets ?? 0;
}
const natDrops = (c: ReliabilityCluster) => counted(c, 'drops', 'nat_exhausted');
const midstream = (c: ReliabilityCluster) => counted(c, 'forwarded', 'ct_midstream');

async function snatPorts(c: ReliabilityCluster): Promise<ExhaustionResult['nat']> {
  const { sb, node1 } = c;
  const ports = 32;
  const held = 24;
  const probes = 12;
  await restartNode1(c, { FERRY_SNAT_PORT_MIN: '20000', FERRY_SNAT_PORT_MAX: String(20000 + ports - 1) });
  // Only the backend on node-2: every flow through node-1 takes one of its SNAT ports.
  await sb.put('Service', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'remote-echo', namespace: 'default' }, spec: { type: 'NodePort', selector: { only: 'node-2' }, ports: [{ port: 7, targetPort: 7, nodePort: 30207 }] } });
  const target = `${node1.ip}:30207`;
  await waitFor('remote-echo answers', async () => (await sb.net.client.exec([process.execPath, WORKLOADS_BIN, 'connect-probe', '--targets', `${target}/tcp`])).stdout, (o) => o.includes('"ok"'), 30_000, 200);
  await sleep(11_000); // that probe's port is free again (closing lifetime)
  // A flow tries 9 ports of the 32 (its deterministic probe sequence); with most held, a
  // connection can find all 9 taken and never open (about one run in 14 for the last few of
  // 24), so the hold gives such a connect up after 3 s and opens it from another port.
  const hold = sb.net.client.spawn([process.execPath, WORKLOADS_BIN, 'hold', '--to', target, '--count', String(held), '--seconds', '40', '--timeout-ms', '3000']);
  try {
    await waitFor('the connections are open', () => hold.output(), (o) => o.includes('holding'), 20_000);
    const dropsBefore = natDrops(c);
    const out = (await sb.net.client.execOk([process.execPath, WORKLOADS_BIN, 'connect-probe', '--targets', Array.from({ length: probes }, () => `${target}/tcp`).join(',')], { timeoutMs: 60_000 })).trim().split('\n');
    const probesRefused = out.filter((l) => !l.includes('"ok"')).length;
    const drops = natDrops(c) - dropsBefore;
    await hold.stop(1000); // closes the held connections
    const t0 = Date.now();
    await waitFor('new connections work again', async () => (await sb.net.client.exec([process.execPath, WORKLOADS_BIN, 'connect-probe', '--targets', `${target}/tcp`])).stdout, (o) => o.includes('"ok"'), 60_000, 500);
    return { ports, held, probes, probesRefused, natDrops: drops, recoveredMs: Date.now() - t0 };
  } finally {
    await hold.stop(1000);
    sb.store.delete('services', 'default', 'remote-echo');
  }
}

async function conntrack(c: ReliabilityCluster, step: (what: string) => void): Promise<ExhaustionResult['conntrack']> {
  const { sb, node1 } = c;
  const capacity = 256;
  const held = 100;
  await restartNode1(c, { FERRY_MAP_SIZES: JSON.stringify({ conntrack: capacity }) });
  step(`node-1 restarted with ${capacity} conntrack entries`);
  const midstreamBefore = midstream(c);
  // The held connections go quiet for 8 s from 5 s on, as idle connections do: the UDP
  // churn then evicts their flows (cold entries) for certain, where connections pinged every
  // 100 ms were evicted only in most runs (the LRU keeps what was used since its last pass).
  const hold = sb.net.client.spawn([process.execPath, WORKLOADS_BIN, 'hold', '--to', `${node1.ip}:${ECHO_NODEPORT}`, '--count', String(held), '--seconds', '30', '--pause-at-ms', '5000', '--pause-ms', '8000']);
  await waitFor('the connections are open', () => hold.output(), (o) => o.includes('holding'), 20_000);
  step(`${held} connections held`);
  // Every new UDP flow stays in conntrack for a minute: a few seconds of this fill it many times over.
  const load = startSteadyLoad(c, 10);
  step('load at 10 ms');
  const result = await waitFor('the held connections report', () => hold.output().split('\n').find((l) => l.startsWith('{"count"')), Boolean, 60_000, 500);
  const report = await load.stop();
  step('load stopped');
  const r = JSON.parse(result!) as { survived: number; brokeAtMs: number[] };
  return { capacity, held, survived: r.survived, brokeAtMs: r.brokeAtMs, midstream: midstream(c) - midstreamBefore, load: report };
}

export async function exhaustionScenario(c: ReliabilityCluster): Promise<ExhaustionResult> {
  const steps: Steps = [];
  const step = (what: string) => steps.push({ at: Date.now(), step: what });
  try {
    step('services and backends');
    const services = await servicesAndBackends(c);
    step('SNAT ports');
    const nat = await snatPorts(c);
    step('conntrack');
    const ct = await conntrack(c, step);
    return { services, nat, conntrack: ct, steps: [...steps, ...c.sb.routeChanges()] };
  } finally {
    // Back to the default sizes, also after a failed part: the next scenario on this
    // cluster must not run on 32 SNAT ports or a 256-flow conntrack.
    await restartNode1(c, {});
  }
}
