// A watched collection on top of @kubernetes/client-node's ListWatch: a cache, a "synced"
// promise that resolves only after the first full list is in the cache (never act on a
// partial cache), re-list on 410 Gone (ListWatch does that), and restart with backoff on
// any other error (ListWatch stops there).
import { ListWatch, Watch, type KubeConfig, type KubernetesObject } from '@kubernetes/client-node';

export const BACKOFF_INITIAL_MS = 200;
export const BACKOFF_MAX_MS = 10_000;

export interface WatcherEvents<T> {
  /** Called for every add, update and delete after the cache changed. */
  onChange(kind: 'add' | 'update' | 'delete', obj: T): void;
  onError(err: unknown, retryInMs: number): void;
}

export class Watcher<T extends KubernetesObject> {
  private readonly lw: ListWatch<T>;
  private backoff = BACKOFF_INITIAL_MS;
  private stopped = false;
  private timer: NodeJS.Timeout | undefined;
  private resolveSynced!: () => void;
  readonly synced: Promise<void>;
  private isSynced = false;

  constructor(
    readonly name: string,
    kc: KubeConfig,
    path: string,
    list: () => Promise<{ items: T[]; metadata?: { resourceVersion?: string } }>,
    events: WatcherEvents<T>,
    opts: { labelSelector?: string; fieldSelector?: string } = {},
  ) {
    this.synced = new Promise((r) => (this.resolveSynced = r));
    const listFn = async () => {
      const l = await list();
      this.backoff = BACKOFF_INITIAL_MS;
      // ListWatch fills its cache right after this promise settles, before any timer runs.
      if (!this.isSynced) {
        setImmediate(() => {
          this.isSynced = true;
          this.resolveSynced();
        });
      }
      return l as never;
    };
    this.lw = new ListWatch<T>(path, new Watch(kc), listFn, false, opts.labelSelector, opts.fieldSelector);
    this.lw.on('add', (o: T) => events.onChange('add', o));
    this.lw.on('update', (o: T) => events.onChange('update', o));
    this.lw.on('delete', (o: T) => events.onChange('delete', o));
    this.lw.on('error', (err: unknown) => {
      if (this.stopped) return;
      const wait = this.backoff;
      this.backoff = Math.min(this.backoff * 2, BACKOFF_MAX_MS);
      events.onError(err, wait);
      this.timer = setTimeout(() => {
        if (!this.stopped) void this.lw.start();
      }, wait);
    });
  }

  start(): void {
    void this.lw.start();
  }

  list(): readonly T[] {
    return this.lw.list();
  }

  get(namespace: string | undefined, name: string): T | undefined {
    return this.lw.get(name, namespace);
  }

  get hasSynced(): boolean {
    return this.isSynced;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.lw.stop();
  }
}
