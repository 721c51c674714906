// Leader election on a manual clock against an in-memory Lease store with compare-and-swap
// (as the API server's resourceVersion gives): one leader at a time, takeover after a crash
// within lease duration + retry period, at once after a clean stop, and a leader that
// cannot renew steps down before another may take over.
import type { V1Lease } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { LeaderElector, type LeaseApi } from '../../src/k8s/leader.js';
import { ManualClock } from '../harness/manual-clock.js';

class LeaseStore implements LeaseApi {
  lease: V1Lease | undefined;
  rv = 0;
  down = false;
  private check(): void {
    if (this.down) throw Object.assign(new Error('connection refused'), { code: 503 });
  }
  async read(): Promise<V1Lease | undefined> {
    this.check();
    return this.lease && structuredClone(this.lease);
  }
  async create(_ns: string, l: V1Lease): Promise<V1Lease> {
    this.check();
    if (this.lease) throw Object.assign(new Error('exists'), { code: 409 });
    this.lease = { ...l, metadata: { ...l.metadata, resourceVersion: String(++this.rv) } };
    return this.lease;
  }
  async replace(_ns: string, _name: string, l: V1Lease): Promise<V1Lease> {
    this.check();
    if (l.metadata?.resourceVersion !== this.lease?.metadata?.resourceVersion) throw Object.assign(new Error('conflict'), { code: 409 });
    this.lease = { ...l, metadata: { ...l.metadata, resourceVersion: String(++this.rv) } };
    return this.lease;
  }
}

function candidate(store: LeaseApi, clock: ManualClock, identity: string, log: string[]) {
  return new LeaderElector(store, {
    namespace: 'kube-system', name: 'ferry-operator', identity,
    leaseDurationSeconds: 10, renewDeadlineSeconds: 7, retryPeriodSeconds: 2, clock,
    onStartedLeading: () => log.push(`${identity} leads at ${clock.now() - START}`),
    onStoppedLeading: () => log.push(`${identity} stops at ${clock.now() - START}`),
  });
}
const START = 1_700_000_000_000;

describe('leader election', () => {
  it('one leader; the other takes over within lease + retry after the leader dies, never both at once', async () => {
    const clock = new ManualClock(START);
    const store = new LeaseStore();
    const log: string[] = [];
    let aDead = false;
    const dead = () => Promise.reject(new Error('dead'));
    const cut = (): LeaseApi => ({
      read: (ns, name) => (aDead ? dead() : store.read()),
      create: (ns, l) => (aDead ? dead() : store.create(ns, l)),
      replace: (ns, name, l) => (aDead ? dead() : store.replace(ns, name, l)),
    });
    const a = candidate(cut(), clock, 'a', log);
    const b = candidate(store, clock, 'b', log);
    a.start();
    await clock.advance(0);
    b.start();
    await clock.advance(30_001);
    expect(log).toEqual(['a leads at 0']);
    expect(a.isLeader && !b.isLeader).toBe(true);
    // a dies without a word: from now on none of its calls reach the API server.
    aDead = true;
    const died = clock.now() - START;
    for (let t = 0; t < 20_000 && !b.isLeader; t += 500) await clock.advance(500);
    expect(b.isLeader).toBe(true);
    const took = Number(/b leads at (\d+)/.exec(log.join(' '))![1]) - died;
    // Seen renewed at most one retry period after it last did, then one lease duration.
    expect(took).toBeLessThanOrEqual(10_000 + 2_000);
    expect(took).toBeGreaterThanOrEqual(8_000); // not before the lease could have expired
    expect(a.isLeader).toBe(false); // it stepped down on its own (renew deadline)...
    const aStopped = Number(/a stops at (\d+)/.exec(log.join(' '))![1]);
    expect(aStopped).toBeLessThan(died + took); // ...before b took over: never two leaders
    expect(store.lease?.spec?.leaseTransitions).toBe(1);
  });

  it('a clean stop gives the lease up: the other leads at its next try', async () => {
    const clock = new ManualClock(START);
    const store = new LeaseStore();
    const log: string[] = [];
    const a = candidate(store, clock, 'a', log);
    const b = candidate(store, clock, 'b', log);
    a.start();
    await clock.advance(0);
    b.start();
    await clock.advance(5_000);
    await a.stop();
    await clock.advance(2_000);
    expect(log).toEqual(['a leads at 0', 'a stops at 5000', 'b leads at 6000']);
  });

  it('a leader that cannot renew steps down after the renew deadline, before the lease expires', async () => {
    const clock = new ManualClock(START);
    const store = new LeaseStore();
    const log: string[] = [];
    const a = candidate(store, clock, 'a', log);
    a.start();
    await clock.advance(4_000);
    store.down = true;
    await clock.advance(12_000);
    expect(a.isLeader).toBe(false);
    const stopped = Number(/a stops at (\d+)/.exec(log.join(' '))![1]);
    expect(stopped).toBeGreaterThan(4_000 + 7_000 - 1);
    expect(stopped).toBeLessThan(4_000 + 10_000); // the lease (renewed at 4 s) is still its own
    store.down = false;
    await clock.advance(2_000);
    expect(a.isLeader).toBe(true); // its own lease, not expired for anyone: it resumes
  });

  it('a stale lease held by a dead candidate is taken only after the full lease duration on the taker\'s clock', async () => {
    const clock = new ManualClock(START);
    const store = new LeaseStore();
    // Renewed "long ago" by a clock far ahead: the taker must not trust that timestamp.
    store.lease = { metadata: { name: 'ferry-operator', namespace: 'kube-system', resourceVersion: '1' }, spec: { holderIdentity: 'ghost', leaseDurationSeconds: 10, renewTime: new Date(START + 3_600_000) as never } };
    const log: string[] = [];
    candidate(store, clock, 'b', log).start();
    await clock.advance(0);
    await clock.advance(9_000);
    expect(log).toEqual([]);
    await clock.advance(4_000);
    expect(log).toEqual(['b leads at 10000']);
  });
});
