// How the agent reaches the API server: a kubeconfig file, or in-cluster credentials (on
// Talos, KUBERNETES_SERVICE_HOST=localhost and KUBERNETES_SERVICE_PORT=7445 reach KubePrism).
import { createHash } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { KubeConfig, RequestContext, ServerConfiguration, createConfiguration, type Configuration, type HttpMethod, type SecurityAuthentication } from '@kubernetes/client-node';
import { ErrorCode, FerryError } from '../errors.js';

/**
 * `path`, or else in-cluster credentials (daemons); with `fallback: 'default'`, kubectl's
 * order instead ($KUBECONFIG, ~/.kube/config, in-cluster), for commands a human runs.
 */
export function kubeConfig(path: string, fallback: 'in-cluster' | 'default' = 'in-cluster'): KubeConfig {
  const kc = new KubeConfig();
  try {
    if (path) kc.loadFromFile(path);
    else if (fallback === 'default') kc.loadFromDefault();
    else kc.loadFromCluster();
  } catch (e) {
    throw new FerryError({
      code: ErrorCode.Config,
      op: path ? `read kubeconfig ${path}` : 'load in-cluster config',
      cause: (e as Error).message,
      hint: path ? 'check the path (--kubeconfig)' : 'run in a pod with a service account, or pass --kubeconfig',
    });
  }
  if (!kc.getCurrentCluster()) {
    throw new FerryError({ code: ErrorCode.Config, op: 'load kubeconfig', cause: 'no current cluster', hint: 'set current-context, or KUBERNETES_SERVICE_HOST/PORT in a pod' });
  }
  return kc;
}

/**
 * An API client like `kc.makeApiClient(type)`, whose requests reuse their connections.
 * client-node makes a new agent, so a new TCP (and TLS) connection, for every request: a
 * burst of 10k status writes would be 10k handshakes. Here each request still gets its
 * credentials from the kubeconfig (so rotated client certificates are honoured), and the
 * agent client-node made is swapped for a kept-alive one with the same TLS options.
 */
export function apiClient<T>(kc: KubeConfig, type: new (config: Configuration) => T): T {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new FerryError({ code: ErrorCode.Config, op: 'make an API client', cause: 'no current cluster' });
  const agents = new Map<string, http.Agent>();
  const auth: SecurityAuthentication = {
    getName: () => 'kubeconfig, connections kept alive',
    applySecurityAuthentication: async (ctx: RequestContext) => {
      await kc.applySecurityAuthentication(ctx);
      const made = ctx.getAgent();
      if (!made || cluster.proxyUrl) return; // proxies keep client-node's own agents
      ctx.setAgent(keptAlive(agents, made));
    },
  };
  return new type(createConfiguration({ baseServer: new ServerConfiguration(cluster.server, {}), authMethods: { default: auth } }));
}

/** At most this many connections per client (the operator writes 32 statuses at a time). */
const MAX_SOCKETS = 64;
const RETIRE_MS = 120_000;

function keptAlive(agents: Map<string, http.Agent>, made: http.Agent): http.Agent {
  const o = (made as http.Agent & { options: Record<string, unknown> }).options;
  const tls = made instanceof https.Agent;
  const key = createHash('sha256').update(JSON.stringify([tls, o.ca, o.cert, o.key, o.pfx, o.passphrase, o.rejectUnauthorized, o.servername])).digest('hex');
  let agent = agents.get(key);
  if (!agent) {
    // New credentials (a rotated certificate): new connections; the old agent's close once
    // the requests on them had time to finish.
    for (const old of agents.values()) setTimeout(() => old.destroy(), RETIRE_MS).unref();
    agents.clear();
    agent = tls ? new https.Agent({ ...o, keepAlive: true, maxSockets: MAX_SOCKETS }) : new http.Agent({ ...o, keepAlive: true, maxSockets: MAX_SOCKETS });
    agents.set(key, agent);
  }
  made.destroy();
  return agent;
}

/** A refused request, with the API server's status code (409 Conflict, 404 Not Found, ...). */
export class ApiStatusError extends Error {
  constructor(readonly code: number, message: string) {
    super(message);
  }
}

const REQUEST_TIMEOUT_MS = 30_000;
const AUTH_REFRESH_MS = 1_000;

/**
 * Plain JSON requests with the kubeconfig's credentials, for the hot paths (the operator's
 * status writes): client-node's typed clients spend most of a small request's CPU in their
 * (de)serializers and fetch layers, which a merge patch of a status does not need.
 */
export class JsonClient {
  private readonly agents = new Map<string, http.Agent>();
  private readonly server: string;

  private cached: { headers: Record<string, string>; agent: http.Agent | undefined; until: number } | undefined;

  constructor(private readonly kc: KubeConfig) {
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new FerryError({ code: ErrorCode.Config, op: 'make an API client', cause: 'no current cluster' });
    this.server = cluster.server.replace(/\/+$/, '');
  }

  /** The kubeconfig's headers and agent, asked again every second (tokens and certificates rotate). */
  private async credentials(url: URL, method: string): Promise<{ headers: Record<string, string>; agent: http.Agent | undefined }> {
    const now = Date.now();
    if (this.cached && now < this.cached.until) return this.cached;
    const ctx = new RequestContext(url.toString(), method as HttpMethod);
    await this.kc.applySecurityAuthentication(ctx);
    const made = ctx.getAgent();
    const agent = made && !this.kc.getCurrentCluster()?.proxyUrl ? keptAlive(this.agents, made) : made;
    this.cached = { headers: ctx.getHeaders(), agent, until: now + AUTH_REFRESH_MS };
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
      const req = (url.protocol === 'https:' ? https : http).request(url, { method: 'GET', headers: { ...auth, accept: 'application/json' }, agent }, (res) => {
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
    const headers: Record<string, string> = { ...auth, accept: 'application/json', ...(payload !== undefined ? { 'content-type': contentType, 'content-length': String(Buffer.byteLength(payload)) } : {}) };
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
