// Reliability: agent restarts under continuous traffic. A 2-node sandbox; a client opens a
// new TCP connection every 20 ms to a NodePort on node-1 whose Service has a backend on
// node-1 (local) and on node-2 (remote, SNAT); node-1's agent is stopped and started again
// N times, alternately by SIGTERM and SIGKILL, then killed mid-start (while it lists and
// syncs) a few times. Counted: failed requests (goal 0) and time to ready (the agent's
// "initial sync done").
// Run as root: npx tsx bench/reliability.ts [--restarts 20] [--crashes 5]
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { Sandbox } from '../src/sandbox/sandbox.js';
import { fmtStat, markdownTable, progress, publish, stat } from './report.js';
import { sleep, until } from './wait.js';

const { values } = parseArgs({ options: { restarts: { type: 'string' }, crashes: { type: 'string' } } });
const RESTARTS = Number(values.restarts ?? 20);
const CRASHES = Number(values.crashes ?? 5);

const pod = (name: string, node: string) => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'default', labels: { app: 'web' } }, spec: { nodeName: node, containers: [{ name: 'c', image: 'whoami', ports: [{ containerPort: 8080 }] }] } });
const service = { apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'default' }, spec: { type: 'NodePort', selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080, nodePort: 30180 }] } };

async function main(): Promise<void> {
  const sb = await Sandbox.up({ name: 'benchrel', nodes: 2, mode: 'snat', log: pino({ level: 'silent' }) });
  try {
    await sb.put('Pod', pod('web-1', 'node-1'));
    await sb.put('Pod', pod('web-2', 'node-2'));
    await sb.put('Service', service);
    const node = sb.net.nodes.find((n) => n.name === 'node-1')!;
    const url = `http://${node.ip}:30180/`;
    await until('the NodePort answers', async () => (await sb.net.client.exec(['curl', '-s', '-o', '/dev/null', '-w', '%{http_code}', '--max-time', '1', url])).stdout, (c) => c === '200', 60_000, 200);
    // One new connection every 20 ms, each with a 2 s budget; a line per request.
    const loop = sb.net.client.spawn(['sh', '-c', `while :; do c=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 ${url}); echo "$(date +%s%3N) $c"; sleep 0.02; done`]);
    const rows: Array<{ how: string; count: number; readyMs: number[] }> = [];
    try {
      await sleep(2000);
      for (const how of ['SIGTERM', 'SIGKILL'] as const) {
        const readyMs: number[] = [];
        for (let i = 0; i < RESTARTS / 2; i++) {
          if (how === 'SIGTERM') await sb.stopAgent(node);
          else {
            const p = sb.agents.get(node.name)!;
            process.kill(p.pid, 'SIGKILL');
            await until('the agent gone', () => p.child.exitCode !== null || p.child.signalCode !== null, (gone) => gone, 10_000, 20);
            sb.agents.delete(node.name);
          }
          await sleep(300); // no agent at all for a moment: the datapath alone
          const t0 = Date.now();
          await sb.startAgent(node, 60_000);
          readyMs.push(Date.now() - t0);
          await sleep(700);
        }
        rows.push({ how, count: RESTARTS / 2, readyMs });
        progress(`reliability: ${RESTARTS / 2} restarts by ${how}, ready in ${fmtStat(stat(readyMs), 0)} ms\n`);
      }
      // Killed while it lists and syncs: the next start must still come up whole.
      const readyMs: number[] = [];
      for (let i = 0; i < CRASHES; i++) {
        await sb.stopAgent(node);
        const started = sb.startAgent(node, 60_000).catch(() => undefined);
        await sleep(150 + 100 * i);
        const p = sb.agents.get(node.name);
        if (p && p.child.exitCode === null) process.kill(p.pid, 'SIGKILL');
        await started;
        sb.agents.delete(node.name);
        const t0 = Date.now();
        await sb.startAgent(node, 60_000);
        readyMs.push(Date.now() - t0);
        await sleep(700);
      }
      rows.push({ how: 'SIGKILL mid-start, then a start', count: CRASHES, readyMs });
      await sleep(2000);
    } finally {
      await loop.stop(1000);
    }
    const lines = loop.output().trim().split('\n').map((l) => l.split(' ')).filter((x) => x.length === 2);
    const failed = lines.filter(([, c]) => c !== '200');
    const table = markdownTable(['restarts', 'how', 'time to ready, ms'], rows.map((r) => [r.count, r.how, fmtStat(stat(r.readyMs), 0)]));
    const totals = markdownTable(['requests (new TCP connection each)', 'failed', 'failed at'], [[lines.length, failed.length, failed.map(([t]) => new Date(Number(t)).toISOString().slice(11, 23)).join(', ') || '-']]);
    publish({
      name: 'restarts',
      title: 'Reliability: agent restarts under traffic',
      command: `npx tsx bench/reliability.ts --restarts ${RESTARTS} --crashes ${CRASHES}`,
      method: `a 2-node sandbox (SNAT); a NodePort Service on node-1 with one backend on node-1 and one on node-2; the client opens a new TCP connection to node-1's NodePort every 20 ms (curl, 2 s budget each), all through the run; node-1's agent is stopped (SIGTERM) and started ${RESTARTS / 2} times, killed (SIGKILL) and started ${RESTARTS / 2} times, with 0.3 s without any agent each time, then killed ${CRASHES} times while it starts (150–${150 + 100 * (CRASHES - 1)} ms after its spawn: starting Node, loading the programs, listing or syncing) and started again. Time to ready: from the spawn to the agent's "initial sync done" (BPF load and attach, list, first sync). UDP is not in this run.`,
      tables: [table, totals],
      data: { restarts: RESTARTS, crashes: CRASHES, rows, requests: lines.length, failed: failed.length },
    });
  } finally {
    await sb.down();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
