// BGP through FRR: how long an apply takes at 10 and 1000 announced addresses, how fast a
// node's path leaves the router when its link is cut (BFD on and off, median of 5), and
// the showcase: long-lived connections through an LB address when a node leaves the
// router's ECMP group (its flows rehashed to the others), SNAT against DSR, Maglev on and
// off; and the same when a backend was added just before.
// Run as root: npx tsx bench/bgp.ts [--repeat 5] [--connections 60]
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import type { V1Node, V1Service } from '@kubernetes/client-node';
import { bgpNodeConfig, parseBgpAdvertisement, parseBgpPeer } from '../src/announce/bgp.js';
import { frrCommands, parseRunning, renderFrr } from '../src/announce/frr-config.js';
import { SandboxApi } from '../src/sandbox/api-client.js';
import { startFrr } from '../src/sandbox/frr.js';
import { Testbed } from '../src/sandbox/netns/testbed.js';
import type { NodeInfo } from '../src/sandbox/network.js';
import { Sandbox, type ForwardingMode } from '../src/sandbox/sandbox.js';
import { WORKLOADS_BIN } from '../src/sandbox/workloads/spawn.js';
import { sleep, until } from './wait.js';
import { fmtStat, markdownTable, progress, publish, stat } from './report.js';

const { values } = parseArgs({ options: { repeat: { type: 'string' }, connections: { type: 'string' } } });
const REPEAT = Number(values.repeat ?? 5);
const CONNECTIONS = Number(values.connections ?? 60);

/** Apply time: a node's FRR, from none to N addresses, and one more at N. */
async function applyTimes(): Promise<Array<{ addresses: number; fullMs: number[]; oneMoreMs: number[] }>> {
  const NODE: V1Node = { metadata: { name: 'node-1', labels: {} }, status: { addresses: [{ type: 'InternalIP', address: '10.0.30.21' }] } };
  const peers = [parseBgpPeer({ metadata: { name: 'router' }, spec: { peerAddress: '10.0.30.1', peerASN: 64513, myASN: 64512 } })];
  const lb = (i: number): V1Service => ({ metadata: { name: `s${i}`, namespace: 'default' }, spec: { type: 'LoadBalancer' }, status: { loadBalancer: { ingress: [{ ip: `10.0.${100 + (i >> 8)}.${i & 255}` }] } } });
  const want = (n: number) => renderFrr(bgpNodeConfig({ node: NODE, nodes: [NODE], services: Array.from({ length: n }, (_, i) => lb(i + 1)), slices: [], peers, advertisements: [parseBgpAdvertisement({ metadata: { name: 'all' }, spec: {} })], passwords: new Map(), datapathHealthy: true })!);
  const tb = await Testbed.create();
  try {
    const node = await startFrr(tb, await tb.addHost('node'), '');
    const out = [];
    for (const n of [10, 1000]) {
      const fullMs: number[] = [];
      const oneMoreMs: number[] = [];
      for (let r = 0; r < REPEAT; r++) {
        await node.vtysh.apply(frrCommands(parseRunning(await node.vtysh.show('show running-config')), { prefixLists: [], routeMaps: new Map(), bfdProfiles: new Map() }) || '!\n');
        const from = parseRunning(await node.vtysh.show('show running-config'));
        let t0 = performance.now();
        await node.vtysh.apply(frrCommands(from, want(n)));
        fullMs.push(performance.now() - t0);
        t0 = performance.now();
        await node.vtysh.apply(frrCommands(want(n), want(n + 1)));
        oneMoreMs.push(performance.now() - t0);
      }
      out.push({ addresses: n, fullMs, oneMoreMs });
      progress(`  apply ${n}: ${stat(fullMs).median.toFixed(0)} ms full, ${stat(oneMoreMs).median.toFixed(0)} ms one more\n`);
    }
    await node.stop();
    return out;
  } finally {
    await tb.destroy();
  }
}

const svcYaml = (name: string, app: string) => ({ apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'default' }, spec: { type: 'LoadBalancer', selector: { app }, ports: [{ port: 7, targetPort: 7 }] } });
const pod = (name: string, app: string, node: string) => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'default', labels: { app } }, spec: { nodeName: node, containers: [{ name: 'c', image: 'tcp-echo', ports: [{ containerPort: 7 }] }] } });
const advertisement = (without?: string) => ({
  apiVersion: 'ferry.dev/v1alpha1', kind: 'BGPAdvertisement', metadata: { name: 'default' },
  spec: { serviceSelector: { matchExpressions: [{ key: 'announce', operator: 'NotIn', values: ['l2'] }] }, ...(without ? { nodeSelector: { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'NotIn', values: [without] }] } } : {}) },
});

