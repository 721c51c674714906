// Status writes, at most `concurrency` at a time, the latest per object winning, and a view
// of each object as last written. A watch echoes a write back some time after it returned;
// until it does, the cache holds the object as it was before, and a reconcile that read it
// would redo (or undo) the write. So the operator reads objects through `view`, which hands
// out the written version until the watch has caught up with it.

export interface Versioned {
  metadata?: { resourceVersion?: string };
}

export type WriteResult = 'written' | 'conflict' | 'gone' | 'failed';

export interface WriteQueueOptions<T> {
  write(obj: T): Promise<T>;
  concurrency: number;
  /** How long a written version shadows the cache at most (a watch that re-listed never echoes it). */
  shadowMs?: number;
  onResult?(key: string, result: WriteResult, err?: unknown): void;
  now?: () => number;
}

const httpCode = (e: unknown) => (e as { code?: number; statusCode?: number }).code ?? (e as { statusCode?: number }).statusCode;

export class WriteQueue<T extends Versioned> {
  private readonly pending = new Map<string, { obj: T; onWritten: (() => void) | undefined }>();
  private readonly written = new Map<string, { obj: T; at: number }>();
  private inFlight = 0;
  private generation = 0;
  private idleWaiters: Array<() => void> = [];
  private readonly now: () => number;

  constructor(private readonly o: WriteQueueOptions<T>) {
    this.now = o.now ?? Date.now;
  }

  /** Write `obj` (replacing a write of the same key not yet started); then `onWritten`. */
  push(key: string, obj: T, onWritten?: () => void): void {
    this.pending.set(key, { obj, onWritten });
    this.pump();
  }

  get size(): number {
    return this.pending.size + this.inFlight;
  }

  /** The object as this queue last wrote it, if the cache has not caught up yet; else `cached`. */
  view(key: string, cached: T): T {
    const w = this.written.get(key);
    if (!w) return cached;
    if (cached.metadata?.resourceVersion === w.obj.metadata?.resourceVersion || this.now() - w.at > (this.o.shadowMs ?? 30_000)) {
      this.written.delete(key);
      return cached;
    }
    return w.obj;
  }

  /** A watch event for `key`: true when it is the echo of this queue's own last write. */
  echo(key: string, obj: T): boolean {
    const w = this.written.get(key);
    if (!w || w.obj.metadata?.resourceVersion !== obj.metadata?.resourceVersion) return false;
    this.written.delete(key);
    return true;
  }

  /** The object is gone: forget what was written for it. */
  forget(key: string): void {
    this.written.delete(key);
    this.pending.delete(key);
  }

  /** Drop every write not yet started (a leader stepping down); those in flight finish. */
  cancel(): void {
    this.pending.clear();
    this.written.clear();
    this.generation++;
  }

  idle(): Promise<void> {
    if (this.size === 0) return Promise.resolve();
    return new Promise((r) => this.idleWaiters.push(r));
  }

  private pump(): void {
    while (this.inFlight < this.o.concurrency && this.pending.size > 0) {
      const [key, { obj, onWritten }] = this.pending.entries().next().value as [string, { obj: T; onWritten: (() => void) | undefined }];
      this.pending.delete(key);
      this.inFlight++;
      const generation = this.generation;
      this.o.write(obj).then(
        (result) => {
          if (generation === this.generation) this.written.set(key, { obj: result, at: this.now() });
          this.o.onResult?.(key, 'written');
          onWritten?.();
        },
        (e: unknown) => {
          const code = httpCode(e);
          this.o.onResult?.(key, code === 409 ? 'conflict' : code === 404 ? 'gone' : 'failed', e);
        },
      ).finally(() => {
        this.inFlight--;
        this.pump();
        if (this.size === 0) for (const w of this.idleWaiters.splice(0)) w();
      });
    }
  }
}
