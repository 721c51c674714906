// Load that runs as long as a reliability scenario does: new requests at a steady rate
// (steady), and long-lived connections that must not break (hold).
import { createSocket } from 'node:dgram';
import { connect, type Socket } from 'node:net';

interface Target {
  name: string;
  proto: 'tcp' | 'udp';
  host: string;
  port: number;
}

function parseTarget(s: string): Target {
  const m = /^(tcp|udp):(.+):(\d+)$/.exec(s);
  if (!m) throw new Error(`a target is tcp:IP:PORT or udp:IP:PORT, got ${s}`);
  return { name: s, proto: m[1] as 'tcp' | 'udp', host: m[2]!, port: Number(m[3]) };
}

/** A new connection, an HTTP GET, and the status line back: the error, or undefined when it worked. */
function httpOnce(t: Target, timeoutMs: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    let got = '';
    const start = Date.now();
    let connectedMs = -1;
    const s = connect(t.port, t.host);
    // Read once the connect is issued: a socket that failed has no local port any more.
    let localPort: number | undefined;
    setImmediate(() => (localPort ??= s.localPort));
    const port = () => localPort ?? s.localPort ?? '?';
    // How far the exchange got: the port finds the flow in the maps.
    const phase = (connectedNote: string) => (connectedMs < 0 ? 'not connected' : `connected at ${connectedMs} ms${connectedNote}`);
    const done = (err: string | undefined) => {
      clearTimeout(timer);
      s.destroy();
      resolve(err);
    };
    // A timeout says how far the exchange got, and how late the timer ran: a client that
    // was itself not scheduled is told apart from packets that were lost.
    const timer = setTimeout(() => done(`timeout (${phase(', no reply')}; from port ${port()}; timer ${Date.now() - start - timeoutMs} ms late)`), timeoutMs);
    s.once('connect', () => {
      connectedMs = Date.now() - start;
      s.write('GET / HTTP/1.0\r\nHost: probe\r\n\r\n');
    });
    s.on('data', (d: Buffer) => {
      got += d.toString('latin1');
      if (got.length >= 12) done(/^HTTP\/1\.[01] 200/.test(got) ? undefined : `reply ${got.slice(0, 12)}`);
    });
    s.once('error', (e: NodeJS.ErrnoException) => done(`${e.code ?? e.message} (${phase(got ? ', replied' : '')}; from port ${port()})`));
    s.once('close', () => done(got ? `short reply ${got.slice(0, 12)}` : 'closed'));
  });
}

/** A new socket, one datagram, and the same bytes back. */
function udpOnce(t: Target, seq: number, timeoutMs: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const s = createSocket('udp4');
    const payload = Buffer.from(`probe-${process.pid}-${seq}`);
    const done = (err: string | undefined) => {
      clearTimeout(timer);
      s.close();
      resolve(err);
    };
    const start = Date.now();
    const port = () => {
      try {
        return s.address().port;
      } catch {
        return '?'; // not bound: the datagram was never sent
      }
    };
    const timer = setTimeout(() => done(`timeout (from port ${port()}; timer ${Date.now() - start - timeoutMs} ms late)`), timeoutMs);
    s.on('message', (m) => {
      if (m.equals(payload)) done(undefined);
    });
    s.once('error', (e: NodeJS.ErrnoException) => done(e.code ?? e.message));
    s.send(payload, t.port, t.host);
  });
}

export async function steady(specs: string[], intervalMs: number, timeoutMs: number): Promise<void> {
  const targets = specs.map(parseTarget);
  const counts = new Map(targets.map((t) => [t.name, { ok: 0, failed: 0 }]));
  let stopping = false;
  const flush = () => {
    process.stdout.write(`${JSON.stringify({ at: Date.now(), counts: Object.fromEntries([...counts].map(([k, v]) => [k, [v.ok, v.failed]])) })}\n`);
    for (const c of counts.values()) c.ok = c.failed = 0;
  };
  const ticker = setInterval(flush, 1000);
  process.once('SIGTERM', () => (stopping = true));
  const loop = async (t: Target) => {
    for (let seq = 0; !stopping; seq++) {
      const start = Date.now();
      const err = t.proto === 'tcp' ? await httpOnce(t, timeoutMs) : await udpOnce(t, seq, timeoutMs);
      const c = counts.get(t.name)!;
      if (err === undefined) c.ok++;
      else {
        c.failed++;
        process.stdout.write(`${JSON.stringify({ at: start, target: t.name, error: err })}\n`);
      }
      await new Promise((r) => setTimeout(r, Math.max(0, intervalMs - (Date.now() - start))));
    }
  };
  await Promise.all(targets.map(loop));
  clearInterval(ticker);
  flush();
  process.exit(0);
}

