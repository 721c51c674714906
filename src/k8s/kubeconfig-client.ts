// The API through @kubernetes/client-node's KubeConfig (the operator, the CLI, tests):
// kubeconfig loading with every auth method client-node knows, typed API clients whose
// connections are kept alive, and an ApiAccess for JsonClient over the same credentials.
// The agent does not load this (src/k8s/access.ts reads its credentials).
import { createHash } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { KubeConfig, RequestContext, ServerConfiguration, createConfiguration, type Configuration, type HttpMethod, type SecurityAuthentication } from '@kubernetes/client-node';
import { ErrorCode, FerryError } from '../errors.js';
import type { ApiAccess } from './access.js';

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

/** JsonClient's credentials from a KubeConfig: its headers, and a kept-alive agent with its TLS options. */
export function kubeConfigAccess(kc: KubeConfig, userAgent = 'ferry'): ApiAccess {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new FerryError({ code: ErrorCode.Config, op: 'make an API client', cause: 'no current cluster' });
  const agents = new Map<string, http.Agent>();
  return {
    server: cluster.server,
    userAgent,
    async credentials(url: URL, method: string) {
      const ctx = new RequestContext(url.toString(), method as HttpMethod);
      await kc.applySecurityAuthentication(ctx);
      const made = ctx.getAgent();
      return { headers: ctx.getHeaders(), agent: made && !cluster.proxyUrl ? keptAlive(agents, made) : made };
    },
  };
}
