// Plain JSON requests and watches against the API server, over whatever credentials an
// ApiAccess gives (src/k8s/access.ts for the agent, a client-node KubeConfig through
// kubeconfig-client.ts for the operator and the CLI). Nothing here loads
// @kubernetes/client-node.
import http from 'node:http';
import https from 'node:https';
import type { ApiAccess } from './access.js';

/** A refused request, with the API server's status code (409 Conflict, 404 Not Found, ...). */
export class ApiStatusError extends Error {
  constructor(readonly code: number, message: string) {
    super(message);
  }
}

const REQUEST_TIMEOUT_MS = 30_000;
const AUTH_REFRESH_MS = 1_000;

/**
 * Plain JSON requests and watches with an ApiAccess's credentials: the agent's whole API
 * traffic, and the operator's hot paths (client-node's typed clients spend most of a small
 * request's CPU in their (de)serializers and fetch layers).
 */
export class JsonClient {
  private readonly server: string;

  private cached: { headers: Record<string, string>; agent: http.Agent | undefined; until: number } | undefined;

  constructor(private readonly access: ApiAccess) {
    this.server = access.server.replace(/\/+$/, '');
  }

  /** The credentials' headers and agent, asked again every second (tokens and certificates rotate). */
  private async credentials(url: URL, method: string): Promise<{ headers: Record<string, string>; agent: http.Agent | undefined }> {
    const now = Date.now();
    if (this.cached && now < this.cached.until) return this.cached;
    const c = await this.access.credentials(url, method);
    this.cached = { ...c, until: now + AUTH_REFRESH_MS };
    return this.cached;
  }

  /**
   * A watch: GET `path` and hand each line of the answer (one JSON watch event) to
   * `onEvent` until the server ends it (resolves) or it fails or `signal` aborts (rejects).
   */
  async watch(path: string, onEvent: (event: { type: string; object: unknown }) => void, signal: AbortSignal): Promise<void> {
    const url = new URL(`${this.server}${path}`);
    const { headers: auth, agent } = await this.credentials(url, 'GET');
    return new Promise<void>((resolve, reject) => {
      if (signal.aborted) return reject(new Error(`watch ${path}: aborted`));
      const req = (url.protocol === 'https:' ? https : http).request(url, { method: 'GET', headers: { ...auth, accept: 'application/json', 'user-agent': this.access.userAgent ?? 'ferry' }, agent }, (res) => {
        const status = res.statusCode ?? 0;
        if (status >= 300) {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => reject(new ApiStatusError(status, `watch ${path}: ${status}: ${Buffer.concat(chunks).toString('utf8').slice(0, 500)}`)));
          return;
        }
        res.setEncoding('utf8');
        let partial = '';
        res.on('data', (chunk: string) => {
          const lines = (partial + chunk).split('\n');
          partial = lines.pop()!;
          for (const line of lines) {
            if (!line.trim()) continue;
            let event: { type: string; object: unknown };
            try {
              event = JSON.parse(line) as { type: string; object: unknown };
            } catch (e) {
              reject(new Error(`watch ${path}: an event is not JSON: ${(e as Error).message}`));
              req.destroy();
              return;
            }
            onEvent(event);
          }
        });
        res.on('end', () => resolve());
        res.on('error', reject);
        res.on('aborted', () => reject(new Error(`watch ${path}: the server closed the stream`)));
      });
      // Reject first, then close without an error (an error event there would find no listener).
      const abort = () => {
        reject(new Error(`watch ${path}: aborted`));
        req.destroy();
      };
      signal.addEventListener('abort', abort, { once: true });
      req.on('close', () => signal.removeEventListener('abort', abort));
      req.on('error', reject);
      req.end();
    });
  }

  async request<T>(method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE', path: string, body?: unknown, contentType = 'application/json'): Promise<T> {
    const url = new URL(`${this.server}${path}`);
    const { headers: auth, agent } = await this.credentials(url, method);
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers: Record<string, string> = { ...auth, accept: 'application/json', 'user-agent': this.access.userAgent ?? 'ferry', ...(payload !== undefined ? { 'content-type': contentType, 'content-length': String(Buffer.byteLength(payload)) } : {}) };
    return new Promise<T>((resolve, reject) => {
      const req = (url.protocol === 'https:' ? https : http).request(url, { method, headers, agent, timeout: REQUEST_TIMEOUT_MS }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          if (status >= 300) {
            let message = text;
            try {
              message = (JSON.parse(text) as { message?: string }).message ?? text;
            } catch {
              // not JSON: keep the text
            }
            reject(new ApiStatusError(status, `${method} ${path}: ${status}: ${message.slice(0, 500)}`));
            return;
          }
          try {
            resolve((text ? JSON.parse(text) : undefined) as T);
          } catch (e) {
            reject(new Error(`${method} ${path}: the answer is not JSON: ${(e as Error).message}`));
          }
        });
      });
      req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer within ${REQUEST_TIMEOUT_MS} ms`)));
      req.on('error', reject);
      req.end(payload);
    });
  }
}