const SILENCE_MS = 5000;

/** A TCP connection; with `timeoutMs`, an attempt not connected by then is given up and made
 * again from a new local port, as a client with a connect timeout does. */
async function connectOnce(to: { host: string; port: number }, timeoutMs?: number, attempts = 5): Promise<Socket> {
  for (let a = 1; ; a++) {
    try {
      return await new Promise<Socket>((resolve, reject) => {
        const c = connect(to, () => {
          clearTimeout(timer);
          resolve(c);
        });
        const timer = timeoutMs ? setTimeout(() => {
          c.destroy();
          reject(new Error(`not connected within ${timeoutMs} ms`));
        }, timeoutMs) : undefined;
        c.once('error', (e) => {
          clearTimeout(timer);
          reject(e);
        });
      });
    } catch (e) {
      if (!timeoutMs || a >= attempts) throw e;
    }
  }
}

/** A quiet spell of held connections: from `atMs` after they are all open, for `forMs`. */
export interface HoldPause { atMs: number; forMs: number }

/**
 * N long-lived connections, pinged every 100 ms; a connection breaks on an error, a close or
 * a 5 s silence. A dead flow stays silent for good; a 1 s limit once counted 1 of 100 held
 * connections broken during a full `make test` on the 2 cores, never in the test alone
 * (a retransmission or scheduling stall, not a lost flow, as far as was seen). With
 * `pause`, every connection sends nothing for a while (and silence is not judged then),
 * as idle connections do: their flows' state goes cold and can be evicted.
 */
export async function hold(to: { host: string; port: number }, count: number, seconds: number, connectTimeoutMs?: number, pause?: HoldPause): Promise<void> {
  const start = Date.now();
  let quiet: { from: number; to: number } | undefined;
  const paused = (now: number) => quiet !== undefined && now >= quiet.from && now < quiet.to;
  const broke: Array<number | undefined> = Array.from({ length: count }, () => undefined);
  // When (epoch ms, to be placed among a scenario's steps) and how each broke.
  const breaks: Array<{ at: number; how: string }> = [];
  const sockets: Socket[] = [];
  for (let i = 0; i < count; i++) {
    const s = await connectOnce(to, connectTimeoutMs);
    s.setNoDelay(true);
    let lastReply = Date.now();
    const fail = (how: string) => {
      if (broke[i] !== undefined) return;
      const now = Date.now();
      broke[i] = now - start;
      breaks.push({ at: now, how: `connection ${i}: ${how}` });
    };
    s.on('data', () => (lastReply = Date.now()));
    s.on('error', (e: NodeJS.ErrnoException) => fail(e.code ?? e.message));
    s.on('close', () => fail('closed'));
    const t = setInterval(() => {
      if (broke[i] !== undefined) return clearInterval(t);
      if (paused(Date.now())) return;
      // A silence is counted from the end of a pause at the earliest.
      if (Date.now() - Math.max(lastReply, quiet?.to ?? 0) > SILENCE_MS) {
        fail(`no answer for ${SILENCE_MS} ms (last at ${lastReply})`);
        s.destroy();
        return clearInterval(t);
      }
      s.write('ping-...');
    }, 100);
    sockets.push(s);
  }
  if (pause) {
    const from = Date.now() + pause.atMs;
    quiet = { from, to: from + pause.forMs };
  }
  process.stdout.write(`holding ${count}\n`);
  await new Promise((r) => setTimeout(r, seconds * 1000));
  const result = { count, survived: broke.filter((b) => b === undefined).length, brokeAtMs: broke.filter((b) => b !== undefined), breaks };
  process.stdout.write(`${JSON.stringify(result)}\n`);
  for (const s of sockets) s.destroy();
  process.exit(0);
}

