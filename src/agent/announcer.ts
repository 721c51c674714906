// L2 announcements on this node: every pass works out what is announced and by whom
// (announce/), answers ARP for the addresses this node owns (the l2_owned map, refreshed
// with an expiry on every pass), announces a takeover with gratuitous ARPs, and says so
// in an Event on each Service of the address. The heartbeat Lease is renewed every renew
// interval while some policy selects this node; it carries this node's devices and
// claims. A node that cannot renew for a lease duration lets its addresses go (another
// will have taken them); a node that stops cleanly holds them for the stop hold, so a
// restart moves nothing.
import type { V1EndpointSlice, V1Lease, V1Node, V1Service } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { announcements, type Announcement } from '../announce/announcements.js';
import { elect } from '../announce/election.js';
import { HeartbeatView } from '../announce/heartbeats.js';
import { parseL2Policy, policyDevices, policyMissesDevices, type L2Policy, type L2PolicyObject } from '../announce/policy.js';
import { systemClock, type Clock, type Timer } from '../clock.js';
import type { L2Announcement } from '../datapath/l2-announcements.js';
import { LastingWarnings, type EventSink } from '../k8s/events.js';
import { gratuitousArp } from '../packet/build.js';
import type { InterfaceInfo } from '../sys/interfaces.js';
import type { HeartbeatSink } from './heartbeat-writer.js';
import type { AgentMetrics } from './metrics.js';

/** Gratuitous ARPs after a takeover, ms after it: routers with a 1 s locktime still update. */
export const GARP_SCHEDULE_MS = [0, 500, 1000, 2000, 4000];

export interface AnnouncerSource {
  services(): readonly V1Service[];
  service?(namespace: string, name: string): V1Service | undefined;
  slices(): readonly V1EndpointSlice[];
  nodes(): readonly V1Node[];
  policies(): readonly L2PolicyObject[];
  /** False until the policies and heartbeat Leases are listed completely. */
  synced(): boolean;
}

export interface AnnouncerDeps {
  nodeName: string;
  /** The agent's devices now (they change with hotplug): where its tc programs run, so where ARP can be answered. */
  devices(): readonly InterfaceInfo[];
  source: AnnouncerSource;
  heartbeat: HeartbeatSink;
  l2: { apply(wanted: readonly L2Announcement[], validMs: number): { leftOut: L2Announcement[] } };
  sendFrames(ifindex: number, frames: readonly Buffer[]): void;
  events?: EventSink;
  metrics: AgentMetrics;
  log: Logger;
  leaseDurationMs: number;
  renewIntervalMs: number;
  stopHoldMs: number;
  clock?: Clock;
}

export interface OwnedAddress {
  address: string;
  services: string[];
  devices: string[];
  since: string;
}

/** adopted: taken back from this node's own heartbeat after a restart (its Services not known yet). */
type Owned = { a: Announcement; devices: string[]; since: number; adopted?: boolean };

export class Announcer {
  private readonly clock: Clock;
  private readonly view = new HeartbeatView();
  private owned = new Map<string, Owned>();
  /** The last renew that went through, and the last one tried. */
  private lastRenewOk: number | undefined;
  private lastRenewTry = 0;
  /** Could not renew for a lease duration: the others may have taken this node's addresses. */
  private cutOff = false;
  /** Back from being cut off, until then: this node's claims yield (election.ts). */
  private recoveringUntil = 0;
  private timer: Timer | undefined;
  private garpTimer: Timer | undefined;
  private garpDue: Array<{ address: string; at: number }> = [];
  private active = false;
  private stopped = false;
  private started = false;
  private renewing: Promise<void> | undefined;
  private renewAgain = false;
  private lastFailureLog = 0;
  private reportedPolicyErrors = '';
  /** NoMatchingInterface Events, once while each problem lasts. */
  private readonly policyWarnings: LastingWarnings;
  /** The last node seen claiming each address: whom a takeover took it from. */
  private readonly lastClaimer = new Map<string, string>();

  constructor(private readonly d: AnnouncerDeps) {
    this.clock = d.clock ?? systemClock;
    this.policyWarnings = new LastingWarnings(d.events, (e) => d.log.debug({ err: (e as Error).message }, 'cannot post an Event on an L2AnnouncementPolicy'));
  }

  /** A heartbeat Lease was added, changed or deleted. */
  leaseChanged(kind: 'add' | 'update' | 'delete', lease: V1Lease): void {
    this.view.observe(lease, this.clock.now(), kind === 'delete');
    // Another node's renew changes nothing by itself; its claims or its arrival might.
    if (lease.spec?.holderIdentity !== this.d.nodeName) this.kick();
  }

