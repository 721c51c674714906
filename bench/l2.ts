// L2 announcements: the API writes they cost in steady state with 10 and with 1000
// announced addresses (goal: the same), and failover time, median of 5, when the owner's
// agent is killed and when its link is cut.
// Run as root: npx tsx bench/l2.ts [--addresses 10,1000] [--seconds 20] [--repeat 5]
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { SandboxApi } from '../src/sandbox/api-client.js';
import type { NodeInfo } from '../src/sandbox/network.js';
import { Sandbox } from '../src/sandbox/sandbox.js';
import { sleep, until } from './wait.js';
import { fmtStat, markdownTable, progress, publish, stat } from './report.js';

const { values } = parseArgs({ options: { addresses: { type: 'string' }, seconds: { type: 'string' }, repeat: { type: 'string' } } });
const SIZES = (values.addresses ?? '10,1000').split(',').map(Number);
const SECONDS = Number(values.seconds ?? 20);
const REPEAT = Number(values.repeat ?? 5);
const BENCH_POOL = { name: 'bench', cidr: '10.0.128.0/21' };


/** Addresses claimed by some node, from the heartbeat Leases in the store. */
function claimed(sb: Sandbox): Map<string, string> {
  const out = new Map<string, string>();
  for (const l of sb.store.list('leases', 'kube-system')) {
    const a = (l.metadata.annotations as Record<string, string> | undefined)?.['ferry.dev/l2-claims'];
    const node = (l as { spec?: { holderIdentity?: string } }).spec?.holderIdentity;
    if (a && node) for (const ip of a.split(',')) out.set(ip, node);
  }
  return out;
}

/** Writes to Leases other than the operator's, over `seconds`. */
async function leaseWrites(sb: Sandbox, seconds: number): Promise<number> {
  const from = sb.api.access.length;
  await sleep(seconds * 1000);
  return sb.api.access.slice(from).filter((a) => a.resource === 'leases' && ['create', 'update', 'patch'].includes(a.verb) && a.name !== 'ferry-operator').length;
}

async function writesAt(n: number): Promise<{ addresses: number; writesPerSecond: number; announceMs: number }> {
  const sb = await Sandbox.up({ name: 'benchl2', nodes: 3, mode: 'snat', announce: 'l2', log: pino({ level: 'silent' }) });
  try {
    const api = new SandboxApi(sb.api.alsoUrl!);
    await api.call('POST', api.url('LoadBalancerIPPool', ''), { apiVersion: 'ferry.dev/v1alpha1', kind: 'LoadBalancerIPPool', metadata: { name: BENCH_POOL.name }, spec: { blocks: [{ cidr: BENCH_POOL.cidr }] } });
    const t0 = Date.now();
    for (let i = 0; i < n; i++) {
      const r = await api.call('POST', api.url('Service', 'default'), { apiVersion: 'v1', kind: 'Service', metadata: { name: `lb-${i}`, namespace: 'default', annotations: { 'ferry.dev/pool': BENCH_POOL.name } }, spec: { type: 'LoadBalancer', ports: [{ port: 80 }] } });
      if (r.status !== 201) throw new Error(`Service lb-${i}: ${String(r.json.message)}`);
    }
    await until(`${n} addresses announced`, () => claimed(sb).size, (c) => c >= n, 120_000, 100);
    const announceMs = Date.now() - t0;
    await sleep(3000); // Events and the last takeovers settle
    const writes = await leaseWrites(sb, SECONDS);
    return { addresses: n, writesPerSecond: writes / SECONDS, announceMs };
  } finally {
    await sb.down();
  }
}

