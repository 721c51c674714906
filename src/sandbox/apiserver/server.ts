// A test double of the Kubernetes API server: the REST list/watch protocol for the
// resources ferry and the sandbox use, in memory, over plain HTTP. resourceVersions,
// watch events, bookmarks, 410 Gone, label and field selectors, the status subresource,
// merge patches, Events and Leases, CustomResourceDefinitions (served and validated,
// crd.ts), discovery and server-side tables for kubectl. It is not the real API server:
// production talks to that.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { listeningSocketInNetns } from '../../sys/socket.js';
import { crdResources, validateCustom, type ResourceDef } from './crd.js';
import { discovery } from './discovery.js';
import { Store, StoreError, type KObject } from './store.js';
import { matchesFields, matchesLabels, mergePatch } from './query.js';
import { toTable, wantsTable } from './tables.js';
import { RbacPolicy } from './rbac.js';

export const RESOURCES: ResourceDef[] = [
  { group: '', version: 'v1', plural: 'services', kind: 'Service', namespaced: true, statusSubresource: true, shortNames: ['svc'] },
  { group: '', version: 'v1', plural: 'pods', kind: 'Pod', namespaced: true, statusSubresource: true, shortNames: ['po'] },
  { group: '', version: 'v1', plural: 'nodes', kind: 'Node', namespaced: false, statusSubresource: true, shortNames: ['no'] },
  { group: '', version: 'v1', plural: 'namespaces', kind: 'Namespace', namespaced: false, shortNames: ['ns'] },
  { group: '', version: 'v1', plural: 'events', kind: 'Event', namespaced: true, shortNames: ['ev'] },
  { group: '', version: 'v1', plural: 'secrets', kind: 'Secret', namespaced: true },
  { group: 'discovery.k8s.io', version: 'v1', plural: 'endpointslices', kind: 'EndpointSlice', namespaced: true },
  { group: 'coordination.k8s.io', version: 'v1', plural: 'leases', kind: 'Lease', namespaced: true },
  { group: 'apps', version: 'v1', plural: 'deployments', kind: 'Deployment', namespaced: true, statusSubresource: true, shortNames: ['deploy'] },
  { group: 'apiextensions.k8s.io', version: 'v1', plural: 'customresourcedefinitions', kind: 'CustomResourceDefinition', namespaced: false, shortNames: ['crd', 'crds'] },
];

export const apiVersionOf = (r: ResourceDef) => (r.group ? `${r.group}/${r.version}` : r.version);
const BOOKMARK_INTERVAL_MS = 5_000;

/**
 * A list in pages as the real API server serves it (`limit`, `continue`): objects in key
 * order; the token names the list's resourceVersion and the last key served. Later pages
 * come from the current state, not a snapshot (the double keeps none); a token from before
 * the history's reach is 410 Expired, as after an etcd compaction.
 */
function paginate(listKey: string, list: () => KObject[], limitParam: string | null, token: string | null, currentRv: number, expired: (rv: number) => boolean):
  { items: KObject[]; rv: string; metadata: { resourceVersion: string; continue?: string; remainingItemCount?: number } } | { code: number; error: string } {
  const limit = limitParam ? Number(limitParam) : 0;
  if (!Number.isInteger(limit) || limit < 0) return { code: 400, error: `limit ${limitParam}: not a non-negative integer` };
  let rv = String(currentRv);
  let after = '';
  if (token) {
    try {
      const t = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as { rv: string; after: string };
      if (typeof t.rv !== 'string' || typeof t.after !== 'string') throw new Error('shape');
      ({ rv, after } = t);
    } catch {
      return { code: 400, error: 'continue: not a token this server gave' };
    }
    if (expired(Number(rv))) return { code: 410, error: `continue: resourceVersion ${rv} is too old; list again from the start` };
  }
  if (!limit && !token) return { items: list(), rv, metadata: { resourceVersion: rv } };
  const sorted = sortedByKey(listKey, list);
  // The first key after `after` (binary search: a 50k list in pages of 500 is 100 pages).
  let lo = 0;
  let hi = sorted.length;
  while (after && lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (sorted[mid]![0] <= after) lo = mid + 1;
    else hi = mid;
  }
  const rest = sorted.length - lo;
  if (!limit || rest <= limit) return { items: sorted.slice(lo).map(([, o]) => o), rv, metadata: { resourceVersion: rv } };
  const items = sorted.slice(lo, lo + limit);
  const next = Buffer.from(JSON.stringify({ rv, after: items[items.length - 1]![0] })).toString('base64url');
  return { items: items.map(([, o]) => o), rv, metadata: { resourceVersion: rv, continue: next, remainingItemCount: rest - limit } };
}

