// Built-in workloads for sandbox pods and test clients, run as
// `node dist/sandbox/workloads/main.js <command> ...`:
//   whoami --port P [--name N]     HTTP server answering Hostname, IP and RemoteAddr (like
//                                  traefik/whoami); GET /bytes?n=N[&over=MS] sends N bytes
//                                  (spread over MS milliseconds)
//   udp-echo --port P              UDP echo server
//   udp --to IP:PORT [--connected] [--size N] [--count N]
//                                  send datagrams, print each reply and its source address
//   tcp-peer --to IP:PORT [--local-port P] [--http] [--reset]
//                                  connect (3 s at most), print the peer address getpeername()
//                                  reports; --http: and the status line of a GET /; --reset:
//                                  close with a reset
//   connect-latency --to IP:PORT --count N [--reset]
//                                  connect/close N times, print p50/p90/p99 in microseconds;
//                                  --reset closes with a reset (no TIME_WAIT left behind)
//   tcp-echo --port P              TCP echo server
//   port-share --to IP:PORT --second IP:PORT --local-port P [--udp]
//                                  one client port towards two frontends of a pod at once:
//                                  print how each connection (or datagram) fared (port-share.ts)
//   connect-probe --targets IP:PORT/tcp|udp,... [--listen-loopback]
//                                  (IP may be IPv4-mapped, ::ffff:a.b.c.d: an IPv6 socket)
//                                  connect() to each target in turn and print one JSON line
//                                  each: {target, result: "ok" or the errno code}; with
//                                  --listen-loopback, listens on every 127.0.0.1 target
//                                  first, so an untouched loopback connect succeeds
//   connect-rate --to IP:PORT --seconds S [--concurrency C]
//                                  C loops of: connect, one byte echoed, close with FIN (the
//                                  close every HTTP/1.0 client makes) for S seconds; print
//                                  connections completed and failed, per second of the run
//   hold --to IP:PORT --count N --seconds S [--timeout-ms T] [--pause-at-ms A --pause-ms P]
//                                  N long-lived TCP connections to an echo server, each sending
//                                  8 bytes every 100 ms and wanting an answer within 5 s, for S
//                                  seconds: print how many survived and when the others broke;
//                                  with --timeout-ms, a connect not done in T ms is made again
//                                  from a new local port (up to 5 tries); with --pause-ms, all
//                                  send nothing for P ms from A ms after they are open
//   steady --targets tcp:IP:PORT,udp:IP:PORT,... [--interval-ms 20] [--timeout-ms 2000]
//                                  until stopped, one request per target every interval
//                                  (TCP: a new connection, an HTTP GET, the reply's status
//                                  line; UDP: a new socket, a datagram echoed): prints a JSON
//                                  line per failure at once and per second the counts
//   rr --to IP:PORT --seconds S [--udp] [--new-connection] [--size N]
//                                  request/response for S seconds (netperf's TCP_RR,
//                                  TCP_CRR, UDP_RR): print the count and p50/p90/p99 in µs
import { createSocket } from 'node:dgram';
import { createServer } from 'node:http';
import { connect, createServer as createTcpServer, type Socket } from 'node:net';
import { hostname, networkInterfaces } from 'node:os';
import { hold, steady } from './steady.js';
import { connectProbe } from './connect-probe.js';
import { portShare, udpPortShare } from './port-share.js';
import { parseArgs } from 'node:util';

function target(s: string | undefined): { host: string; port: number } {
  const m = /^(.+):(\d+)$/.exec(s ?? '');
  if (!m) throw new Error(`--to wants IP:PORT, got ${s}`);
  return { host: m[1]!, port: Number(m[2]) };
}

function addresses(): string[] {
  return Object.values(networkInterfaces()).flat().filter((a) => a && a.family === 'IPv4' && !a.internal).map((a) => a!.address);
}

