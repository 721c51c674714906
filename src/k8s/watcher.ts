// A watched collection, ferry's own list/watch over plain JSON: a cache keyed by
// namespace/name holding only what `transform` keeps (never managedFields or the
// last-applied annotation), a "synced" promise that resolves only after the first full
// list is in the cache (never act on a partial cache), lists in pages (`limit`/`continue`,
// as a large cluster's API server expects), watches that end after a timeout and are
// opened again from the last resourceVersion (a silent connection is dropped after the
// timeout plus a margin, so a half-open one is noticed within a minute), a fresh list on
// 410 Gone, and backoff on any other error.
import { flat } from '../model/flat-string.js';
import { ApiStatusError, type JsonClient } from './client.js';

export const BACKOFF_INITIAL_MS = 200;
/**
 * Short, so that a node converges within about 2 s of the API server's return however long
 * it was away (kube-proxy has no such bound). Each wait is jittered down to half, which
 * spreads the reconnects of many nodes; a refused connection costs the server little.
 */
export const BACKOFF_MAX_MS = 1_500;
const PAGE_SIZE = 500;
/** Watches ask the server to end them after a random time in this range (seconds). */
const WATCH_TIMEOUT_S: [number, number] = [20, 40];
/** A watch that has sent nothing for its timeout plus this long is taken for dead. */
const SILENCE_MARGIN_MS = 10_000;

export interface WatcherEvents<T> {
  /** Called for every add, update and delete after the cache changed (and is complete). */
  onChange(kind: 'add' | 'update' | 'delete', obj: T): void;
  onError(err: unknown, retryInMs: number): void;
}

export interface WatcherOptions<T> {
  labelSelector?: string;
  fieldSelector?: string;
  /** What the cache keeps of an object (after managedFields and last-applied are dropped). */
  transform?: (o: T) => T;
  pageSize?: number;
  /** Tests: a shorter watch timeout range (seconds), and silence margin (ms). */
  watchTimeoutSeconds?: [number, number];
  silenceMarginMs?: number;
}

interface Meta {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string; managedFields?: unknown; annotations?: Record<string, string> };
}
interface ListPage<T> {
  items?: T[];
  metadata?: { resourceVersion?: string; continue?: string };
}

const LAST_APPLIED = 'kubectl.kubernetes.io/last-applied-configuration';
const keyOf = (o: Meta) => flat(`${o.metadata?.namespace ?? ''}/${o.metadata?.name ?? ''}`);

/** Drop what no ferry code reads and what costs the most memory in a real cluster. */
function strip<T>(o: T): T {
  const m = (o as Meta).metadata;
  if (m) {
    delete m.managedFields;
    if (m.annotations && LAST_APPLIED in m.annotations) delete m.annotations[LAST_APPLIED];
  }
  return o;
}

class Expired extends Error {}

export class Watcher<T extends object> {
  private cache = new Map<string, T>();
  private rv = '';
  private backoff = BACKOFF_INITIAL_MS;
  private stopped = false;
  private readonly abort = new AbortController();
  private running: Promise<void> | undefined;
  private resolveSynced!: () => void;
  readonly synced: Promise<void>;
  private isSynced = false;
  /** Lists and watches opened, for tests and the bench. */
  readonly stats = { lists: 0, pages: 0, watches: 0 };

  constructor(
    readonly name: string,
    private readonly client: JsonClient,
    private readonly path: string,
    private readonly events: WatcherEvents<T>,
    private readonly opts: WatcherOptions<T> = {},
  ) {
    this.synced = new Promise((r) => (this.resolveSynced = r));
  }

  start(): void {
    this.running ??= this.loop();
  }

  list(): T[] {
    return [...this.cache.values()];
  }

  get(namespace: string | undefined, name: string): T | undefined {
    return this.cache.get(`${namespace ?? ''}/${name}`);
  }

  get size(): number {
    return this.cache.size;
  }

  get hasSynced(): boolean {
    return this.isSynced;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.abort.abort();
    await this.running;
  }

  private keep(o: T): T {
    const s = strip(o);
    return this.opts.transform ? this.opts.transform(s) : s;
  }

