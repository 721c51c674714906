// Small HTTP servers (health, metrics, status) that a slow or idle client cannot hold:
// short timeouts and a bound on connections.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';

const REQUEST_TIMEOUT_MS = 5_000;
const MAX_CONNECTIONS = 1_000;

export function parseHostPort(addr: string): { host: string; port: number } {
  const i = addr.lastIndexOf(':');
  return { host: addr.slice(0, i).replace(/^\[|\]$/g, '') || '0.0.0.0', port: Number(addr.slice(i + 1)) };
}

export type Handler = (req: IncomingMessage, res: ServerResponse) => void;

export async function listen(handler: Handler, host: string, port: number): Promise<Server> {
  const s = createServer({ requestTimeout: REQUEST_TIMEOUT_MS, headersTimeout: REQUEST_TIMEOUT_MS, keepAliveTimeout: 1_000 }, handler);
  s.maxConnections = MAX_CONNECTIONS;
  await new Promise<void>((resolve, reject) => {
    s.once('error', reject);
    s.listen(port, host, () => resolve());
  });
  return s;
}

/** Serve `routes` (by path) on HOST:PORT; anything else is a 404. */
export function serveRoutes(addr: string, routes: Record<string, Handler>): Promise<Server> {
  const { host, port } = parseHostPort(addr);
  return listen((req, res) => {
    const route = routes[new URL(req.url ?? '/', 'http://x').pathname];
    if (route) route(req, res);
    else res.writeHead(404).end('404 page not found\n');
  }, host, port);
}

/** Close a server now, dropping its connections. */
export async function closeServer(s: Server): Promise<void> {
  s.closeAllConnections();
  await new Promise<void>((r) => s.close(() => r()));
}