function whoami(port: number, name: string): void {
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname === '/bytes') {
      const n = Number(url.searchParams.get('n') ?? 0);
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(n) });
      const chunk = Buffer.alloc(64 * 1024, 0x61);
      let left = n;
      // over=MS: the bytes in ten parts spread over MS milliseconds, so that the connection
      // really stays open that long (a client's rate limit does not: the socket buffers
      // take a small body at once).
      const over = Number(url.searchParams.get('over') ?? 0);
      if (over > 0) {
        const part = Math.ceil(n / 10);
        const tick = setInterval(() => {
          const size = Math.min(left, part);
          left -= size;
          res.write(Buffer.alloc(size, 0x61));
          if (left <= 0) {
            clearInterval(tick);
            res.end();
          }
        }, over / 10);
        res.once('close', () => clearInterval(tick));
        return;
      }
      const pump = () => {
        while (left > 0) {
          const part = chunk.subarray(0, Math.min(left, chunk.length));
          left -= part.length;
          if (!res.write(part)) return void res.once('drain', pump);
        }
        res.end();
      };
      pump();
      return;
    }
    let received = 0;
    req.on('data', (d: Buffer) => (received += d.length));
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end(`Hostname: ${name}\n${addresses().map((a) => `IP: ${a}\n`).join('')}RemoteAddr: ${req.socket.remoteAddress}:${req.socket.remotePort}\nReceived: ${received}\n`);
    });
  });
  server.listen(port, '0.0.0.0', () => process.stdout.write(`whoami listening on ${port}\n`));
}

function udpEcho(port: number): void {
  const s = createSocket('udp4');
  s.on('message', (msg, rinfo) => s.send(msg, rinfo.port, rinfo.address));
  s.bind(port, '0.0.0.0', () => process.stdout.write(`udp-echo listening on ${port}\n`));
}

async function udpClient(to: { host: string; port: number }, connected: boolean, size: number, count: number): Promise<void> {
  const s = createSocket('udp4');
  const replies: { from: string; bytes: number; ok: boolean }[] = [];
  await new Promise<void>((resolve) => s.bind(0, resolve));
  if (connected) await new Promise<void>((resolve, reject) => s.connect(to.port, to.host, (e?: Error) => (e ? reject(e) : resolve())));
  for (let i = 0; i < count; i++) {
    const payload = Buffer.alloc(size, 0x30 + (i % 10));
    const reply = new Promise<{ from: string; bytes: number; ok: boolean }>((resolve) => {
      const timer = setTimeout(() => resolve({ from: '', bytes: 0, ok: false }), 2000);
      s.once('message', (msg, rinfo) => {
        clearTimeout(timer);
        resolve({ from: `${rinfo.address}:${rinfo.port}`, bytes: msg.length, ok: msg.equals(payload) });
      });
    });
    if (connected) s.send(payload);
    else s.send(payload, to.port, to.host);
    replies.push(await reply);
  }
  s.close();
  process.stdout.write(`${JSON.stringify({ replies })}\n`);
}

function tcpPeer(to: { host: string; port: number }, o: { localPort?: number; http: boolean; reset: boolean }): void {
  let done = false;
  const finish = (out: Record<string, unknown>, failed: boolean) => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    process.stdout.write(`${JSON.stringify(out)}\n`);
    if (failed) process.exitCode = 1;
    if (o.reset) c.resetAndDestroy();
    else c.destroy();
  };
  // A SYN that is dropped would be retried for minutes: 3 s is a failure here.
  const timer = setTimeout(() => finish({ error: 'ETIMEDOUT' }, true), 3000);
  const c = connect({ port: to.port, host: to.host, ...(o.localPort ? { localPort: o.localPort } : {}) }, () => {
    const peer = `${c.remoteAddress}:${c.remotePort}`;
    if (!o.http) return finish({ peer }, false);
    c.write(`GET / HTTP/1.1\r\nHost: ${to.host}\r\n\r\n`);
    c.once('data', (d: Buffer) => finish({ peer, status: d.toString().split('\r\n')[0] }, false));
  });
  c.on('error', (e: NodeJS.ErrnoException) => finish({ error: e.code }, true));
}

async function connectLatency(to: { host: string; port: number }, count: number, reset: boolean): Promise<void> {
  const samples: number[] = [];
  let failures = 0;
  for (let i = 0; i < count; i++) {
    const t0 = process.hrtime.bigint();
    await new Promise<void>((resolve) => {
      // A connect that neither completes nor fails within 3 s counts as failed.
      const timer = setTimeout(() => {
        failures++;
        c.destroy();
        resolve();
      }, 3000);
      const c = connect(to.port, to.host, () => {
        clearTimeout(timer);
        samples.push(Number(process.hrtime.bigint() - t0) / 1000);
        if (reset) c.resetAndDestroy();
        else c.destroy();
        resolve();
      });
      c.on('error', () => {
        clearTimeout(timer);
        failures++;
        resolve();
      });
    });
  }
  samples.sort((a, b) => a - b);
  const q = (p: number) => samples[Math.min(samples.length - 1, Math.floor(p * samples.length))] ?? NaN;
  process.stdout.write(`${JSON.stringify({ count: samples.length, failures, p50: q(0.5), p90: q(0.9), p99: q(0.99) })}\n`);
}