  start(): void {
    this.started = true;
    this.schedule(0);
  }

  /** Something that may change the announcements changed. */
  kick(): void {
    if (this.started && !this.stopped && !this.timerIsImmediate) this.schedule(0);
  }

  private timerIsImmediate = false;
  private schedule(ms: number): void {
    if (this.timer) this.clock.clearTimeout(this.timer);
    this.timerIsImmediate = ms === 0;
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      this.timerIsImmediate = false;
      this.pass();
    }, ms);
    this.timer.unref?.();
  }

  /** Renewed within a lease duration: as the others see it, alive. */
  private selfLive(now: number): boolean {
    return this.lastRenewOk !== undefined && now - this.lastRenewOk < this.d.leaseDurationMs;
  }

  /** One pass: decide, program, announce, renew; the next at the renew interval or at the next expiry. */
  pass(): void {
    if (this.stopped) return;
    const now = this.clock.now();
    if (!this.d.source.synced()) {
      this.schedule(this.d.renewIntervalMs);
      return;
    }
    const policyObjects = this.d.source.policies();
    const policies = policyObjects.map(parseL2Policy);
    this.reportPolicyErrors(policies);
    const me = this.d.source.nodes().find((n) => n.metadata?.name === this.d.nodeName);
    const myDevices = this.d.devices().map((x) => x.name);
    this.eventMissedDevices(policyObjects, policies, me?.metadata?.labels ?? {}, myDevices);
    this.active = policies.some((p) => policyDevices(p, me?.metadata?.labels ?? {}, myDevices).length > 0);
    if (this.lastRenewOk === undefined && this.owned.size === 0) this.adoptOwnHeartbeat(now);

    const heartbeats = this.view.heartbeats();
    for (const h of heartbeats) for (const address of h.claims) this.lastClaimer.set(address, h.node);
    const devices = new Map(heartbeats.map((h) => [h.node, h.devices]));
    devices.set(this.d.nodeName, myDevices);
    const all = announcements({ services: this.d.source.services(), slices: this.d.source.slices(), nodes: this.d.source.nodes(), policies, devices });
    const announced = new Set(all.map((a) => a.address));
    for (const address of [...this.lastClaimer.keys()]) if (!announced.has(address)) this.lastClaimer.delete(address);
    const live = this.view.live(now);
    live.delete(this.d.nodeName);
    const claims = new Map(heartbeats.filter((h) => h.node !== this.d.nodeName).map((h) => [h.node, new Set(h.claims)]));

    let next: Map<string, Owned>;
    if (this.active && this.lastRenewOk !== undefined && !this.selfLive(now)) this.cutOff = true;
    if (this.cutOff) {
      // Cannot renew. An API server outage must not take the addresses off the network:
      // keep answering for what this node holds, take nothing new, and let an address go
      // to another live node seen claiming it.
      const byAddress = new Map(all.map((a) => [a.address, a]));
      next = new Map();
      for (const [address, o] of this.owned) {
        if ([...claims].some(([n, c]) => live.has(n) && c.has(address))) continue;
        const a = byAddress.get(address);
        next.set(address, a ? { ...o, a, devices: a.candidates.get(this.d.nodeName) ?? o.devices } : o);
      }
    } else {
      if (this.active && this.selfLive(now)) live.add(this.d.nodeName);
      claims.set(this.d.nodeName, new Set(this.owned.keys()));
      const recovering = new Set(heartbeats.filter((h) => h.recovering && h.node !== this.d.nodeName).map((h) => h.node));
      if (now < this.recoveringUntil) recovering.add(this.d.nodeName);
      const owners = elect({ candidates: new Map(all.map((a) => [a.address, [...a.candidates.keys()]])), live, claims, recovering });
      next = new Map();
      for (const a of all) {
        if (owners.get(a.address) !== this.d.nodeName) continue;
        const had = this.owned.get(a.address);
        next.set(a.address, { a, devices: a.candidates.get(this.d.nodeName) ?? [], since: had?.since ?? now });
        if (!had) this.tookOver(a, heartbeats, live);
        else if (!had.adopted) this.joined(a, had.a.services);
      }
    }
    for (const [address, o] of this.owned) {
      if (!next.has(address)) this.d.log.info({ address, services: o.a.services }, 'no longer answering ARP for this address');
    }
    const claimsChanged = [...next.keys()].sort().join(',') !== [...this.owned.keys()].sort().join(',');
    this.owned = next;
    this.program();
    this.d.metrics.l2Owned.set(this.owned.size);
    if (this.garpDue.length) this.sendDueGarps();

    if (this.active && (claimsChanged || now - this.lastRenewTry >= this.d.renewIntervalMs)) void this.renew();
    const expiry = this.view.nextExpiry(now);
    this.schedule(Math.max(1, Math.min(this.d.renewIntervalMs, expiry !== undefined ? expiry - now : Infinity)));
  }

  /** After a restart: what this node's own last heartbeat says it held, if that is recent (by this node's own clock). */
  private adoptOwnHeartbeat(now: number): void {
    const mine = this.view.heartbeats().find((h) => h.node === this.d.nodeName);
    if (!mine || mine.renewedAt === undefined || now - mine.renewedAt >= mine.durationMs) return;
    // The others count this node alive until its last heartbeat (maybe a stop's long hold) runs out.
    this.lastRenewOk = Math.min(now, mine.renewedAt + mine.durationMs - this.d.leaseDurationMs);
    for (const address of mine.claims) this.owned.set(address, { a: { address, services: [], local: false, candidates: new Map() }, devices: [], since: now, adopted: true });
  }

  /** Write the owned addresses into the datapath, answered for `validMs` (a lease duration). */
  private program(validMs = this.d.leaseDurationMs): void {
    const wanted: L2Announcement[] = [];
    for (const [address, o] of this.owned) {
      for (const dev of this.d.devices()) if (o.devices.includes(dev.name)) wanted.push({ ifindex: dev.ifindex, address, mac: dev.mac });
    }
    try {
      const { leftOut } = this.d.l2.apply(wanted, validMs);
      if (leftOut.length) this.d.log.error({ leftOut: leftOut.length }, 'the l2_owned map is full: some owned addresses are not answered (raise mapSizes.l2Addresses)');
    } catch (e) {
      this.d.log.error({ err: (e as Error).message }, 'cannot write the l2_owned map');
    }
  }

  /** A Service that came to an address this node already answers for (its status came later) hears so too. */
  private joined(a: Announcement, before: readonly string[]): void {
    for (const key of a.services) {
      if (before.includes(key)) continue;
      const [namespace = '', name = ''] = key.split('/');
      const uid = this.d.source.service?.(namespace, name)?.metadata?.uid;
      this.d.events?.normal({ kind: 'Service', namespace, name, ...(uid ? { uid } : {}) }, 'L2Announced', `${a.address} is now answered by ${this.d.nodeName}`).catch((e: Error) => this.d.log.debug({ err: e.message }, 'could not post an event'));
    }
  }

  private tookOver(a: Announcement, heartbeats: ReturnType<HeartbeatView['heartbeats']>, live: Set<string>): void {
    const claimer = heartbeats.find((h) => h.node !== this.d.nodeName && h.claims.includes(a.address))?.node ?? this.lastClaimer.get(a.address);
    const previous = claimer && claimer !== this.d.nodeName ? { node: claimer } : undefined;
    this.lastClaimer.set(a.address, this.d.nodeName);
    const why = !previous ? 'it had no owner'
      : !live.has(previous.node) ? `${previous.node} stopped renewing its heartbeat (its agent is down, or it is cut off)`
      : `${previous.node} can no longer answer for it${a.local ? ' (no ready endpoint there)' : ' (not selected any more)'}`;
    const text = previous ? `${a.address} moved from ${previous.node} to ${this.d.nodeName}: ${why}` : `${a.address} is now answered by ${this.d.nodeName}`;
    this.d.log.info({ address: a.address, services: a.services, from: previous?.node, why }, 'answering ARP for this address');
    if (previous) this.d.metrics.l2Moves.inc();
    for (const key of a.services) {
      const [namespace = '', name = ''] = key.split('/');
      const uid = this.d.source.service?.(namespace, name)?.metadata?.uid;
      this.d.events?.normal({ kind: 'Service', namespace, name, ...(uid ? { uid } : {}) }, previous ? 'L2AnnouncementMoved' : 'L2Announced', text).catch((e: Error) => this.d.log.debug({ err: e.message }, 'could not post an event'));
    }
    this.announce(a.address);
  }

  /** Gratuitous ARPs on every device the address is answered on, on GARP_SCHEDULE_MS, while this node still owns it. */
  private announce(address: string): void {
    const now = this.clock.now();
    for (const delay of GARP_SCHEDULE_MS) this.garpDue.push({ address, at: now + delay });
  }

  /** Send every gratuitous ARP that is due, one batch per device; wake up for the next. */
  private sendDueGarps(): void {
    if (this.garpTimer) this.clock.clearTimeout(this.garpTimer);
    this.garpTimer = undefined;
    const now = this.clock.now();
    const due = this.garpDue.filter((g) => g.at <= now);
    this.garpDue = this.garpDue.filter((g) => g.at > now);
    for (const dev of this.d.devices()) {
      const frames = due.filter((g) => this.owned.get(g.address)?.devices.includes(dev.name)).map((g) => gratuitousArp(dev.mac, g.address));
      if (frames.length === 0 || this.stopped) continue;
      try {
        this.d.sendFrames(dev.ifindex, frames);
        this.d.metrics.garpSent.inc(frames.length);
      } catch (e) {
        this.d.log.warn({ device: dev.name, frames: frames.length, err: (e as Error).message }, 'cannot send gratuitous ARPs');
      }
    }
    if (this.garpDue.length === 0 || this.stopped) return;
    const next = Math.min(...this.garpDue.map((g) => g.at));
    this.garpTimer = this.clock.setTimeout(() => this.sendDueGarps(), Math.max(0, next - now));
    this.garpTimer.unref?.();
  }

  /** Renew the heartbeat (one at a time; a renew asked for meanwhile follows). */
  private async renew(durationMs = this.d.leaseDurationMs): Promise<void> {
    if (this.renewing) {
      this.renewAgain = true;
      return this.renewing;
    }
    this.lastRenewTry = this.clock.now();
    this.renewing = (async () => {
      const claims = [...this.owned.keys()].sort();
      const recovering = this.cutOff || this.clock.now() < this.recoveringUntil;
      try {
        await this.d.heartbeat.renew({ node: this.d.nodeName, devices: this.d.devices().map((x) => x.name), claims, durationMs, recovering });
        const first = this.lastRenewOk === undefined || this.cutOff;
        this.lastRenewOk = this.clock.now();
        if (this.cutOff) {
          // Back: for a lease duration this node's claims yield to those of nodes that were
          // never cut off, which may have taken its addresses meanwhile.
          this.cutOff = false;
          this.recoveringUntil = this.lastRenewOk + this.d.leaseDurationMs;
        }
        this.d.metrics.heartbeats.inc({ result: 'ok' });
        if (first) this.kick();
      } catch (e) {
        this.d.metrics.heartbeats.inc({ result: 'failed' });
        const now = this.clock.now();
        if (now - this.lastFailureLog > 10_000) {
          this.lastFailureLog = now;
          this.d.log.warn({ err: (e as Error).message }, 'cannot renew the L2 heartbeat: the addresses held stay answered, none is taken');
        }
      }
    })();
    try {
      await this.renewing;
    } finally {
      this.renewing = undefined;
    }
    if (this.renewAgain && !this.stopped) {
      this.renewAgain = false;
      await this.renew(durationMs);
    }
  }

  /** A policy that selects this node but none of its devices: one Warning Event while it lasts. */
  private eventMissedDevices(objects: readonly L2PolicyObject[], policies: readonly L2Policy[], labels: Readonly<Record<string, string>>, devices: readonly string[]): void {
    policies.forEach((p, i) => {
      const why = policyMissesDevices(p, objects[i]!, labels, devices);
      if (!why) return;
      const uid = (objects[i]!.metadata as { uid?: string } | undefined)?.uid;
      this.policyWarnings.warn({ kind: 'L2AnnouncementPolicy', apiVersion: 'ferry.dev/v1alpha1', namespace: '', name: p.name, ...(uid ? { uid } : {}) }, 'NoMatchingInterface', `${this.d.nodeName}: ${why}`);
    });
    this.policyWarnings.passDone();
  }

  private reportPolicyErrors(policies: L2Policy[]): void {
    const text = policies.filter((p) => p.errors.length).map((p) => `${p.name}: ${p.errors.join('; ')}`).join(' | ');
    if (text && text !== this.reportedPolicyErrors) this.d.log.error({ policies: text }, 'L2AnnouncementPolicy with errors: it announces nothing');
    this.reportedPolicyErrors = text;
  }

  status(): OwnedAddress[] {
    return [...this.owned.values()].map((o) => ({ address: o.a.address, services: o.a.services, devices: o.devices, since: new Date(o.since).toISOString() }));
  }

  /** Stop cleanly: hold the owned addresses for the stop hold, so a restart moves none. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.timer) this.clock.clearTimeout(this.timer);
    if (this.garpTimer) this.clock.clearTimeout(this.garpTimer);
    this.garpDue = [];
    await this.renewing;
    if (!this.active || this.owned.size === 0) return;
    this.program(this.d.stopHoldMs);
    this.renewAgain = false;
    await this.renew(this.d.stopHoldMs);
  }
}