/** Objects in key order, kept for the next page while the list (resource, selectors, resourceVersion) is the same. */
const sortedLists = new Map<string, Array<readonly [string, KObject]>>();
function sortedByKey(listKey: string, list: () => KObject[]): Array<readonly [string, KObject]> {
  let keys = sortedLists.get(listKey);
  if (keys) return keys;
  keys = list().map((o) => [Store.key(o.metadata.namespace, o.metadata.name ?? ''), o] as const).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  if (sortedLists.size >= 8) sortedLists.delete(sortedLists.keys().next().value!);
  sortedLists.set(listKey, keys);
  return keys;
}

function status(code: number, reason: string, message: string): object {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code };
}

export { matchesFields, matchesLabels, mergePatch } from './query.js';

export interface TestApiServerOptions {
  port?: number;
  host?: string;
  store?: Store;
  /** Listen inside this network namespace (a sandbox host), not the process's own. */
  netns?: string;
  /** Also listen here (e.g. loopback in the root namespace, for kubectl). */
  alsoListen?: { host: string; port: number; netns?: string };
  /** Admission: fill in or check an object before it is stored (clusterIP, nodePorts…). */
  admit?: (resource: string, obj: KObject, old: KObject | undefined) => void;
  /**
   * The main listener as a cluster's: TLS, bearer tokens (401 without a known one) and RBAC
   * (403 for what the policy does not grant). The second listener stays plain and open:
   * the tests' own administrator.
   */
  secure?: { key: string; cert: string; userOf(token: string): string | undefined; policy(): RbacPolicy };
}

export interface AccessRecord {
  verb: string;
  group: string;
  resource: string;
  namespace?: string;
  name?: string;
  userAgent?: string;
  /** The authenticated user (secure listener only). */
  user?: string;
  /** false: refused by RBAC (403). */
  allowed?: boolean;
  /** The policy that decided (RbacPolicy.label). */
  policy?: string;
}

export class TestApiServer {
  readonly store: Store;
  private server: Server | undefined;
  private extra: Server | undefined;
  private readonly watches = new Set<ServerResponse>();
  /** Every raw socket accepted: closeAllConnections() misses a TLS socket still in its handshake. */
  private readonly sockets = new Set<Socket>();
  /** Requests served, by verb and resource (for tests). */
  readonly requests: string[] = [];
  /** The same as RBAC sees them: verb, API group, resource (with subresource), namespace. */
  readonly access: AccessRecord[] = [];

  constructor(private readonly opts: TestApiServerOptions = {}) {
    this.store = opts.store ?? new Store();
  }

  get url(): string {
    if (!this.opts.port) throw new Error('test API server is not listening');
    return `${this.opts.secure ? 'https' : 'http'}://${this.opts.host ?? '127.0.0.1'}:${this.opts.port}`;
  }

