// Leader election through a coordination.k8s.io Lease, as client-go does it: the holder
// renews the lease every retry period; a candidate takes it once it has seen it unchanged
// for the lease duration (measured on its own clock, so clock skew between nodes does not
// matter), or at once when the holder gave it up (on a clean stop). A leader that cannot
// renew within the renew deadline steps down before anyone else may take over.
import { CoordinationV1Api, V1MicroTime, type KubeConfig, type V1Lease } from '@kubernetes/client-node';
import { apiClient } from './kubeconfig-client.js';
import { systemClock, type Clock, type Timer } from '../clock.js';

export interface LeaderOptions {
  namespace: string;
  name: string;
  identity: string;
  /** How long a lease stays the holder's without a renewal. */
  leaseDurationSeconds: number;
  /** A leader that has not renewed for this long steps down (< lease duration). */
  renewDeadlineSeconds: number;
  /** How often to try to acquire or renew. */
  retryPeriodSeconds: number;
  onStartedLeading(): void;
  onStoppedLeading(): void;
  onError?(e: unknown): void;
  clock?: Clock;
}

/** The Lease API the elector needs (CoordinationV1Api's, or a test double). */
export interface LeaseApi {
  read(namespace: string, name: string): Promise<V1Lease | undefined>;
  create(namespace: string, lease: V1Lease): Promise<V1Lease>;
  replace(namespace: string, name: string, lease: V1Lease): Promise<V1Lease>;
}

export function leaseApi(kc: KubeConfig): LeaseApi {
  const api = apiClient(kc, CoordinationV1Api);
  return {
    read: async (namespace, name) => {
      try {
        return await api.readNamespacedLease({ namespace, name });
      } catch (e) {
        if ((e as { code?: number }).code === 404) return undefined;
        throw e;
      }
    },
    create: (namespace, body) => api.createNamespacedLease({ namespace, body }),
    replace: (namespace, name, body) => api.replaceNamespacedLease({ namespace, name, body }),
  };
}

const micro = (ms: number) => new V1MicroTime(ms);

export class LeaderElector {
  private timer: Timer | undefined;
  private leading = false;
  private lastRenew = 0;
  private stopped = false;
  /** The lease record as last seen, and when (on this clock). */
  private observed: { record: string; at: number } | undefined;
  private readonly clock: Clock;

  constructor(private readonly api: LeaseApi, private readonly o: LeaderOptions) {
    this.clock = o.clock ?? systemClock;
  }

  get isLeader(): boolean {
    return this.leading;
  }

  start(): void {
    void this.tick();
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = this.clock.setTimeout(() => void this.tick(), this.o.retryPeriodSeconds * 1000);
    this.timer.unref?.();
  }

  private async tick(): Promise<void> {
    try {
      const held = await this.tryAcquireOrRenew();
      if (held) this.lastRenew = this.clock.now();
      if (held && !this.leading) {
        this.leading = true;
        this.o.onStartedLeading();
      } else if (!held && this.leading) this.stepDown();
    } catch (e) {
      this.o.onError?.(e);
    }
    // No renewal within the deadline: another may take over soon, so stop acting now.
    if (this.leading && this.clock.now() - this.lastRenew > this.o.renewDeadlineSeconds * 1000) this.stepDown();
    this.schedule();
  }

  private stepDown(): void {
    this.leading = false;
    this.o.onStoppedLeading();
  }

  private spec(now: number, acquired: number) {
    return { holderIdentity: this.o.identity, leaseDurationSeconds: this.o.leaseDurationSeconds, acquireTime: micro(acquired), renewTime: micro(now), leaseTransitions: 0 };
  }

  /** One round: true when this candidate holds the lease afterwards. */
  private async tryAcquireOrRenew(): Promise<boolean> {
    const now = this.clock.now();
    const lease = await this.api.read(this.o.namespace, this.o.name);
    if (!lease) {
      await this.api.create(this.o.namespace, { metadata: { name: this.o.name, namespace: this.o.namespace }, spec: this.spec(now, now) });
      return true;
    }
    const spec = lease.spec ?? {};
    const mine = spec.holderIdentity === this.o.identity;
    const record = `${spec.holderIdentity ?? ''} ${spec.renewTime ? new Date(spec.renewTime).getTime() : 0}`;
    if (this.observed?.record !== record) this.observed = { record, at: now };
    const expired = !spec.holderIdentity || this.observed.at + (spec.leaseDurationSeconds ?? this.o.leaseDurationSeconds) * 1000 <= now;
    if (!mine && !expired) return false;
    const acquired = mine && spec.acquireTime ? new Date(spec.acquireTime).getTime() : now;
    const transitions = (spec.leaseTransitions ?? 0) + (mine ? 0 : 1);
    // resourceVersion makes this a compare-and-swap: two candidates cannot both win.
    await this.api.replace(this.o.namespace, this.o.name, { ...lease, spec: { ...this.spec(now, acquired), leaseTransitions: transitions } });
    return true;
  }

  /** Stop campaigning; a leader gives the lease up so another takes over at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) this.clock.clearTimeout(this.timer);
    if (!this.leading) return;
    this.stepDown();
    try {
      const lease = await this.api.read(this.o.namespace, this.o.name);
      if (lease?.spec?.holderIdentity === this.o.identity) {
        await this.api.replace(this.o.namespace, this.o.name, { ...lease, spec: { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1 } });
      }
    } catch (e) {
      this.o.onError?.(e);
    }
  }
}