async function failovers(): Promise<{ kill: number[]; cut: number[] }> {
  const sb = await Sandbox.up({ name: 'benchl2', nodes: 3, mode: 'snat', announce: 'l2', log: pino({ level: 'silent' }) });
  try {
    const api = new SandboxApi(sb.api.alsoUrl!);
    await api.call('POST', api.url('Service', 'default'), { apiVersion: 'v1', kind: 'Service', metadata: { name: 'probe', namespace: 'default' }, spec: { type: 'LoadBalancer', ports: [{ port: 80 }] } });
    const ip = await until('the probe address', async () => ((await api.call('GET', api.url('Service', 'default', 'probe'))).json.status as { loadBalancer?: { ingress?: Array<{ ip: string }> } })?.loadBalancer?.ingress?.[0]?.ip ?? '', (x) => x !== '');
    const macs = new Map<string, string>();
    for (const n of sb.net.nodes) macs.set(n.name, /link\/ether (\S+)/.exec(await n.host.ip('link', 'show', 'eth0'))![1]!);
    const neighbour = async () => /lladdr (\S+)/.exec((await sb.net.router.exec(['ip', 'neigh', 'show', ip])).stdout)?.[1];
    const node = (name: string): NodeInfo => sb.net.nodes.find((n) => n.name === name)!;
    /** Ask by ARP from the router until one node answers: the owner. */
    const owner = async () => until('an owner', async () => {
      const r = await sb.net.router.exec(['arping', '-c', '1', '-w', '1', '-I', 'nodes', ip]);
      const mac = /reply from \S+ \[([0-9A-F:]+)\]/i.exec(r.stdout)?.[1]?.toLowerCase();
      return [...macs].find(([, m]) => m === mac)?.[0];
    }, (o) => o !== undefined, 20_000, 200);
    const out = { kill: [] as number[], cut: [] as number[] };
    for (const how of ['kill', 'cut'] as const) {
      for (let r = 0; r < REPEAT; r++) {
        const was = (await owner())!;
        // The router must know the address first (a takeover is a change of its neighbour entry).
        await sb.net.router.exec(['ping', '-c', '1', '-W', '1', ip]);
        const t0 = Date.now();
        if (how === 'kill') process.kill(sb.agents.get(was)!.pid, 'SIGKILL');
        else await sb.net.setNodeConnected(node(was), false);
        await until('a takeover', neighbour, (m) => m !== undefined && m !== macs.get(was), 15_000, 20);
        out[how].push(Date.now() - t0);
        progress(`  ${how} ${r + 1}/${REPEAT}: ${out[how].at(-1)} ms\n`);
        if (how === 'kill') await sb.startAgent(node(was));
        else await sb.net.setNodeConnected(node(was), true);
        await sleep(4000); // the node is back and settled before the next round
      }
    }
    return out;
  } finally {
    await sb.down();
  }
}

async function main(): Promise<void> {
  const rows = [];
  for (const n of SIZES) {
    progress(`l2: steady-state API writes with ${n} addresses… `);
    rows.push(await writesAt(n));
    progress(`${rows.at(-1)!.writesPerSecond.toFixed(2)}/s\n`);
  }
  progress('l2: failover\n');
  const f = await failovers();
  const kill = stat(f.kill.map((x) => x / 1000));
  const cut = stat(f.cut.map((x) => x / 1000));
  const first = rows[0]!;
  const last = rows.at(-1)!;
  publish({
    name: 'l2',
    title: 'L2 announcements: API writes and failover',
    command: `npx tsx bench/l2.ts --addresses ${SIZES.join(',')} --seconds ${SECONDS} --repeat ${REPEAT}`,
    method: `a 3-node sandbox with --announce l2 (one broadcast domain, the agents' defaults: heartbeat every 500 ms, lease 2 s). Writes: N LoadBalancer Services announced by the default policy, then every Lease write except the operator's counted at the test API server for ${SECONDS} s. Failover: one announced address; the owner's agent is killed (SIGKILL) or its node's link cut (switch port down); the time until the router's neighbour entry for the address names another node's MAC (polled every 20 ms), ${REPEAT} times each, the node restored and settled between rounds; median (min–max).`,
    tables: [
      markdownTable(['announced addresses', 'API writes/s (steady)', 'all announced after s'], rows.map((r) => [r.addresses, r.writesPerSecond.toFixed(2), (r.announceMs / 1000).toFixed(1)])),
      markdownTable(['failover', 'takeover s, median (min–max)', 'runs'], [['owner\'s agent killed', fmtStat(kill, 2), f.kill.length], ['owner\'s link cut', fmtStat(cut, 2), f.cut.length]]),
    ],
    ratios: [
      `API writes at ${last.addresses} against ${first.addresses} addresses: ×${(last.writesPerSecond / first.writesPerSecond).toFixed(2)} (goal ×1.00: one heartbeat per node per renew)`,
      `takeover against the 3 s goal: agent killed ×${(kill.median / 3).toFixed(2)}, link cut ×${(cut.median / 3).toFixed(2)}`,
    ],
    data: { rows, failover: f },
  });
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