  async start(): Promise<void> {
    const serve = (secure: boolean) => (req: IncomingMessage, res: ServerResponse) => {
      this.handle(req, res, secure).catch((e: Error) => this.send(res, 500, status(500, 'InternalError', e.message)));
    };
    const tls = this.opts.secure;
    this.server = tls ? createHttpsServer({ key: tls.key, cert: tls.cert }, serve(true)) : createServer(serve(false));
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      if (this.opts.netns) {
        const fd = listeningSocketInNetns(this.opts.netns, this.opts.host ?? '0.0.0.0', this.opts.port ?? 6443);
        this.server!.listen({ fd }, () => resolve());
      } else {
        this.server!.listen(this.opts.port ?? 0, this.opts.host ?? '127.0.0.1', () => resolve());
      }
    });
    this.track(this.server);
    if (!this.opts.port) this.opts.port = (this.server.address() as AddressInfo).port; // keep the port across restarts
    const also = this.opts.alsoListen;
    if (also) {
      this.extra = createServer(serve(false));
      await new Promise<void>((resolve, reject) => {
        this.extra!.once('error', reject);
        if (also.netns) this.extra!.listen({ fd: listeningSocketInNetns(also.netns, also.host, also.port) }, () => resolve());
        else this.extra!.listen(also.port, also.host, () => resolve());
      });
      this.track(this.extra);
      if (!also.port) also.port = (this.extra.address() as AddressInfo).port;
    }
  }

  private track(server: Server): void {
    server.on('connection', (socket: Socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
    });
  }

  /** The built-in resources and those the stored CRDs serve. */
  resources(): ResourceDef[] {
    return [...RESOURCES, ...this.store.list('customresourcedefinitions').flatMap((c) => crdResources(c))];
  }

  /** The second listener's URL (see alsoListen). */
  get alsoUrl(): string | undefined {
    const a = this.opts.alsoListen;
    return a ? `http://${a.host}:${a.port}` : undefined;
  }

  /** Serving now (between start and stop). */
  get listening(): boolean {
    return this.server !== undefined;
  }

  /** Stop serving: close every watch and refuse connections (the store stays). */
  async stop(): Promise<void> {
    // Stop listening first, then drop every connection: a client that reconnects in
    // between (an agent whose watch just ended) would otherwise hold close() open forever.
    const closed = [this.server, this.extra].filter((s): s is NonNullable<typeof s> => Boolean(s)).map((s) => new Promise<void>((resolve) => s.close(() => resolve())));
    for (const s of [this.server, this.extra]) s?.closeAllConnections();
    // A client mid-TLS-handshake is not among those: close() would wait out its 120 s handshake timeout.
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    for (const w of this.watches) w.destroy();
    this.watches.clear();
    await Promise.all(closed);
    this.server = undefined;
    this.extra = undefined;
  }

  private send(res: ServerResponse, code: number, body: unknown): void {
    if (res.headersSent) return void res.end();
    res.writeHead(code, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  }

  private async body(req: IncomingMessage): Promise<unknown> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    return text ? JSON.parse(text) : {};
  }

  private async handle(req: IncomingMessage, res: ServerResponse, secure = false): Promise<void> {
    let user: string | undefined;
    if (secure) {
      const token = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
      user = token ? this.opts.secure!.userOf(token) : undefined;
      if (!user) return this.send(res, 401, status(401, 'Unauthorized', 'Unauthorized'));
    }
    const url = new URL(req.url ?? '/', 'http://x');
    const path = url.pathname.replace(/\/+$/, '');
    const method = req.method ?? 'GET';
    const disc = discovery(path, this.resources());
    if (disc) return this.send(res, 200, disc);
    if (path === '/healthz' || path === '/readyz' || path === '/livez') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      return void res.end('ok');
    }
    if (path === '/version') return this.send(res, 200, { major: '1', minor: '30', gitVersion: 'v1.30.0-ferry-test' });

    // /api/v1/... or /apis/{group}/{version}/...
    const m = /^\/(?:api\/(v1)|apis\/([^/]+)\/([^/]+))(?:\/namespaces\/([^/]+))?\/([^/]+)(?:\/([^/]+))?(?:\/(status))?$/.exec(path);
    if (!m) return this.send(res, 404, status(404, 'NotFound', `the server could not find the requested resource (${path})`));
    const group = m[2] ?? '';
    const version = m[1] ?? m[3]!;
    let namespace = m[4];
    const plural = m[5]!;
    const name = m[6];
    const isStatus = m[7] === 'status';
    this.requests.push(`${method} ${plural}${name ? `/${name}` : ''}${isStatus ? '/status' : ''}`);
    const watch = url.searchParams.get('watch');
    const verb = method === 'GET' ? (name ? 'get' : watch === 'true' || watch === '1' ? 'watch' : 'list') : ({ POST: 'create', PUT: 'update', PATCH: 'patch', DELETE: 'delete' } as Record<string, string>)[method] ?? method.toLowerCase();
    const attrs = { verb, group, resource: `${plural}${isStatus ? '/status' : ''}`, namespace, name };
    const policy = user === undefined ? undefined : this.opts.secure!.policy();
    const allowed = policy?.allows(user!, attrs) ?? true;
    this.access.push({ verb, group, resource: attrs.resource, ...(namespace ? { namespace } : {}), ...(name ? { name } : {}), ...(req.headers['user-agent'] ? { userAgent: req.headers['user-agent'] } : {}), ...(policy ? { user, allowed, policy: policy.label } : {}) });
    // Authorization first, as the API server's filter chain: a forbidden request learns nothing, not even a 404.
    if (!allowed) return this.send(res, 403, status(403, 'Forbidden', RbacPolicy.forbidden(user!, attrs)));
    const def = this.resources().find((r) => r.group === group && r.version === version && r.plural === plural);
    if (!def) return this.send(res, 404, status(404, 'NotFound', `the server could not find the requested resource (${plural})`));
    if (!def.namespaced) namespace = undefined;
    const table = wantsTable(req.headers.accept);
    try {
      if (method === 'GET' && !name && (watch === 'true' || watch === '1')) return this.watch(def, namespace, url, res);
      if (method === 'GET' && !name) {
        const labelSel = url.searchParams.get('labelSelector');
        const fieldSel = url.searchParams.get('fieldSelector');
        // Page after page of one list reuses the objects in key order while nothing changed.
        const listKey = `${plural}|${namespace ?? ''}|${labelSel ?? ''}|${fieldSel ?? ''}|${this.store.resourceVersion}`;
        const all = () => {
          const items = this.store.list(plural, namespace);
          return labelSel || fieldSel ? items.filter((o) => matchesLabels(o.metadata.labels, labelSel) && matchesFields(o, fieldSel)) : items;
        };
        const page = paginate(listKey, all, url.searchParams.get('limit'), url.searchParams.get('continue'), this.store.resourceVersion, (rv) => this.store.since(plural, rv) === 'gone');
        if ('error' in page) return this.send(res, page.code, status(page.code, page.code === 410 ? 'Expired' : 'BadRequest', page.error));
        if (table) return this.send(res, 200, toTable(def, page.items, page.rv));
        return this.send(res, 200, { kind: `${def.kind}List`, apiVersion: apiVersionOf(def), metadata: page.metadata, items: page.items.map((o) => this.typed(def, o)) });
      }
      if (method === 'GET') {
        const o = this.store.get(plural, namespace, name!);
        if (!o) return this.send(res, 404, status(404, 'NotFound', `${plural} "${name}" not found`));
        if (table) return this.send(res, 200, toTable(def, [o], String(this.store.resourceVersion)));
        return this.send(res, 200, this.typed(def, o));
      }
      if (method === 'POST' && !name) {
        const obj = (await this.body(req)) as KObject;
        obj.metadata ??= {};
        if (def.namespaced) obj.metadata.namespace = obj.metadata.namespace ?? namespace ?? 'default';
        this.opts.admit?.(plural, obj, undefined);
        return this.send(res, 201, this.typed(def, this.store.create(plural, this.checked(def, this.typed(def, obj), undefined, false))));
      }
      if (method === 'PUT' && name) {
        const obj = (await this.body(req)) as KObject;
        obj.metadata = { ...obj.metadata, name, namespace };
        const have = this.store.get(plural, namespace, name);
        if (!isStatus) this.opts.admit?.(plural, obj, have);
        return this.send(res, 200, this.typed(def, this.store.update(plural, this.checked(def, this.typed(def, obj), have, isStatus), { status: isStatus })));
      }
      if (method === 'PATCH' && name) {
        const have = this.store.get(plural, namespace, name);
        if (!have) return this.send(res, 404, status(404, 'NotFound', `${plural} "${name}" not found`));
        const patch = await this.body(req);
        const ct = req.headers['content-type'] ?? '';
        if (ct.includes('json-patch+json')) return this.send(res, 415, status(415, 'UnsupportedMediaType', 'JSON patch is not supported by the test API server; use a merge patch'));
        const merged = mergePatch(structuredClone(have), patch) as KObject;
        // A resourceVersion in the patch is a precondition (409 when the object moved on).
        const precondition = (patch as { metadata?: { resourceVersion?: string } } | null)?.metadata?.resourceVersion;
        merged.metadata = { ...merged.metadata, name, namespace, resourceVersion: precondition || undefined };
        if (!isStatus) this.opts.admit?.(plural, merged, have);
        return this.send(res, 200, this.typed(def, this.store.update(plural, this.checked(def, this.typed(def, merged), have, isStatus), { status: isStatus })));
      }
      if (method === 'DELETE' && name) {
        const gone = this.store.delete(plural, namespace, name);
        return this.send(res, 200, this.typed(def, gone));
      }
      return this.send(res, 405, status(405, 'MethodNotAllowed', `${method} is not allowed here`));
    } catch (e) {
      if (e instanceof StoreError) return this.send(res, e.status, status(e.status, e.reason, e.message));
      if (e instanceof SyntaxError) return this.send(res, 400, status(400, 'BadRequest', `invalid JSON: ${e.message}`));
      throw e;
    }
  }

  /**
   * What a write may store: a CRD must be well formed; an object of a custom resource must
   * fit its schema (defaults applied, unknown fields pruned), and with the status
   * subresource the main resource cannot change status, nor the status anything else.
   */
  private checked(def: ResourceDef, obj: KObject, have: KObject | undefined, isStatus: boolean): KObject {
    if (def.plural === 'customresourcedefinitions' && def.group === 'apiextensions.k8s.io') {
      crdResources(obj);
      return obj;
    }
    if (!def.schema && !def.statusSubresource) return obj;
    let next = obj;
    if (def.statusSubresource && have) next = isStatus ? { ...have, status: obj.status } : { ...obj, status: have.status };
    else if (def.statusSubresource) {
      const { status: _ignored, ...created } = obj; // a create sets no status
      next = created as KObject;
    }
    return def.schema ? validateCustom(def, next) : next;
  }

  private typed(def: ResourceDef, o: KObject): KObject {
    return { ...o, apiVersion: apiVersionOf(def), kind: def.kind };
  }

  private watch(def: ResourceDef, namespace: string | undefined, url: URL, res: ServerResponse): void {
    const labelSel = url.searchParams.get('labelSelector');
    const fieldSel = url.searchParams.get('fieldSelector');
    const bookmarks = url.searchParams.get('allowWatchBookmarks') === 'true';
    const rvParam = url.searchParams.get('resourceVersion');
    const from = rvParam ? Number(rvParam) : this.store.resourceVersion;
    const past = this.store.since(def.plural, from);
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    // A watch ended by its timeout may close later (TLS, keep-alive): nothing is written after its end.
    const emit = (type: string, object: object) => void (res.writableEnded || res.destroyed || res.write(`${JSON.stringify({ type, object })}\n`));
    if (past === 'gone') {
      emit('ERROR', status(410, 'Expired', `too old resource version: ${from} (${this.store.resourceVersion})`));
      return void res.end();
    }
    const wanted = (o: KObject) => (!namespace || o.metadata.namespace === namespace) && matchesLabels(o.metadata.labels, labelSel) && matchesFields(o, fieldSel);
    // Without a resourceVersion a watch starts with the current state as ADDED events.
    if (!rvParam || rvParam === '0') for (const o of this.store.list(def.plural, namespace)) if (wanted(o)) emit('ADDED', this.typed(def, o));
    for (const e of past) if (wanted(e.object)) emit(e.type, this.typed(def, e.object));
    const unsubscribe = this.store.subscribe((e) => {
      if (e.resource === def.plural && wanted(e.object)) emit(e.type, this.typed(def, e.object));
    });
    const timer = bookmarks
      ? setInterval(() => emit('BOOKMARK', { kind: def.kind, apiVersion: apiVersionOf(def), metadata: { resourceVersion: String(this.store.resourceVersion) } }), BOOKMARK_INTERVAL_MS)
      : undefined;
    const timeout = Number(url.searchParams.get('timeoutSeconds') ?? 0);
    const ender = timeout > 0 ? setTimeout(() => res.end(), timeout * 1000) : undefined;
    this.watches.add(res);
    res.on('close', () => {
      unsubscribe();
      if (timer) clearInterval(timer);
      if (ender) clearTimeout(ender);
      this.watches.delete(res);
    });
  }
}
