// Built-in workloads for sandbox pods and test clients, run as
// `node dist/sandbox/workloads/main.js <command> ...`:
//   whoami --port P [--name N]     HTTP server answering Hostname, IP and RemoteAddr (like
//                                  traefik/whoami); GET /bytes?n=N sends N bytes
//   udp-echo --port P              UDP echo server
//   udp --to IP:PORT [--connected] [--size N] [--count N]
//                                  send datagrams, print each reply and its source address
//   tcp-peer --to IP:PORT          connect, print the peer address getpeername() reports
//   connect-latency --to IP:PORT --count N
//                                  connect/close N times, print p50/p90/p99 in microseconds
import { createSocket } from 'node:dgram';
import { createServer } from 'node:http';
import { connect } from 'node:net';
import { hostname, networkInterfaces } from 'node:os';
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

function tcpPeer(to: { host: string; port: number }): void {
  const c = connect(to.port, to.host, () => {
    process.stdout.write(`${JSON.stringify({ peer: `${c.remoteAddress}:${c.remotePort}` })}\n`);
    c.destroy();
  });
  c.on('error', (e: NodeJS.ErrnoException) => {
    process.stdout.write(`${JSON.stringify({ error: e.code })}\n`);
    process.exitCode = 1;
  });
}

async function connectLatency(to: { host: string; port: number }, count: number): Promise<void> {
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
        c.destroy();
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

async function main(): Promise<void> {
  const [cmd, ...rest] = process.argv.slice(2);
  const { values } = parseArgs({
    args: rest,
    options: {
      port: { type: 'string' }, name: { type: 'string' }, to: { type: 'string' }, connected: { type: 'boolean' },
      size: { type: 'string' }, count: { type: 'string' },
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
      return tcpPeer(target(values.to));
    case 'connect-latency':
      return connectLatency(target(values.to), Number(values.count ?? 100));
    default:
      throw new Error(`unknown workload ${cmd}`);
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.message}\n`);
  process.exit(2);
});
