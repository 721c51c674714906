// Per-hop timestamps of a connection's first packets (issue 20's connect gap): perf records
// the kernel's net:net_dev_start_xmit and net:netif_receive_skb tracepoints (every device
// of every namespace, nanosecond timestamps) while the client connects through each path of
// connect-gap.ts. veth hands its peer the skb itself and forwarding keeps it, so one skb
// address's events in time order are one packet's way: the SYN from the client's device
// through the router and the node to the pod, the SYN-ACK back. The median of each hop,
// path beside path, shows where a NodePort connection's time goes and what ferry's tc
// programs add to the node's hop (tc ingress runs after netif_receive_skb; tc egress before
// net_dev_start_xmit).
// Run as root: npx tsx bench/connect-trace.ts [--count 300] [--repeat 3]
import { perfRecord } from './perf-profile.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { MiniCluster } from '../src/sandbox/mini-cluster.js';
import { execOk } from '../src/sys/exec.js';
import { connectRun, setUpConnectPaths } from './connect-paths.js';
import { markdownTable, median, progress, publish, ratio } from './report.js';

const { values } = parseArgs({ options: { count: { type: 'string' }, repeat: { type: 'string' } } });
const COUNT = Number(values.count ?? 300);
const REPEAT = Number(values.repeat ?? 3);
const COMMAND = `npx tsx bench/connect-trace.ts --count ${COUNT} --repeat ${REPEAT}`;
const EVENTS = ['net:net_dev_start_xmit', 'net:netif_receive_skb'];
/** A SYN or SYN-ACK with Linux's options (MSS, SACK, timestamps, window scale) on the wire. */
const HANDSHAKE_FRAME = 74;
/** A packet's step through a forwarding namespace takes a few µs; longer, and the skb
 * address was freed at an endpoint and reused for its next packet. */
const FORWARD_STEP_MAX_NS = 20_000;
/** A veth hop (to the peer's backlog and the softirq) longer than this is another packet. */
const VETH_HOP_MAX_NS = 1_000_000;
const ETH_HLEN = 14;

interface TraceEvent { t: number; kind: 'xmit' | 'rx'; dev: string; skb: string; len: number }
interface Hop { label: string; ns: number[] }
interface PacketWay { packet: string; hops: Hop[]; total: number[] }

/** Record the tracepoints while `work` runs; the events, oldest first. */
async function traced(dir: string, work: () => Promise<void>): Promise<TraceEvent[]> {
  const file = join(dir, 'perf.data');
  await perfRecord(EVENTS.flatMap((e) => ['-e', e]), file, work);
  const out = await execOk('perf', ['script', '-i', file, '--ns', '-F', 'time,event,trace'], { timeoutMs: 300_000 });
  return parseEvents(out);
}

/** `  66513.170444553: net:netif_receive_skb: dev=eth0 skbaddr=0xffff... len=76` */
function parseEvents(text: string): TraceEvent[] {
  const out: TraceEvent[] = [];
  for (const line of text.split('\n')) {
    const m = /^\s*(\d+)\.(\d{9}):\s+net:(net_dev_start_xmit|netif_receive_skb):\s+dev=(\S+).*?skbaddr=(0x[0-9a-f]+).*?\blen=(\d+)/.exec(line);
    if (!m) continue;
    out.push({ t: Number(m[1]) * 1e9 + Number(m[2]), kind: m[3] === 'net_dev_start_xmit' ? 'xmit' : 'rx', dev: m[4]!, skb: m[5]!, len: Number(m[6]) });
  }
  return out.sort((a, b) => a.t - b.t);
}

/** Does `next` carry on the packet of `prev` (the same skb address)? A veth hop (xmit →
 * rx) keeps the IP length (rx counts from the IP header, xmit the frame); a forwarding step
 * (rx → xmit) keeps it too, leaves by another device, and is quick. An endpoint receiving a
 * packet and sending its next one in the freed skb fails one of these. */
