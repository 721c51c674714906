// What connect() says for each target, read off errno: the socket hooks' decision (refused,
// unreachable, or a connection), for the e2e tests of ClusterIP, NodePort and loopback.
import { createSocket } from 'node:dgram';
import { connect, createServer as createTcpServer } from 'node:net';

/** What connect() says for each target: the socket hooks' decision, read off errno. */
export async function connectProbe(targets: string[], listenLoopback: boolean): Promise<void> {
  const parsed = targets.map((t) => {
    const m = /^\[?(.+?)\]?:(\d+)\/(tcp|udp)$/.exec(t);
    if (!m) throw new Error(`--targets wants IP:PORT/tcp|udp, got ${t}`);
    return { t, host: m[1]!, port: Number(m[2]), proto: m[3] as 'tcp' | 'udp' };
  });
  const servers: Array<{ close(): void }> = [];
  if (listenLoopback) {
    const seen = new Set<string>();
    for (const x of parsed) {
      const v4 = x.host.replace(/^::ffff:/, '');
      const key = `${v4}:${x.port}/${x.proto}`;
      if (!v4.startsWith('127.') || seen.has(key)) continue;
      seen.add(key);
      if (x.proto === 'tcp') {
        const srv = createTcpServer((c) => c.destroy());
        await new Promise<void>((ok, fail) => srv.once('error', fail).listen(x.port, v4, () => ok()));
        servers.push(srv);
      }
    }
  }
  for (const x of parsed) {
    const result = await new Promise<string>((resolve) => {
      if (x.proto === 'udp') {
        // dgram's connect callback gets the error, if any.
        const sock = createSocket(x.host.includes(':') ? 'udp6' : 'udp4');
        sock.connect(x.port, x.host, (e?: NodeJS.ErrnoException) => {
          sock.close();
          resolve(e ? (e.code ?? e.message) : 'ok');
        });
        return;
      }
      const c = connect({ host: x.host, port: x.port });
      c.once('connect', () => {
        c.destroy();
        resolve('ok');
      });
      c.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
      c.setTimeout(2000, () => {
        c.destroy();
        resolve('ETIMEDOUT');
      });
    });
    process.stdout.write(`${JSON.stringify({ target: x.t, result })}\n`);
  }
  for (const s of servers) s.close();
}
