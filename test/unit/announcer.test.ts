// Three agents' announcers on a manual clock, sharing a fake API (heartbeat Leases
// delivered to every agent as a watch would): one owner per address, takeover within a
// lease duration after the owner dies, no move when an agent restarts cleanly, a node cut
// off keeps answering (an API outage must not take addresses away) and, back, takes
// nothing back.
import type { V1Lease, V1Node, V1Service } from '@kubernetes/client-node';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { heartbeatLease, type Heartbeat } from '../../src/announce/heartbeats.js';
import { Announcer, type AnnouncerDeps } from '../../src/agent/announcer.js';
import { AgentMetrics } from '../../src/agent/metrics.js';
import type { L2Announcement } from '../../src/datapath/l2-announcements.js';
import { ManualClock } from '../harness/manual-clock.js';
import type { InterfaceInfo } from '../../src/sys/interfaces.js';

const LEASE_MS = 2000;
const RENEW_MS = 500;
const NODES = ['node-1', 'node-2', 'node-3'];
const node = (name: string): V1Node => ({ metadata: { name, labels: {} }, status: { addresses: [{ type: 'InternalIP', address: `10.0.30.${20 + Number(name.slice(-1))}` }] } });
const lb = (name: string, ip: string): V1Service => ({ metadata: { name, namespace: 'default', uid: `u-${name}` }, spec: { type: 'LoadBalancer', ports: [{ port: 80 }] }, status: { loadBalancer: { ingress: [{ ip }] } } });

class World {
  readonly clock = new ManualClock();
  readonly leases = new Map<string, V1Lease>();
  readonly agents = new Map<string, { a: Announcer; map: Map<string, bigint>; garps: string[]; cut: boolean; dead: boolean; deaf?: boolean; devices: InterfaceInfo[] }>();
  services: V1Service[] = [lb('web', '10.0.30.200'), lb('dns', '10.0.30.201'), lb('shop', '10.0.30.202')];
  writes = 0;
  events: string[] = [];
  warnings: string[] = [];
  policies: Array<{ metadata: { name: string; uid?: string }; spec: Record<string, unknown> }> = [{ metadata: { name: 'all' }, spec: {} }];
  /** Nodes that start with no device (one is hotplugged later). */
  noDevices = new Set<string>();

  start(name: string): void {
    const self = { a: undefined as unknown as Announcer, map: new Map<string, bigint>(), garps: [] as string[], cut: false, dead: false, devices: this.noDevices.has(name) ? ([] as InterfaceInfo[]) : [{ name: 'eth0', ifindex: 2, mac: `02:00:00:00:00:0${name.slice(-1)}` }] };
    const deps: AnnouncerDeps = {
      nodeName: name,
      devices: () => self.devices,
      source: { services: () => this.services, slices: () => [], nodes: () => NODES.map(node), policies: () => this.policies, synced: () => true },
      heartbeat: {
        renew: async (hb: Heartbeat) => {
          if (self.cut || self.dead) throw new Error('unreachable');
          this.writes++;
          const lease = heartbeatLease('kube-system', hb, new Date(this.clock.now()), this.leases.get(hb.node));
          const kind = this.leases.has(hb.node) ? 'update' : 'add';
          this.leases.set(hb.node, lease);
          for (const other of this.agents.values()) if (!other.cut && !other.dead && !other.deaf) other.a.leaseChanged(kind, lease);
        },
      },
      l2: {
        apply: (wanted: readonly L2Announcement[], validMs: number) => {
          self.map = new Map(wanted.map((w) => [w.address, BigInt(this.clock.now() + validMs)]));
          return { leftOut: [] };
        },
      },
      sendFrames: (_i, frames) => void self.garps.push(...frames.map((f) => `${f.subarray(28, 32).join('.')}`)),
      events: { normal: async (o: { name: string }, reason: string, text: string) => void this.events.push(`${reason} ${o.name}: ${text}`), warn: async (o: { kind: string; name: string; uid?: string }, reason: string, text: string) => void this.warnings.push(`${reason} ${o.kind}/${o.name} ${o.uid ?? ''}: ${text}`) } as unknown as AnnouncerDeps['events'],
      metrics: new AgentMetrics(),
      log: pino({ level: 'silent' }),
      leaseDurationMs: LEASE_MS,
      renewIntervalMs: RENEW_MS,
      stopHoldMs: 10_000,
      clock: this.clock,
    };
    self.a = new Announcer(deps);
    this.agents.set(name, self);
    // A new agent lists the Leases first, as its watch would.
    for (const l of this.leases.values()) self.a.leaseChanged('add', l);
    self.a.start();
  }

