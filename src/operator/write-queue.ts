// Status writes, at most `concurrency` at a time, the latest per object winning, and a view
// of each object as it will be once the writes land. A watch echoes a write back some time
// after it returned; until it does, the cache holds the object as it was before, and a pass
// that read it would redo the write (a second PUT, then a conflict). So the operator reads
// objects through `view`: the object waiting or in flight, else the one last written until
// the watch has caught up with it, else the cache's.

export interface Versioned {
  metadata?: { resourceVersion?: string };
}

/** superseded: written, but the watch brought a newer version while the write was on its way. */
export type WriteResult = 'written' | 'superseded' | 'conflict' | 'gone' | 'failed';

export interface WriteQueueOptions<T> {
  write(obj: T): Promise<T>;
  concurrency: number;
  /** How long a written version shadows the cache at most (a watch that re-listed never echoes it). */
  shadowMs?: number;
  onResult?(key: string, result: WriteResult, err?: unknown): void;
  /** Nothing waits or flies any more. */
  onIdle?(): void;
  now?: () => number;
}

const httpCode = (e: unknown) => (e as { code?: number; statusCode?: number }).code ?? (e as { statusCode?: number }).statusCode;

export class WriteQueue<T extends Versioned> {
  private readonly pending = new Map<string, { obj: T; onWritten: (() => void) | undefined }>();
  private readonly flying = new Map<string, T>();
  /** The last resourceVersion the watch brought for a key while its write was in flight. */
  private readonly seenWhileFlying = new Map<string, string | undefined>();
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

  /** The object as it will be: waiting or in flight, else as last written until the cache has it, else `cached`. */
  view(key: string, cached: T): T {
    const next = this.pending.get(key)?.obj ?? this.flying.get(key);
    if (next) return next;
    const w = this.written.get(key);
    if (!w) return cached;
    if (cached.metadata?.resourceVersion === w.obj.metadata?.resourceVersion || this.now() - w.at > (this.o.shadowMs ?? 30_000)) {
      this.written.delete(key);
      return cached;
    }
    return w.obj;
  }

  /**
   * A watch event for `key`: true when it needs no pass, being the echo of this queue's own
   * write. While a write is in flight its echo may come before the response: the event is
   * noted, and the write's result decides (a newer version seen means 'superseded').
   */
  echo(key: string, obj: T): boolean {
    if (this.flying.has(key)) {
      this.seenWhileFlying.set(key, obj.metadata?.resourceVersion);
      return true;
    }
    const w = this.written.get(key);
    if (!w || w.obj.metadata?.resourceVersion !== obj.metadata?.resourceVersion) return false;
    this.written.delete(key);
    return true;
  }

  /** The object is gone: forget what was written for it. */
  forget(key: string): void {
    this.written.delete(key);
    this.pending.delete(key);
    this.seenWhileFlying.delete(key);
  }

  /** Drop every write not yet started (a leader stepping down); those in flight finish. */
  cancel(): void {
    this.pending.clear();
    this.flying.clear();
    this.seenWhileFlying.clear();
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
      this.flying.set(key, obj);
      this.inFlight++;
      const generation = this.generation;
      this.o.write(obj).then(
        (result) => {
          const seen = this.seenWhileFlying.has(key);
          const last = this.seenWhileFlying.get(key);
          this.seenWhileFlying.delete(key);
          const rv = result.metadata?.resourceVersion;
          // Echo still to come: shadow the cache until it does. Echo already in the cache:
          // nothing to shadow. Something newer already in the cache: a pass must look.
          if (!seen && generation === this.generation) this.written.set(key, { obj: result, at: this.now() });
          this.o.onResult?.(key, seen && last !== rv ? 'superseded' : 'written');
          onWritten?.();
        },
        (e: unknown) => {
          this.seenWhileFlying.delete(key);
          const code = httpCode(e);
          this.o.onResult?.(key, code === 409 ? 'conflict' : code === 404 ? 'gone' : 'failed', e);
        },
      ).finally(() => {
        if (this.flying.get(key) === obj) this.flying.delete(key);
        this.inFlight--;
        this.pump();
        if (this.size === 0) {
          for (const w of this.idleWaiters.splice(0)) w();
          this.o.onIdle?.();
        }
      });
    }
  }
}
