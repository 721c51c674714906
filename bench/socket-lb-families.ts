// What the socket hooks add to connect() for an IPv4 and an IPv6 ClusterIP, against connecting
// to the pod's address directly in the same family: a node and a pod (its cgroup under the
// node's, where the hooks are attached), the pod listening on its IPv4 and IPv6 addresses, a
// client in the node timing connect() (SYN to established, closed by a reset) `--count` times
// per path, the paths taking turns in each round (rotated). With --services N, N−1 other
// ClusterIPs of each family fill the maps (each lookup is a hash lookup: the cost should not
// move with N).
// Run as root: npx tsx bench/socket-lb-families.ts [--services 1,10000] [--count 2000] [--rounds 5]
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Datapath, defaultObjectsDir } from '../src/datapath/loader.js';
import { ServiceWriter } from '../src/datapath/writer.js';
import type { FrontendSpec } from '../src/model/frontend.js';
import { Testbed } from '../src/sandbox/netns/testbed.js';
import { WORKLOADS_BIN } from '../src/sandbox/workloads/spawn.js';
import { netnsCookie } from '../src/sys/socket.js';
import { fmtStat, markdownTable, median, progress, publish, ratio, stat } from './report.js';

const { values } = parseArgs({ options: { services: { type: 'string' }, count: { type: 'string' }, rounds: { type: 'string' } } });
const COUNTS = (values.services ?? '1,10000').split(',').map(Number);
const COUNT = Number(values.count ?? 2000);
const ROUNDS = Number(values.rounds ?? 5);
const COMMAND = `npx tsx bench/socket-lb-families.ts --services ${COUNTS.join(',')} --count ${COUNT} --rounds ${ROUNDS}`;

const POD4 = '10.244.1.10';
const POD6 = 'fd00:244:1::10';
const PATHS = [
  { path: 'IPv4 direct', to: `${POD4}:8080` },
  { path: 'IPv4 ClusterIP', to: '10.96.0.10:80' },
  { path: 'IPv6 direct', to: `${POD6}:8080` },
  { path: 'IPv6 ClusterIP', to: 'fd00:96::10:80' },
] as const;

/** The two ClusterIPs under test and `n − 1` fillers of each family (other addresses, the same backend). */
function table(n: number): FrontendSpec[] {
  const fe = (address: string, backend: string, i: number): FrontendSpec => ({ address, port: 80, proto: 'TCP', kind: 'ClusterIP', backends: [{ address: backend, port: 8080, local: true }], service: `default/s${i}:http` });
  const out = [fe('10.96.0.10', POD4, 0), fe('fd00:96::10', POD6, 0)];
  for (let i = 1; i < n; i++) out.push(fe(`10.97.${i >> 8}.${i & 255}`, POD4, i), fe(`fd00:97::${i.toString(16)}`, POD6, i));
  return out;
}

async function main(): Promise<void> {
  const tb = await Testbed.create();
  const pinDir = join('/sys/fs/bpf', `${tb.prefix}-families`);
  let dp: Datapath | undefined;
  try {
    const node = await tb.addHost('node');
    const pod = await tb.addHost('pod', { cgroupParent: node });
    await tb.link({ host: node, ifname: 'vpod', address: '10.244.1.1/24' }, { host: pod, ifname: 'eth0', address: `${POD4}/24` });
    await node.ip('-6', 'addr', 'add', 'fd00:244:1::1/64', 'dev', 'vpod', 'nodad');
    await pod.ip('-6', 'addr', 'add', `${POD6}/64`, 'dev', 'eth0', 'nodad');
    mkdirSync(pinDir);
    dp = Datapath.load({ objectsDir: defaultObjectsDir(), pinDir, snatIPv4: '10.0.30.21', hostNetnsCookie: netnsCookie(node.netns) });
    dp.attachCgroup({ path: node.cgroup, expect: 'subtree' });
    const writer = new ServiceWriter(dp.maps);
    // One listener on both families (an IPv6 socket takes IPv4 as ::ffff:a.b.c.d).
    pod.spawn([process.execPath, '-e', "require('node:net').createServer((c) => c.destroy()).listen(8080, '::')"]);
    await new Promise((r) => setTimeout(r, 500));
    const p50: Record<string, number[]> = {};
    for (const n of COUNTS) {
      const stats = writer.apply(table(n));
      if (stats.failures.length) throw new Error(`${n} Services: ${stats.failures[0]!.error}`);
      for (let round = 0; round < ROUNDS; round++) {
        // In a rotated order, so that no path always follows the same one.
        for (const p of PATHS.map((_, i) => PATHS[(i + round) % PATHS.length]!)) {
          // Closed by a reset: no TIME_WAIT, so tens of thousands of connects never wait for a free port.
          const r = JSON.parse(await node.execOk([process.execPath, WORKLOADS_BIN, 'connect-latency', '--to', p.to, '--count', String(COUNT), '--reset'], { timeoutMs: 600_000 })) as { p50: number; failures: number };
          if (r.failures > 0) throw new Error(`${p.path}: ${r.failures} connects failed`);
          (p50[`${n} ${p.path}`] ??= []).push(r.p50);
          progress('.');
        }
      }
    }
    progress('\n');
    const rows = COUNTS.flatMap((n) => PATHS.map((p) => {
      const s = stat(p50[`${n} ${p.path}`]!);
      const direct = median(p50[`${n} ${p.path.replace('ClusterIP', 'direct')}`]!);
      return [n, p.path, fmtStat(s, 1), ratio(s.median, direct)];
    }));
    const added = (n: number, family: string) => median(p50[`${n} ${family} ClusterIP`]!) - median(p50[`${n} ${family} direct`]!);
    publish({
      name: 'socket-lb-families',
      title: 'connect() to an IPv4 and an IPv6 ClusterIP through the socket hooks, against the pod\'s address',
      command: COMMAND,
      method: `a testbed node and a pod (its cgroup under the node's, where ferry's socket hooks are attached); the pod listens on port 8080 of its IPv4 and IPv6 addresses; a client in the node times connect() (SYN to established, then resets: no TIME_WAIT) ${COUNT} times per path with the connect-latency workload; the four paths take turns in each of ${ROUNDS} rounds, in a rotated order; with N Services, N−1 other ClusterIPs of each family fill lb4_services and lb6_services. p50 per run, median of the runs [min–max].`,
      tables: [markdownTable(['Services', 'path', 'connect p50 µs', '/ direct (same family)'], rows)],
      ratios: COUNTS.map((n) => `${n} Services: the hooks add ${added(n, 'IPv4').toFixed(1)} µs to an IPv4 connect() and ${added(n, 'IPv6').toFixed(1)} µs to an IPv6 one (p50 differences)`),
      data: { counts: COUNTS, count: COUNT, rounds: ROUNDS, p50 },
    });
  } finally {
    dp?.close();
    rmSync(pinDir, { recursive: true, force: true });
    await tb.destroy();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