function tcpEcho(port: number): void {
  const server = createTcpServer((c) => {
    c.setNoDelay(true);
    c.on('data', (d) => c.write(d));
    c.on('error', () => c.destroy());
  });
  server.listen(port, '0.0.0.0', () => process.stdout.write(`tcp-echo listening on ${port}\n`));
}

/** A TCP connection that answers one request at a time. */
class Exchange {
  private want = 0;
  private got = 0;
  private done?: (ok: boolean) => void;
  constructor(readonly socket: Socket) {
    socket.setNoDelay(true);
    socket.on('data', (d: Buffer) => {
      this.got += d.length;
      if (this.done && this.got >= this.want) this.finish(true);
    });
    socket.on('error', () => this.finish(false));
    socket.on('close', () => this.finish(false));
  }
  static open(to: { host: string; port: number }): Promise<Exchange | undefined> {
    return new Promise((resolve) => {
      const s = connect(to.port, to.host, () => resolve(new Exchange(s)));
      s.once('error', () => resolve(undefined));
    });
  }
  private finish(ok: boolean): void {
    const d = this.done;
    this.done = undefined;
    d?.(ok);
  }
  request(payload: Buffer): Promise<boolean> {
    this.want = payload.length;
    this.got = 0;
    return new Promise((resolve) => {
      this.done = resolve;
      this.socket.write(payload);
    });
  }
}

/** Request/response until the time is up; a request unanswered within 3 s fails. */
async function requestResponse(to: { host: string; port: number }, seconds: number, size: number, mode: 'tcp' | 'tcp-new' | 'udp'): Promise<void> {
  const samples: number[] = [];
  let failures = 0;
  const payload = Buffer.alloc(size, 0x61);
  const withTimeout = (p: Promise<boolean>) => Promise.race([p, new Promise<boolean>((r) => setTimeout(() => r(false), 3000).unref())]);
  const end = process.hrtime.bigint() + BigInt(Math.round(seconds * 1e9));
  let persistent: Exchange | undefined;
  let udp: ReturnType<typeof createSocket> | undefined;
  if (mode === 'tcp') persistent = await Exchange.open(to);
  if (mode === 'udp') {
    udp = createSocket('udp4');
    const u = udp;
    await new Promise<void>((resolve, reject) => u.connect(to.port, to.host, (e?: Error) => (e ? reject(e) : resolve())));
  }
  while (process.hrtime.bigint() < end && failures < 100) {
    const t0 = process.hrtime.bigint();
    let ok: boolean;
    if (mode === 'udp') {
      const u = udp!;
      ok = await withTimeout(new Promise((resolve) => {
        u.once('message', (m) => resolve(m.length === size));
        u.send(payload);
      }));
      if (!ok) u.removeAllListeners('message');
    } else if (mode === 'tcp') {
      ok = persistent ? await withTimeout(persistent.request(payload)) : false;
      if (!ok) {
        persistent?.socket.destroy();
        persistent = await Exchange.open(to);
      }
    } else {
      // A new connection per request, closed with a reset so that no TIME_WAIT socket
      // is left to fill the port range.
      const x = await withTimeout(Exchange.open(to).then(async (e) => {
        if (!e) return false;
        const r = await e.request(payload);
        e.socket.resetAndDestroy();
        return r;
      }));
      ok = x;
    }
    if (ok) samples.push(Number(process.hrtime.bigint() - t0) / 1000);
    else failures++;
  }
  persistent?.socket.destroy();
  udp?.close();
  samples.sort((a, b) => a - b);
  const q = (p: number) => samples[Math.min(samples.length - 1, Math.floor(p * samples.length))] ?? NaN;
  process.stdout.write(`${JSON.stringify({ count: samples.length, failures, seconds, p50: q(0.5), p90: q(0.9), p99: q(0.99), max: samples[samples.length - 1] ?? NaN, over100ms: samples.filter((x) => x > 100_000).length })}\n`);
}