function continues(prev: TraceEvent, next: TraceEvent): boolean {
  const gap = next.t - prev.t;
  if (prev.kind === 'xmit') return next.kind === 'rx' && next.len === prev.len - ETH_HLEN && gap <= VETH_HOP_MAX_NS;
  return next.kind === 'xmit' && next.len === prev.len + ETH_HLEN && next.dev !== prev.dev && gap <= FORWARD_STEP_MAX_NS;
}

/** Each packet's way: an skb address's events, split where one packet ends and the next begins. */
function packetWays(events: TraceEvent[]): TraceEvent[][] {
  const open = new Map<string, TraceEvent[]>();
  const done: TraceEvent[][] = [];
  for (const e of events) {
    const cur = open.get(e.skb);
    if (cur && continues(cur[cur.length - 1]!, e)) {
      cur.push(e);
      continue;
    }
    if (cur) done.push(cur);
    open.set(e.skb, [e]);
  }
  done.push(...open.values());
  return done.sort((a, b) => a[0]!.t - b[0]!.t);
}

const signature = (w: TraceEvent[]) => w.map((e) => `${e.kind} ${e.dev}`).join(' | ');

/** From each of `from`'s ways to the first of `to`'s that starts after it: the median, in ns. */
function medianLead(from: TraceEvent[][], to: TraceEvent[][]): number {
  const starts = to.map((w) => w[0]!.t);
  const leads = from.map((w) => starts.find((t) => t > w[0]!.t)).map((t, i) => (t === undefined ? Infinity : t - from[i]![0]!.t));
  return median(leads);
}

/**
 * The handshake's two ways: packets that leave their first device as a 74-byte frame, by
 * their way's devices, the two commonest. Which is the SYN's: the pod answers a SYN at once,
 * while the client's next SYN waits for its ACK, reset and next connect, so the SYN's way
 * is the one the other follows closer. Hop i is event i to event i+1.
 */
function handshakeWays(events: TraceEvent[]): PacketWay[] {
  const ways = packetWays(events).filter((w) => w[0]!.kind === 'xmit' && w[0]!.len === HANDSHAKE_FRAME && w.length > 1);
  const bySig = new Map<string, TraceEvent[][]>();
  for (const w of ways) {
    const sig = signature(w);
    const group = bySig.get(sig);
    if (group) group.push(w);
    else bySig.set(sig, [w]);
  }
  const [a, b] = [...bySig.values()].sort((x, y) => y.length - x.length);
  if (!a || !b) return [];
  const [syn, synAck] = medianLead(a, b) < medianLead(b, a) ? [a, b] : [b, a];
  return ([['SYN', syn], ['SYN-ACK', synAck]] as const).map(([packet, group]) => {
    const first = group[0]!;
    return {
      packet,
      hops: first.slice(1).map((e, i) => ({ label: `${first[i]!.kind} ${first[i]!.dev} → ${e.kind} ${e.dev}`, ns: group.map((w) => w[i + 1]!.t - w[i]!.t) })),
      total: group.map((w) => w[w.length - 1]!.t - w[0]!.t),
    };
  });
}

/** The count, median and 10th/90th percentiles of samples, in ns. */
function spread(ns: number[]): { packets: number; p10: number; p50: number; p90: number } {
  const sorted = [...ns].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
  return { packets: ns.length, p10: at(0.1), p50: at(0.5), p90: at(0.9) };
}