async function sandbox(mode: ForwardingMode, maglev: boolean): Promise<{ sb: Sandbox; api: SandboxApi; ip: string; nexthops: () => Promise<string[]> }> {
  const sb = await Sandbox.up({ name: 'benchbgp', nodes: 3, mode, log: pino({ level: 'silent' }), agentEnv: { FERRY_MIN_SYNC_PERIOD_MS: '20', ...(maglev ? { FERRY_MAGLEV_TABLE_SIZE: '1021' } : {}) } });
  const api = new SandboxApi(sb.api.alsoUrl!);
  // Backends on node-1 and node-2; node-3 only balances (its leaving moves no backend).
  await sb.put('Pod', pod('echo-1', 'echo', 'node-1'));
  await sb.put('Pod', pod('echo-2', 'echo', 'node-2'));
  await sb.put('Service', svcYaml('echo', 'echo'));
  const ip = await until('the LB address', async () => ((await api.call('GET', api.url('Service', 'default', 'echo'))).json.status as { loadBalancer?: { ingress?: Array<{ ip: string }> } })?.loadBalancer?.ingress?.[0]?.ip ?? '', (x) => x !== '');
  const nexthops = async () => [...(await sb.net.router.exec(['ip', 'route', 'show', ip, 'proto', 'bgp'])).stdout.matchAll(/via (10\.0\.30\.\d+)/g)].map((m) => m[1]!).sort();
  await until('ECMP over 3 nodes', nexthops, (h) => h.length === 3);
  return { sb, api, ip, nexthops };
}

/** The router's BFD session with `peer`, as FRR reports it ('' when there is none). */
async function bfdStatus(s: Awaited<ReturnType<typeof sandbox>>, peer: string): Promise<string> {
  const out = await s.sb.frr.get('router')!.vtysh.show(`show bfd peer ${peer} json`).catch(() => '{}');
  return (JSON.parse(out || '{}') as { status?: string }).status ?? '';
}

async function failover(bfd: boolean, s: Awaited<ReturnType<typeof sandbox>>): Promise<number[]> {
  const node2 = s.sb.net.nodes.find((n) => n.name === 'node-2') as NodeInfo;
  const times: number[] = [];
  for (let r = 0; r < REPEAT; r++) {
    // BFD comes up some seconds after the session it guards: cut only once it is up.
    if (bfd) await until('BFD up with node-2', () => bfdStatus(s, '10.0.30.22'), (x) => x === 'up', 30_000, 100);
    const t0 = Date.now();
    await s.sb.net.setNodeConnected(node2, false);
    await until('the path gone', s.nexthops, (h) => !h.includes('10.0.30.22'), 30_000, 10);
    times.push(Date.now() - t0);
    progress(`  failover, BFD ${bfd ? 'on' : 'off'} ${r + 1}/${REPEAT}: ${times.at(-1)} ms\n`);
    await s.sb.net.setNodeConnected(node2, true);
    await until('the path back', s.nexthops, (h) => h.length === 3, 60_000, 100);
    await sleep(1000);
  }
  return times;
}

/** BFD off on both sides: the node's BGPPeer without it, the router's peer group without it. */
async function turnBfdOff(s: Awaited<ReturnType<typeof sandbox>>): Promise<void> {
  await s.sb.put('BGPPeer', { apiVersion: 'ferry.dev/v1alpha1', kind: 'BGPPeer', metadata: { name: 'router' }, spec: { peerAddress: '10.0.30.1', peerASN: 64513, myASN: 64512 } });
  await s.sb.frr.get('router')!.vtysh.apply('router bgp 64513\n no neighbor NODES bfd\nexit\n');
  await until('no BFD session with node-2', () => bfdStatus(s, '10.0.30.22'), (x) => x === '', 30_000, 100);
}

/** Long-lived connections while node-3 leaves the ECMP group (and, with `grow`, a backend is added). */
async function survival(s: Awaited<ReturnType<typeof sandbox>>, grow: boolean): Promise<{ survived: number; count: number }> {
  const run = s.sb.net.client.spawn([process.execPath, WORKLOADS_BIN, 'hold', '--to', `${s.ip}:7`, '--count', String(CONNECTIONS), '--seconds', '12']);
  await until('connections open', async () => run.output(), (o) => o.includes('holding'), 30_000, 50);
  await sleep(2000);
  if (grow) {
    // A third backend, programmed on every node before node-3's flows move.
    await s.sb.put('Pod', pod('echo-3', 'echo', 'node-1'));
    await s.sb.settle();
    await sleep(2000);
  }
  await s.sb.put('BGPAdvertisement', advertisement('node-3'));
  await until('node-3 withdrawn', s.nexthops, (h) => !h.includes('10.0.30.23'), 10_000, 20);
  await run.exited;
  const line = run.output().trim().split('\n').find((l) => l.startsWith('{'))!;
  const r = JSON.parse(line) as { count: number; survived: number };
  // Back as before for the next round.
  await s.sb.put('BGPAdvertisement', advertisement());
  if (grow) await new SandboxApi(s.sb.api.alsoUrl!).call('DELETE', s.api.url('Pod', 'default', 'echo-3'));
  await s.sb.settle();
  await until('ECMP over 3 nodes again', s.nexthops, (h) => h.length === 3);
  await sleep(1000);
  return r;
}

