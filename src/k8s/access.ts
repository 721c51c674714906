// How the agent reaches the API server without @kubernetes/client-node (about 70 MiB of an
// idle agent's memory is that library's code): a kubeconfig file read here (server, CA,
// client certificate, bearer token), or in-cluster credentials (on Talos
// KUBERNETES_SERVICE_HOST=localhost, KUBERNETES_SERVICE_PORT=7445 reach KubePrism), whose
// token is read again every minute because bound service-account tokens rotate.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { dirname, isAbsolute, join } from 'node:path';
import { parse } from 'yaml';
import { ErrorCode, FerryError } from '../errors.js';

/** What a request needs: the server, and headers and a connection pool for it. */
export interface ApiAccess {
  server: string;
  /** Sent as User-Agent, so audit logs (and the tests) tell the agent from the operator. */
  userAgent?: string;
  credentials(url: URL, method: string): Promise<{ headers: Record<string, string>; agent: http.Agent | undefined }>;
}

const IN_CLUSTER_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
const TOKEN_REREAD_MS = 60_000;
/** At most this many connections (the operator writes 32 statuses at a time). */
const MAX_SOCKETS = 64;

interface Parts {
  server: string;
  ca?: Buffer;
  insecure: boolean;
  cert?: Buffer;
  key?: Buffer;
  token?: string;
  tokenFile?: string;
}

const fail = (op: string, cause: string, hint?: string) => new FerryError({ code: ErrorCode.Config, op, cause, ...(hint ? { hint } : {}) });

function access(p: Parts, userAgent: string): ApiAccess {
  const tls = p.server.startsWith('https:');
  const agent = tls
    ? new https.Agent({ keepAlive: true, maxSockets: MAX_SOCKETS, ca: p.ca, cert: p.cert, key: p.key, rejectUnauthorized: !p.insecure })
    : new http.Agent({ keepAlive: true, maxSockets: MAX_SOCKETS });
  let token = p.token;
  let readAt = 0;
  return {
    server: p.server.replace(/\/+$/, ''),
    userAgent,
    async credentials() {
      if (p.tokenFile && Date.now() - readAt > TOKEN_REREAD_MS) {
        try {
          token = readFileSync(p.tokenFile, 'utf8').trim();
          readAt = Date.now();
        } catch (e) {
          if (token === undefined) throw fail(`read the token ${p.tokenFile}`, (e as Error).message, 'is the service account token mounted?');
        }
      }
      const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
      return { headers, agent };
    },
  };
}

/** In-cluster credentials, from the service account mount (`dir` for tests). */
export function inClusterAccess(env: NodeJS.ProcessEnv = process.env, dir = IN_CLUSTER_DIR, userAgent = 'ferry-agent'): ApiAccess {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host || !port) throw fail('load in-cluster config', 'KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set', 'run in a pod with a service account, or pass --kubeconfig');
  let ca: Buffer;
  try {
    ca = readFileSync(join(dir, 'ca.crt'));
  } catch (e) {
    throw fail('load in-cluster config', (e as Error).message, 'is the service account mounted (automountServiceAccountToken)?');
  }
  const server = `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
  return access({ server, ca, insecure: false, tokenFile: join(dir, 'token') }, userAgent);
}

/** A kubeconfig file's current context: server, CA, client certificate or token. */
export function kubeconfigAccess(path: string, userAgent = 'ferry-agent'): ApiAccess {
  const op = `read kubeconfig ${path}`;
  let doc: Record<string, unknown>;
  try {
    doc = parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  } catch (e) {
    throw fail(op, (e as Error).message, 'check the path (--kubeconfig)');
  }
  const named = (list: unknown, name: unknown, what: string): Record<string, unknown> => {
    const item = Array.isArray(list) ? (list as Array<Record<string, unknown>>).find((x) => x?.name === name) : undefined;
    const body = item?.[what];
    if (!body || typeof body !== 'object') throw fail(op, `no ${what} "${String(name)}"`, 'check current-context and its cluster and user');
    return body as Record<string, unknown>;
  };
  const context = named(doc?.contexts, doc?.['current-context'], 'context');
  const cluster = named(doc?.clusters, context.cluster, 'cluster');
  const user = context.user === undefined ? {} : named(doc?.users, context.user, 'user');
  const base = dirname(path);
  const file = (f: unknown) => readFileSync(isAbsolute(String(f)) ? String(f) : join(base, String(f)));
  const data = (inline: unknown, f: unknown): Buffer | undefined => (typeof inline === 'string' ? Buffer.from(inline, 'base64') : f !== undefined ? file(f) : undefined);
  if (typeof cluster.server !== 'string' || !/^https?:\/\//.test(cluster.server)) throw fail(op, `cluster server ${JSON.stringify(cluster.server)} is not an http(s) URL`);
  if (user.exec !== undefined || user['auth-provider'] !== undefined) {
    throw fail(op, 'the user authenticates with an exec plugin or auth provider, which the agent does not run', 'give the agent a token, a client certificate, or its in-cluster service account');
  }
  try {
    return access({
      server: cluster.server,
      ca: data(cluster['certificate-authority-data'], cluster['certificate-authority']),
      insecure: cluster['insecure-skip-tls-verify'] === true,
      cert: data(user['client-certificate-data'], user['client-certificate']),
      key: data(user['client-key-data'], user['client-key']),
      token: typeof user.token === 'string' ? user.token : undefined,
      tokenFile: typeof user.tokenFile === 'string' ? (isAbsolute(user.tokenFile) ? user.tokenFile : join(base, user.tokenFile)) : undefined,
    }, userAgent);
  } catch (e) {
    if (e instanceof FerryError) throw e;
    throw fail(op, (e as Error).message, 'a file the kubeconfig names cannot be read');
  }
}

/** `path`, or else in-cluster credentials (the agent, as a daemon). */
export function apiAccess(path: string): ApiAccess {
  return path ? kubeconfigAccess(path) : inClusterAccess();
}