async function main(): Promise<void> {
  progress('connect-trace: 1-node testbed ');
  const c = await MiniCluster.create({ nodes: 1 });
  const dir = mkdtempSync(join(tmpdir(), 'ferry-trace-'));
  try {
    const paths = await setUpConnectPaths(c, { nodeSocket: false });
    const connect = (to: string) => connectRun(c, to, COUNT);
    for (const p of paths) await connect(p.to); // warm-up: neighbours, first flows
    // Repeats outermost, so that a slow spell of the shared machine falls on every path alike.
    const results = paths.map((p) => ({ path: p.path, ways: [] as PacketWay[] }));
    for (let r = 0; r < REPEAT; r++) {
      for (const [i, p] of paths.entries()) {
        progress(`\n${p.path} (run ${r + 1}) `);
        const events = await traced(dir, async () => void (await connect(p.to)));
        for (const w of handshakeWays(events)) {
          const into = results[i]!.ways.find((x) => x.packet === w.packet);
          if (!into) results[i]!.ways.push(w);
          else {
            into.total.push(...w.total);
            w.hops.forEach((h, k) => into.hops[k]?.ns.push(...h.ns));
          }
        }
      }
    }
    progress('\n');
    const us = (ns: number[] | undefined) => (ns?.length ? (median(ns) / 1000).toFixed(2) : '-');
    const way = (path: string, packet: string) => results.find((r) => r.path === path)?.ways.find((w) => w.packet === packet);
    const tables = ['SYN', 'SYN-ACK'].map((packet) => {
      const labels = way('direct', packet)?.hops.map((h) => h.label) ?? [];
      return `**${packet}** (median µs per hop; packets traced: ${results.map((r) => `${r.path} ${way(r.path, packet)?.total.length ?? 0}`).join(', ')})\n\n${markdownTable(
        ['hop', ...results.map((r) => r.path)],
        [
          ...labels.map((label, k) => [label, ...results.map((r) => { const h = way(r.path, packet)?.hops[k]; return h?.label === label ? us(h.ns) : '-'; })]),
          ['whole way', ...results.map((r) => us(way(r.path, packet)?.total))],
        ],
      )}`;
    });
    const totals = (path: string, packet: string) => way(path, packet)?.total ?? [];
    const ratios = results.filter((r) => r.path !== 'direct').flatMap((r) =>
      ['SYN', 'SYN-ACK'].filter((k) => totals(r.path, k).length && totals('direct', k).length).map((k) => {
        const d = median(totals('direct', k));
        const x = median(totals(r.path, k));
        return `${r.path}, ${k}: the whole way ${ratio(x, d)} direct's (${(Math.abs(x - d) / 1000).toFixed(2)} µs ${x >= d ? 'more' : 'less'})`;
      }));
    publish({
      name: 'connect-trace',
      title: 'Per-hop timestamps of a connection\'s handshake (backend on the node)',
      command: COMMAND,
      method: `a 1-node testbed (MiniCluster) as in connect-gap.ts; ${REPEAT} rounds over the paths (the repeats outermost, so that a slow spell falls on every path alike), each a run of ${COUNT} connects (closing with a reset) under \`perf record -a -e ${EVENTS.join(' -e ')}\`. One skb address's events in time order are one packet's way (veth passes the skb itself to its peer, forwarding keeps it); the handshake's two ways are the two commonest ways of packets that leave as 74-byte frames, the SYN's being the one the other follows closer (the pod answers at once; the client's next SYN waits for its ACK, reset and next connect). A way ends where the next event of its skb address is not the same packet going on (the IP length changes, a forwarding step leaves by the device it came in on or takes over 20 µs: an endpoint reused the freed skb). A hop is the time from one event to the next: "rx X → xmit Y" on the node is its whole forwarding step (tc ingress, routing, netfilter, tc egress); "xmit X → rx Y" is a veth handing the packet to its peer's backlog and the softirq taking it up. Medians over every packet; perf's own cost is in every hop of every path alike.`,
      tables,
      ratios,
      // Each hop's spread, not its every sample: the samples were 57k lines of JSON.
      data: {
        count: COUNT,
        repeat: REPEAT,
        results: results.map((r) => ({
          path: r.path,
          ways: r.ways.map((w) => ({ packet: w.packet, hops: w.hops.map((h) => ({ label: h.label, ...spread(h.ns) })), total: spread(w.total) })),
        })),
      },
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await c.close();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
