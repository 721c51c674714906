// The operator's second, small job: status on L2AnnouncementPolicy, BGPPeer and
// BGPAdvertisement objects (announce/object-status.ts decides). Every replica watches them;
// only the leader writes, and only what changes. A kind whose CRD is missing is left alone
// (its watch retries) without holding the others back.
import type { Logger } from 'pino';
import type { Clock, Timer } from '../clock.js';
import { ANNOUNCEMENT_KINDS, CONDITION_ACCEPTED, announcementStatusFor, type AnnouncementKind, type AnnouncementObject } from '../announce/object-status.js';
import type { JsonClient } from '../k8s/client.js';
import { Watcher } from '../k8s/watcher.js';
import type { OperatorMetrics } from './metrics.js';
import { WriteQueue, type WriteResult } from './write-queue.js';

/** Changes come in bursts (an apply of several objects): one pass after them. */
const DEBOUNCE_MS = 50;
const RETRY_MS = 1_000;

/** What the cache keeps of an object: what the readers and the write need. */
const lean = (o: AnnouncementObject): AnnouncementObject => ({
  metadata: { name: o.metadata?.name, generation: o.metadata?.generation, resourceVersion: o.metadata?.resourceVersion },
  spec: o.spec,
  status: o.status,
});

export interface AnnouncementStatusOptions {
  json: JsonClient;
  log: Logger;
  clock: Clock;
  metrics: OperatorMetrics;
  leading: () => boolean;
}

export class AnnouncementStatus {
  private readonly watchers = new Map<AnnouncementKind, Watcher<AnnouncementObject>>();
  private readonly writes: WriteQueue<AnnouncementObject & { kind?: AnnouncementKind }>;
  private timer: Timer | undefined;

  constructor(private readonly o: AnnouncementStatusOptions) {
    const pathOf = new Map(ANNOUNCEMENT_KINDS.map((k) => [k.kind, k.path]));
    this.writes = new WriteQueue({
      concurrency: 2,
      write: (obj) =>
        o.json.request<AnnouncementObject>('PATCH', `${pathOf.get(obj.kind!)}/${encodeURIComponent(obj.metadata!.name!)}/status`,
          { metadata: { resourceVersion: obj.metadata?.resourceVersion }, status: obj.status }, 'application/merge-patch+json'),
      onResult: (key, result, err) => this.written(key, result, err),
      now: () => o.clock.now(),
    });
    for (const { kind, path } of ANNOUNCEMENT_KINDS) {
      const plural = path.split('/').pop()!;
      let warned = false; // a cluster without the CRD: said once, then quietly retried
      this.watchers.set(kind, new Watcher<AnnouncementObject>(plural, o.json, path, {
        onChange: (change, obj) => {
          const key = `${kind}/${obj.metadata?.name ?? ''}`;
          if (change === 'delete') this.writes.forget(key);
          else if (this.writes.echo(key, obj)) return;
          // Peers come and go: the advertisements naming them are looked at again too.
          this.kick();
        },
        onError: (err, retryInMs) => {
          o.log[warned ? 'debug' : 'warn']({ watch: plural, err: (err as Error)?.message ?? String(err), retryInMs, hint: `the ${kind} CRD: kubectl apply -f deploy/crds/` }, 'watch failed');
          warned = true;
        },
      }, { transform: lean }));
    }
  }

  start(): void {
    for (const w of this.watchers.values()) {
      w.start();
      void w.synced.then(() => this.kick());
    }
  }

  /** Ask for a pass (the leader only writes). */
  kick(delay = DEBOUNCE_MS): void {
    if (!this.o.leading() || this.timer) return;
    this.timer = this.o.clock.setTimeout(() => {
      this.timer = undefined;
      this.pass();
    }, delay);
  }

  /** Leadership lost: writes not yet started are dropped. */
  cancel(): void {
    this.writes.cancel();
  }

  /** Every object's status brought up to date; public for tests. */
  pass(): void {
    if (!this.o.leading()) return;
    const peers = this.watchers.get('BGPPeer')!;
    const peerNames = new Set(peers.list().map((p) => p.metadata?.name ?? ''));
    const now = new Date(this.o.clock.now());
    const counts = new Map<string, number>();
    for (const [kind, w] of this.watchers) {
      // An advertisement's references are judged only against a complete list of peers.
      if (!w.hasSynced || (kind === 'BGPAdvertisement' && !peers.hasSynced)) continue;
      for (const cached of w.list()) {
        const key = `${kind}/${cached.metadata?.name ?? ''}`;
        const obj = this.writes.view(key, cached);
        const status = announcementStatusFor(kind, obj, peerNames, now);
        const accepted = (status?.conditions ?? (obj.status?.conditions as Array<{ type?: string; status?: string }> | undefined) ?? []).find((c) => c.type === CONDITION_ACCEPTED)?.status === 'True';
        const label = `${kind}/${accepted}`;
        counts.set(label, (counts.get(label) ?? 0) + 1);
        if (status) this.writes.push(key, { ...obj, kind, status });
      }
    }
    this.o.metrics.announcementObjects.reset();
    for (const [label, n] of counts) {
      const [kind, accepted] = label.split('/');
      this.o.metrics.announcementObjects.set({ kind, accepted }, n);
    }
  }

  /** Writes not yet done (tests wait for zero). */
  get pendingWrites(): number {
    return this.writes.size;
  }

  async stop(): Promise<void> {
    if (this.timer) this.o.clock.clearTimeout(this.timer);
    this.timer = undefined;
    await this.writes.idle();
    await Promise.all([...this.watchers.values()].map((w) => w.stop()));
  }

  private written(key: string, result: WriteResult, err?: unknown): void {
    const kind = key.slice(0, key.indexOf('/')).toLowerCase();
    this.o.metrics.statusWrites.inc({ kind, result: result === 'superseded' ? 'written' : result });
    if (result === 'written' || result === 'gone') return;
    if (result !== 'superseded') this.o.log[result === 'conflict' ? 'debug' : 'warn']({ object: key, result, err: (err as Error)?.message }, 'status write did not land; retrying after the watch catches up');
    this.kick(result === 'superseded' ? DEBOUNCE_MS : RETRY_MS);
  }
}