  /** Who answers for each address now: nodes whose map holds it unexpired (dead agents' maps expire too). */
  answering(address: string): string[] {
    return [...this.agents].filter(([, s]) => (s.map.get(address) ?? 0n) > BigInt(this.clock.now())).map(([n]) => n).sort();
  }

  kill(name: string): void {
    const s = this.agents.get(name)!;
    s.dead = true; // no clean stop: its calls fail, its timers end
    (s.a as unknown as { stopped: boolean }).stopped = true;
  }
}

async function settle(w: World, ms: number): Promise<void> {
  for (let t = 0; t < ms; t += 50) await w.clock.advance(50);
}

describe('announcer (three agents, manual clock)', () => {
  it('every address has exactly one node answering, and the heartbeat writes do not grow with the addresses', async () => {
    const w = new World();
    for (const n of NODES) w.start(n);
    await settle(w, 3000);
    for (const ip of ['10.0.30.200', '10.0.30.201', '10.0.30.202']) expect(w.answering(ip)).toHaveLength(1);
    const before = w.writes;
    await settle(w, 10_000);
    const few = w.writes - before;
    w.services = Array.from({ length: 200 }, (_, i) => lb(`s${i}`, `10.0.31.${i}`));
    await settle(w, 3000);
    const mid = w.writes;
    await settle(w, 10_000);
    // 3 nodes × 2 renews a second, with 3 addresses or with 200.
    expect(few).toBeGreaterThanOrEqual(55);
    expect(few).toBeLessThanOrEqual(65);
    expect(w.writes - mid).toBe(few);
  });

  it('a policy whose interface patterns match none of a node\'s devices: nothing announced, one Warning Event per node while it lasts', async () => {
    const w = new World();
    w.policies = [{ metadata: { name: 'lan', uid: 'u-lan' }, spec: { interfaces: ['eth1', 'bond.*'] } }];
    for (const n of NODES) w.start(n);
    await settle(w, 3000);
    expect(w.answering('10.0.30.200')).toEqual([]);
    expect(w.warnings.sort()).toEqual(NODES.map((n) => `NoMatchingInterface L2AnnouncementPolicy/lan u-lan: ${n}: none of this node's devices (eth0) matches interfaces ["eth1","bond.*"]: it announces nothing here`));
    // Mended: announced; broken again: told again.
    w.policies = [{ metadata: { name: 'lan', uid: 'u-lan' }, spec: { interfaces: ['eth.*'] } }];
    await settle(w, 3000);
    expect(w.answering('10.0.30.200')).toHaveLength(1);
    w.policies = [{ metadata: { name: 'lan', uid: 'u-lan' }, spec: { interfaces: ['eth1', 'bond.*'] } }];
    await settle(w, 1000);
    expect(w.warnings).toHaveLength(2 * NODES.length);
  });

  it('a node whose only device appears later (hotplug) becomes a candidate and answers on it', async () => {
    const w = new World();
    w.noDevices = new Set(NODES);
    for (const n of NODES) w.start(n);
    await settle(w, 3000);
    expect(w.answering('10.0.30.200')).toEqual([]);
    const n2 = w.agents.get('node-2')!;
    n2.devices = [{ name: 'enp9s0', ifindex: 9, mac: '02:00:00:00:00:92' }];
    n2.a.kick();
    await settle(w, 3000);
    for (const ip of ['10.0.30.200', '10.0.30.201', '10.0.30.202']) expect(w.answering(ip)).toEqual(['node-2']);
    expect(n2.a.status().map((o) => o.devices)).toEqual([['enp9s0'], ['enp9s0'], ['enp9s0']]);
  });

  it('a Service that joins an address already answered for (its status came later) gets its L2Announced too, once', async () => {
    const w = new World();
    for (const n of NODES) w.start(n);
    await settle(w, 3000);
    const owner = w.answering('10.0.30.201')[0];
    w.services = [...w.services, lb('dns-udp', '10.0.30.201')];
    await settle(w, 2000);
    expect(w.events.filter((e) => e.startsWith('L2Announced dns:'))).toEqual([`L2Announced dns: 10.0.30.201 is now answered by ${owner}`]);
    expect(w.events.filter((e) => e.startsWith('L2Announced dns-udp:'))).toEqual([`L2Announced dns-udp: 10.0.30.201 is now answered by ${owner}`]);
  });

  it('the owner\'s agent dies: another node answers within a lease duration (plus a renew), with gratuitous ARPs', async () => {
    const w = new World();
    for (const n of NODES) w.start(n);
    await settle(w, 3000);
    const owner = w.answering('10.0.30.200')[0]!;
    w.kill(owner);
    const died = w.clock.now();
    let took = -1;
    for (let t = 0; t < 5000; t += 50) {
      await w.clock.advance(50);
      const now = w.answering('10.0.30.200');
      if (now.length === 1 && now[0] !== owner) {
        took = w.clock.now() - died;
        break;
      }
    }
    expect(took).toBeGreaterThan(0);
    expect(took).toBeLessThanOrEqual(LEASE_MS + RENEW_MS + 100);
    const heir = w.answering('10.0.30.200')[0]!;
    await settle(w, 5000);
    expect(w.agents.get(heir)!.garps.filter((g) => g === '10.0.30.200')).toHaveLength(5);
  });

  it('a clean restart of the owner moves nothing', async () => {
    const w = new World();
    for (const n of NODES) w.start(n);
    await settle(w, 3000);
    const owners = ['10.0.30.200', '10.0.30.201', '10.0.30.202'].map((ip) => w.answering(ip)[0]);
    const owner = owners[0]!;
    await w.agents.get(owner)!.a.stop();
    (w.agents.get(owner)!).dead = true;
    await settle(w, 4000); // the agent is away for 4 s (longer than a lease duration)
    w.agents.delete(owner);
    w.start(owner);
    await settle(w, 5000);
    expect(['10.0.30.200', '10.0.30.201', '10.0.30.202'].map((ip) => w.answering(ip)[0])).toEqual(owners);
  });

  it('a node cut off keeps answering (it cannot tell an API outage from isolation); back, it yields to the node that took over', async () => {
    const w = new World();
    for (const n of NODES) w.start(n);
    await settle(w, 3000);
    const owner = w.answering('10.0.30.200')[0]!;
    w.agents.get(owner)!.cut = true;
    await settle(w, 5000);
    const heir = NODES.find((n) => n !== owner && w.answering('10.0.30.200').includes(n));
    expect(heir).toBeDefined();
    expect(w.answering('10.0.30.200')).toContain(owner); // still answering into the void
    w.agents.get(owner)!.cut = false;
    for (const l of w.leases.values()) w.agents.get(owner)!.a.leaseChanged('update', l); // its watch relists
    await settle(w, 4000);
    expect(w.answering('10.0.30.200')).toEqual([heir]);
  });

  it('back from being cut off, with its watch still behind: its claim yields to the node that took over', async () => {
    const w = new World();
    for (const n of NODES) w.start(n);
    await settle(w, 3000);
    const owner = w.answering('10.0.30.200')[0]!;
    const s = w.agents.get(owner)!;
    s.cut = true;
    await settle(w, 5000);
    const heir = NODES.find((n) => n !== owner && w.answering('10.0.30.200').includes(n))!;
    // Its renews go through again before its watch has caught up with the others' Leases.
    s.cut = false;
    s.deaf = true;
    await settle(w, 1000);
    s.deaf = false;
    for (const l of w.leases.values()) s.a.leaseChanged('update', l);
    await settle(w, 4000);
    expect(w.answering('10.0.30.200')).toEqual([heir]);
  });

  it('an API server outage for everyone: every address stays answered by its owner', async () => {
    const w = new World();
    for (const n of NODES) w.start(n);
    await settle(w, 3000);
    const owners = ['10.0.30.200', '10.0.30.201', '10.0.30.202'].map((ip) => w.answering(ip));
    for (const s of w.agents.values()) s.cut = true;
    await settle(w, 20_000);
    expect(['10.0.30.200', '10.0.30.201', '10.0.30.202'].map((ip) => w.answering(ip))).toEqual(owners);
    for (const s of w.agents.values()) s.cut = false;
    await settle(w, 6000);
    expect(['10.0.30.200', '10.0.30.201', '10.0.30.202'].map((ip) => w.answering(ip))).toEqual(owners);
  });
});
