// Kubernetes Events, so `kubectl describe` shows what ferry did with an object and why.
import type { ApiAccess } from './access.js';
import { JsonClient } from './client.js';

export interface EventObject {
  kind: string;
  namespace: string;
  name: string;
  apiVersion?: string;
  /** kubectl describe finds an object's Events by its uid too: without it they do not show. */
  uid?: string;
}

export interface EventSink {
  warn(obj: EventObject, reason: string, message: string): Promise<void>;
  normal(obj: EventObject, reason: string, message: string): Promise<void>;
}

export function eventSink(access: ApiAccess, component: string, nodeName: string): EventSink {
  const api = new JsonClient(access);
  const post = async (obj: EventObject, type: 'Normal' | 'Warning', reason: string, message: string) => {
    const now = new Date().toISOString();
    const namespace = obj.namespace || 'default';
    await api.request('POST', `/api/v1/namespaces/${encodeURIComponent(namespace)}/events`, {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { generateName: `${obj.name || 'unnamed'}.`, namespace },
      involvedObject: { kind: obj.kind, namespace: obj.namespace, name: obj.name, apiVersion: obj.apiVersion ?? (obj.kind === 'EndpointSlice' ? 'discovery.k8s.io/v1' : 'v1'), ...(obj.uid ? { uid: obj.uid } : {}) },
      reason,
      message,
      type,
      source: { component, host: nodeName },
      reportingComponent: component,
      reportingInstance: nodeName,
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
    });
  };
  return {
    warn: (obj, reason, message) => post(obj, 'Warning', reason, message),
    normal: (obj, reason, message) => post(obj, 'Normal', reason, message),
  };
}

export interface EventQueueOptions {
  /** Events waiting at most; beyond that new ones are dropped (and counted). */
  max: number;
  concurrency: number;
  /** Hold the queue while this is true (status writes first); resume() when it turns false. */
  holdWhile?(): boolean;
  onDropped(): void;
  onError(e: unknown): void;
}

/**
 * Events in the background, bounded: a burst (10k Services allocated at once) must neither
 * hold up status writes nor grow memory without end. Events are a courtesy to humans; the
 * Service's condition is the record.
 */
export class EventQueue {
  private readonly waiting: Array<() => Promise<void>> = [];
  private running = 0;

  constructor(private readonly sink: EventSink, private readonly o: EventQueueOptions) {}

  post(obj: EventObject, type: 'Normal' | 'Warning', reason: string, message: string): void {
    if (this.waiting.length >= this.o.max) {
      this.o.onDropped();
      return;
    }
    this.waiting.push(() => (type === 'Warning' ? this.sink.warn(obj, reason, message) : this.sink.normal(obj, reason, message)));
    this.pump();
  }

  get size(): number {
    return this.waiting.length + this.running;
  }

  /** Send what waits, if nothing holds the queue. */
  resume(): void {
    this.pump();
  }

  private pump(): void {
    while (this.running < this.o.concurrency && this.waiting.length > 0 && !this.o.holdWhile?.()) {
      const send = this.waiting.shift()!;
      this.running++;
      send().catch((e: unknown) => this.o.onError(e)).finally(() => {
        this.running--;
        this.pump();
      });
    }
  }
}

/** Events through a bounded queue (1000 waiting, 4 at a time): the rest are dropped, and
 * drops and failed posts told to `debug`. */
export function boundedEventSink(sink: EventSink, debug: (msg: string, err?: unknown) => void): EventSink {
  const q = new EventQueue(sink, { max: 1000, concurrency: 4, onDropped: () => debug('an Event was dropped: too many waiting'), onError: (e) => debug('could not post an event', e) });
  return {
    warn: async (obj, reason, message) => q.post(obj, 'Warning', reason, message),
    normal: async (obj, reason, message) => q.post(obj, 'Normal', reason, message),
  };
}

/**
 * Warning Events about problems that last (a peer or policy a node leaves out): each told
 * once while it lasts, and again if it comes back. Call `warn` for every problem seen in a
 * pass, then `passDone`.
 */
export class LastingWarnings {
  private told = new Set<string>();
  private seen = new Set<string>();

  constructor(private readonly sink: EventSink | undefined, private readonly onError: (err: unknown) => void) {}

  warn(obj: EventObject, reason: string, message: string): void {
    const key = `${obj.kind}/${obj.name}\0${reason}\0${message}`;
    this.seen.add(key);
    if (this.told.has(key) || !this.sink) return;
    this.sink.warn(obj, reason, message).catch(this.onError);
  }

  /** Problems not seen in this pass are over. */
  passDone(): void {
    this.told = this.seen;
    this.seen = new Set();
  }
}
