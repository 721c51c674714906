// The test API server's storage: objects by resource, a global resourceVersion, and a
// bounded history of changes so watches can resume (or get 410 Gone when too old).
import { randomUUID } from 'node:crypto';

export type KObject = {
  apiVersion?: string;
  kind?: string;
  metadata: { name?: string; generateName?: string; namespace?: string; resourceVersion?: string; uid?: string; creationTimestamp?: string; labels?: Record<string, string>; deletionTimestamp?: string; [k: string]: unknown };
  [k: string]: unknown;
};

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED';
export interface StoredEvent {
  rv: number;
  resource: string;
  type: WatchEventType;
  object: KObject;
}

export class StoreError extends Error {
  constructor(readonly status: number, readonly reason: string, message: string) {
    super(message);
  }
}

type Listener = (e: StoredEvent) => void;

/** As the API server (1.21 on) does: every namespace carries its name as a label, which
 * label selectors (a pool's namespaceSelector) can then name. */
function labelNamespace(resource: string, m: KObject['metadata']): void {
  if (resource === 'namespaces' && m.name) m.labels = { ...m.labels, 'kubernetes.io/metadata.name': m.name };
}

export class Store {
  private rv = 1;
  private readonly objects = new Map<string, Map<string, KObject>>();
  private history: StoredEvent[] = [];
  /** Events older than this resourceVersion are forgotten: watches from before get 410. */
  private oldestRv = 1;
  private readonly listeners = new Set<Listener>();

  constructor(private readonly historyLimit = 10_000) {}

  get resourceVersion(): number {
    return this.rv;
  }

  private table(resource: string): Map<string, KObject> {
    let t = this.objects.get(resource);
    if (!t) this.objects.set(resource, (t = new Map()));
    return t;
  }

  static key(namespace: string | undefined, name: string): string {
    return `${namespace ?? ''}/${name}`;
  }

  list(resource: string, namespace?: string): KObject[] {
    return [...this.table(resource).values()].filter((o) => !namespace || o.metadata.namespace === namespace);
  }

  get(resource: string, namespace: string | undefined, name: string): KObject | undefined {
    return this.table(resource).get(Store.key(namespace, name));
  }

  private record(resource: string, type: WatchEventType, object: KObject): void {
    const e: StoredEvent = { rv: this.rv, resource, type, object: structuredClone(object) };
    this.history.push(e);
    if (this.history.length > this.historyLimit) {
      const dropped = this.history.splice(0, this.history.length - this.historyLimit);
      this.oldestRv = dropped.at(-1)!.rv + 1;
    }
    for (const l of this.listeners) l(e);
  }

  create(resource: string, obj: KObject): KObject {
    const m = obj.metadata ?? (obj.metadata = {});
    if (!m.name && m.generateName) m.name = `${m.generateName}${randomUUID().slice(0, 5)}`;
    if (!m.name) throw new StoreError(422, 'Invalid', 'metadata.name: Required value');
    const t = this.table(resource);
    const k = Store.key(m.namespace, m.name);
    if (t.has(k)) throw new StoreError(409, 'AlreadyExists', `${resource} "${m.name}" already exists`);
    labelNamespace(resource, m);
    this.rv++;
    m.uid = randomUUID();
    m.creationTimestamp = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    m.resourceVersion = String(this.rv);
    t.set(k, obj);
    this.record(resource, 'ADDED', obj);
    return obj;
  }

  update(resource: string, obj: KObject, opts: { status?: boolean } = {}): KObject {
    const m = obj.metadata;
    const t = this.table(resource);
    const k = Store.key(m.namespace, m.name ?? '');
    const have = t.get(k);
    if (!have) throw new StoreError(404, 'NotFound', `${resource} "${m.name}" not found`);
    if (m.resourceVersion && m.resourceVersion !== have.metadata.resourceVersion) {
      throw new StoreError(409, 'Conflict', `Operation cannot be fulfilled on ${resource} "${m.name}": the object has been modified; please apply your changes to the latest version and try again`);
    }
    // The status subresource changes status only; the main resource everything but status.
    const next: KObject = opts.status ? { ...have, status: obj.status } : { ...obj, status: obj.status ?? have.status };
    this.rv++;
    next.metadata = { ...(opts.status ? have.metadata : obj.metadata), uid: have.metadata.uid, creationTimestamp: have.metadata.creationTimestamp, resourceVersion: String(this.rv) };
    labelNamespace(resource, next.metadata);
    t.set(k, next);
    this.record(resource, 'MODIFIED', next);
    return next;
  }

  delete(resource: string, namespace: string | undefined, name: string): KObject {
    const t = this.table(resource);
    const k = Store.key(namespace, name);
    const have = t.get(k);
    if (!have) throw new StoreError(404, 'NotFound', `${resource} "${name}" not found`);
    t.delete(k);
    this.rv++;
    const gone = { ...have, metadata: { ...have.metadata, resourceVersion: String(this.rv) } };
    this.record(resource, 'DELETED', gone);
    return gone;
  }

  /** Events after `rv` for a resource, or 'gone' if the history no longer reaches back. */
  since(resource: string, rv: number): StoredEvent[] | 'gone' {
    if (rv + 1 < this.oldestRv) return 'gone';
    return this.history.filter((e) => e.resource === resource && e.rv > rv);
  }

  /** Forget all history, as an etcd compaction would: every older watch gets 410. */
  compact(): void {
    this.history = [];
    this.oldestRv = this.rv + 1;
  }

  subscribe(l: Listener): () => void {
    this.listeners.add(l);
    return () => this.listeners.delete(l);
  }
}