  private query(extra: Record<string, string>): string {
    const q = new URLSearchParams(extra);
    if (this.opts.labelSelector) q.set('labelSelector', this.opts.labelSelector);
    if (this.opts.fieldSelector) q.set('fieldSelector', this.opts.fieldSelector);
    return `${this.path}${this.path.includes('?') ? '&' : '?'}${q}`;
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      try {
        if (!this.rv) await this.relist();
        await this.watchOnce();
        this.backoff = BACKOFF_INITIAL_MS;
      } catch (err) {
        if (this.stopped) return;
        if (err instanceof Expired || (err instanceof ApiStatusError && err.code === 410)) {
          this.rv = ''; // too old: list again at once
          continue;
        }
        const wait = Math.round(this.backoff * (0.5 + Math.random() / 2));
        this.backoff = Math.min(this.backoff * 2, BACKOFF_MAX_MS);
        this.events.onError(err, wait);
        await this.sleep(wait);
      }
    }
  }

  /** A backoff wait that stop() cuts short (and that leaves no listener behind on a long outage). */
  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(t);
        this.abort.signal.removeEventListener('abort', wake);
        resolve();
      };
      const t = setTimeout(wake, ms);
      this.abort.signal.addEventListener('abort', wake, { once: true });
    });
  }

  /** Every page, then the cache swapped whole and the differences told. */
  private async relist(): Promise<void> {
    this.stats.lists++;
    const fresh = new Map<string, T>();
    let token = '';
    let rv = '';
    do {
      const page = await this.client.request<ListPage<T>>('GET', this.query({ limit: String(this.opts.pageSize ?? PAGE_SIZE), ...(token ? { continue: token } : {}) }));
      this.stats.pages++;
      for (const o of page.items ?? []) fresh.set(keyOf(o as Meta), this.keep(o));
      token = page.metadata?.continue ?? '';
      rv = page.metadata?.resourceVersion ?? rv;
      if (this.stopped) return;
    } while (token);
    const old = this.cache;
    this.cache = fresh;
    this.rv = rv;
    for (const [k, o] of old) if (!fresh.has(k)) this.events.onChange('delete', o);
    for (const [k, o] of fresh) {
      const before = old.get(k);
      if (!before) this.events.onChange('add', o);
      else if ((before as Meta).metadata?.resourceVersion !== (o as Meta).metadata?.resourceVersion) this.events.onChange('update', o);
    }
    if (!this.isSynced) {
      this.isSynced = true;
      this.resolveSynced();
    }
  }

  /** One watch from the cache's resourceVersion, until the server ends it. */
  private async watchOnce(): Promise<void> {
    if (this.stopped) return;
    this.stats.watches++;
    const [lo, hi] = this.opts.watchTimeoutSeconds ?? WATCH_TIMEOUT_S;
    const timeout = lo + Math.floor(Math.random() * Math.max(1, hi - lo));
    const ctl = new AbortController();
    const onStop = () => ctl.abort();
    this.abort.signal.addEventListener('abort', onStop, { once: true });
    const margin = this.opts.silenceMarginMs ?? SILENCE_MARGIN_MS;
    let silence: NodeJS.Timeout | undefined;
    let expired = false;
    let silent = false;
    const alive = () => {
      if (silence) clearTimeout(silence);
      silence = setTimeout(() => {
        silent = true;
        ctl.abort();
      }, timeout * 1000 + margin);
    };
    alive();
    try {
      await this.client.watch(this.query({ watch: '1', resourceVersion: this.rv, allowWatchBookmarks: 'true', timeoutSeconds: String(timeout) }), (e) => {
        alive();
        const o = e.object as T & Meta & { code?: number };
        if (e.type === 'ERROR') {
          if (o.code === 410) expired = true;
          ctl.abort();
          return;
        }
        const rv = o.metadata?.resourceVersion;
        if (e.type === 'BOOKMARK') {
          if (rv) this.rv = rv;
          return;
        }
        const k = keyOf(o);
        if (e.type === 'DELETED') {
          const had = this.cache.get(k);
          this.cache.delete(k);
          if (rv) this.rv = rv;
          if (had) this.events.onChange('delete', this.keep(o));
          return;
        }
        if (e.type !== 'ADDED' && e.type !== 'MODIFIED') return;
        const before = this.cache.get(k) as Meta | undefined;
        if (rv) this.rv = rv;
        if (before && before.metadata?.resourceVersion === rv) return;
        const kept = this.keep(o);
        this.cache.set(k, kept);
        this.events.onChange(before ? 'update' : 'add', kept);
      }, ctl.signal);
    } catch (err) {
      if (expired) throw new Expired(`watch ${this.name}: resourceVersion ${this.rv} expired`);
      if (this.stopped) return;
      if (silent) throw new Error(`watch ${this.name}: nothing from the server for ${timeout} s + ${margin / 1000} s (a dead connection?); watching again`);
      throw err;
    } finally {
      if (silence) clearTimeout(silence);
      this.abort.signal.removeEventListener('abort', onStop);
    }
    if (expired) throw new Expired(`watch ${this.name}: resourceVersion ${this.rv} expired`);
  }
}