/** One connection: connect, a byte there and back, close with FIN; false if any step fails or takes over 1 s. */
function oneConnection(to: { host: string; port: number }): Promise<boolean> {
  return new Promise((resolve) => {
    let settled = false;
    const s = connect(to.port, to.host);
    const finish = (ok: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (!ok) s.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => finish(false), 1000);
    s.once('connect', () => s.write('x'));
    s.once('data', () => s.end());
    s.once('close', (hadError) => finish(!hadError));
    s.once('error', () => finish(false));
  });
}

async function connectRate(to: { host: string; port: number }, seconds: number, concurrency: number): Promise<void> {
  const end = Date.now() + seconds * 1000;
  const perSecond: Array<{ ok: number; failed: number }> = Array.from({ length: Math.ceil(seconds) }, () => ({ ok: 0, failed: 0 }));
  const start = Date.now();
  const loop = async () => {
    while (Date.now() < end) {
      const ok = await oneConnection(to);
      const slot = perSecond[Math.min(perSecond.length - 1, Math.floor((Date.now() - start) / 1000))]!;
      if (ok) slot.ok++;
      else slot.failed++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
  const ok = perSecond.reduce((a, x) => a + x.ok, 0);
  const failed = perSecond.reduce((a, x) => a + x.failed, 0);
  process.stdout.write(`${JSON.stringify({ seconds, concurrency, ok, failed, perSecond })}\n`);
}

async function main(): Promise<void> {
  const [cmd, ...rest] = process.argv.slice(2);
  const { values } = parseArgs({
    args: rest,
    options: {
      port: { type: 'string' }, name: { type: 'string' }, to: { type: 'string' }, connected: { type: 'boolean' },
      size: { type: 'string' }, count: { type: 'string' }, seconds: { type: 'string' }, udp: { type: 'boolean' },
      'new-connection': { type: 'boolean' }, reset: { type: 'boolean' }, 'local-port': { type: 'string' }, http: { type: 'boolean' }, targets: { type: 'string' }, second: { type: 'string' }, 'listen-loopback': { type: 'boolean' }, concurrency: { type: 'string' },
      'interval-ms': { type: 'string' }, 'timeout-ms': { type: 'string' }, 'pause-at-ms': { type: 'string' }, 'pause-ms': { type: 'string' },
    },
  });
  switch (cmd) {
    case 'whoami':
      return whoami(Number(values.port ?? 80), values.name ?? hostname());
    case 'udp-echo':
      return udpEcho(Number(values.port ?? 5353));
    case 'udp':
      return udpClient(target(values.to), Boolean(values.connected), Number(values.size ?? 16), Number(values.count ?? 1));
    case 'tcp-peer':
      return tcpPeer(target(values.to), { localPort: values['local-port'] ? Number(values['local-port']) : undefined, http: Boolean(values.http), reset: Boolean(values.reset) });
    case 'connect-latency':
      return connectLatency(target(values.to), Number(values.count ?? 100), Boolean(values.reset));
    case 'tcp-echo':
      return tcpEcho(Number(values.port ?? 7));
    case 'connect-rate':
      return connectRate(target(values.to), Number(values.seconds ?? 10), Number(values.concurrency ?? 8));
    case 'connect-probe':
      return connectProbe((values.targets ?? '').split(',').filter(Boolean), Boolean(values['listen-loopback']));
    case 'port-share': {
      const share = values.udp ? udpPortShare : portShare;
      return void process.stdout.write(`${JSON.stringify(await share(target(values.to), target(values.second), Number(values['local-port'])))}\n`);
    }
    case 'hold':
      return hold(target(values.to), Number(values.count ?? 10), Number(values.seconds ?? 10), values['timeout-ms'] ? Number(values['timeout-ms']) : undefined,
        values['pause-ms'] ? { atMs: Number(values['pause-at-ms'] ?? 0), forMs: Number(values['pause-ms']) } : undefined);
    case 'steady':
      return steady((values.targets ?? '').split(',').filter(Boolean), Number(values['interval-ms'] ?? 20), Number(values['timeout-ms'] ?? 2000));
    case 'rr':
      return requestResponse(target(values.to), Number(values.seconds ?? 2), Number(values.size ?? 64), values.udp ? 'udp' : values['new-connection'] ? 'tcp-new' : 'tcp');
    default:
      throw new Error(`unknown workload ${cmd}`);
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.message}\n`);
  process.exit(2);
});