async function main(): Promise<void> {
  progress('bgp: apply times\n');
  const apply = await applyTimes();

  progress('bgp: failover and survival\n');
  const rows: Array<{ mode: string; maglev: boolean; leave: { survived: number; count: number }; leaveGrow: { survived: number; count: number } }> = [];
  let bfdOn: number[] = [];
  let bfdOff: number[] = [];
  for (const [mode, maglev] of [['dsr', true], ['dsr', false], ['snat', true]] as Array<[ForwardingMode, boolean]>) {
    const s = await sandbox(mode, maglev);
    try {
      if (mode === 'dsr' && maglev) {
        bfdOn = await failover(true, s);
        // Without BFD: the hold time (the router's 1 s keepalive, 3 s hold).
        await turnBfdOff(s);
        bfdOff = await failover(false, s);
      }
      const leave = await survival(s, false);
      const leaveGrow = await survival(s, true);
      rows.push({ mode, maglev, leave, leaveGrow });
      progress(`  ${mode}, Maglev ${maglev ? 'on' : 'off'}: ${leave.survived}/${leave.count} survive a node leaving, ${leaveGrow.survived}/${leaveGrow.count} with a backend added\n`);
    } finally {
      await s.sb.down();
    }
  }
  const on = stat(bfdOn);
  const off = stat(bfdOff);
  const pct = (x: { survived: number; count: number }) => `${((100 * x.survived) / x.count).toFixed(0)}% (${x.survived}/${x.count})`;
  publish({
    name: 'bgp',
    title: 'BGP through FRR: apply time, failover, connections across an ECMP change',
    command: `npx tsx bench/bgp.ts --repeat ${REPEAT} --connections ${CONNECTIONS}`,
    method: `Apply: a node's FRR (8.4, in a namespace), ferry's configuration from none to N addresses and then one more, as the agent applies it (vtysh -f of the difference); ${REPEAT} runs. Failover: a 3-node sandbox (FRR on the router: ECMP on each packet's 5-tuple; BFD 100 ms × 3 where on, else the router's 3 s hold time); node-2's switch port goes down; the time until the router's route for the LB address has no next hop via node-2 (polled every 10 ms); ${REPEAT} runs. Survival: ${CONNECTIONS} TCP connections to an echo Service (backends on node-1 and node-2; node-3 only balances), each pinged every 100 ms; after 2 s node-3 leaves the BGPAdvertisement, so the router rehashes its flows to the other nodes; a connection survives if no echo is missing for 1 s over 12 s; "with a backend added": a third backend (on node-1) is programmed on every node 2 s before node-3 leaves, so the moved flows meet a changed backend set. About a third of the connections went through node-3, but Linux's hash-threshold ECMP remaps about half of all flows when a next hop leaves (not only the leaving one's): a moved flow survives only where the new node picks the same backend (DSR: conntrack-free choice, the same on every node) and the backend sees the same client (SNAT: it sees the new node's address, so a moved flow is lost).`,
    tables: [
      markdownTable(['announced addresses', 'apply from none, ms', 'apply one more, ms'], apply.map((a) => [a.addresses, fmtStat(stat(a.fullMs), 0), fmtStat(stat(a.oneMoreMs), 0)])),
      markdownTable(['node link cut', 'path gone from the router, s'], [['BFD 100 ms × 3', fmtStat(stat(bfdOn.map((x) => x / 1000)), 2)], ['no BFD (hold time 3 s)', fmtStat(stat(bfdOff.map((x) => x / 1000)), 2)]]),
      markdownTable(['forwarding', 'Maglev', 'survive a node leaving ECMP', '… with a backend added'], rows.map((r) => [r.mode, r.maglev ? 'on' : 'off', pct(r.leave), pct(r.leaveGrow)])),
    ],
    ratios: [`BFD against the hold time: ×${(on.median / off.median).toFixed(2)}`],
    data: { apply, bfdOn, bfdOff, survival: rows },
  });
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
