// One client port, two frontends of the same pod at once (what a client reusing its port,
// or two clients behind one NAT address, do): without a remap the pod would see a single
// tuple. TCP: a connection to the first frontend is opened and used; a second connection
// from the same port to the other frontend is begun while the first lives; the first is
// used again, then closed; how and when each fared is told. UDP: one socket on the port
// sends to the first frontend, the second, the first again; each answer's source is told.
import { createSocket } from 'node:dgram';
import { connect, type Socket } from 'node:net';

export interface PortShareResult {
  /** The first connection's two requests (status line, or the error). */
  first: string[];
  /** When the second connected (ms after it began), or -1. */
  secondConnectedMs: number;
  /** Whether the second connected while the first was still open. */
  secondConnectedBeforeFirstClosed: boolean;
  second: string;
}

/** A GET on a kept-alive connection: the status line, or what went wrong. */
function get(s: Socket, host: string, timeoutMs: number): Promise<string> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => done('timeout'), timeoutMs);
    const onData = (d: Buffer) => done(d.toString('latin1').split('\r\n')[0]!);
    const onError = (e: NodeJS.ErrnoException) => done(e.code ?? e.message);
    function done(v: string): void {
      clearTimeout(timer);
      s.off('data', onData);
      s.off('error', onError);
      resolve(v);
    }
    s.on('data', onData);
    s.on('error', onError);
    s.write(`GET / HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
  });
}

export async function portShare(first: { host: string; port: number }, second: { host: string; port: number }, localPort: number): Promise<PortShareResult> {
  const a = connect({ ...first, localPort });
  a.on('error', () => undefined); // told through get()
  await new Promise<void>((resolve, reject) => {
    a.once('connect', resolve);
    a.once('error', reject);
  });
  const firstReplies = [await get(a, first.host, 2000)];
  const began = Date.now();
  let secondConnectedMs = -1;
  const b = connect({ ...second, localPort });
  b.on('error', () => undefined);
  const bConnected = new Promise<boolean>((resolve) => {
    b.once('connect', () => resolve(true));
    b.once('error', () => resolve(false));
    setTimeout(() => resolve(false), 6000).unref();
  });
  let firstClosed = false;
  let secondConnectedBeforeFirstClosed = false;
  b.once('connect', () => {
    secondConnectedMs = Date.now() - began;
    secondConnectedBeforeFirstClosed = !firstClosed;
  });
  // The second's SYN has reached the pod by now; the first must still work.
  await new Promise((r) => setTimeout(r, 300));
  firstReplies.push(await get(a, first.host, 2000));
  firstClosed = true;
  a.end();
  const secondReply = (await bConnected) ? await get(b, second.host, 2000) : 'not connected';
  b.destroy();
  a.destroy();
  return { first: firstReplies, secondConnectedMs, secondConnectedBeforeFirstClosed, second: secondReply };
}

/** For each datagram sent (to first, second, first), the answer's source as `ip:port`, or 'none'. */
export async function udpPortShare(first: { host: string; port: number }, second: { host: string; port: number }, localPort: number): Promise<string[]> {
  const s = createSocket('udp4');
  await new Promise<void>((resolve) => s.bind(localPort, resolve));
  const answers = new Map<string, string>();
  s.on('message', (msg, from) => answers.set(msg.toString(), `${from.address}:${from.port}`));
  const order = [first, second, first];
  try {
    for (const [i, to] of order.entries()) {
      s.send(`q${i}`, to.port, to.host);
      const deadline = Date.now() + 2000;
      while (!answers.has(`q${i}`) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    }
  } finally {
    s.close();
  }
  return order.map((_, i) => answers.get(`q${i}`) ?? 'none');
}
