// A broadcast domain between hosts, as a switch makes one: ARP, gratuitous ARP and
// broadcasts reach every member. Built from a bridge in a namespace of its own, or, on a
// kernel without the bridge module, from macvlan interfaces in bridge mode on one parent
// (members talk to each other through the parent's macvlan switch). Either way each
// member gets an interface of its own, with its own MAC.
import { join } from 'node:path';
import { defaultObjectsDir } from '../../datapath/loader.js';
import { exec } from '../../sys/exec.js';
import type { Host, Testbed } from './testbed.js';

export type SwitchKind = 'bridge' | 'macvlan';
const BRIDGE = 'br0';
const PARENT = 'up0';
/** An XDP program that passes everything (bpf/tests/xdp_pass.bpf.c). */
const XDP_PASS_OBJECT = join(defaultObjectsDir(), 'tests', 'xdp_pass.bpf.o');

export class L2Switch {
  private readonly members = new Map<Host, { ifname: string; port?: string }>();
  private ports = 0;

  private constructor(
    readonly host: Host,
    readonly kind: SwitchKind,
  ) {}

  /** A switch in its own namespace; `kind` forces one (else the bridge, if the kernel has it). */
  static async create(tb: Testbed, name: string, kind?: SwitchKind): Promise<L2Switch> {
    const host = await tb.addHost(name);
    const want = kind ?? (process.env.FERRY_SANDBOX_SWITCH as SwitchKind | undefined);
    if (want && want !== 'bridge' && want !== 'macvlan') throw new Error(`FERRY_SANDBOX_SWITCH=${want}: use bridge or macvlan`);
    if (want !== 'macvlan') {
      const r = await host.exec(['ip', 'link', 'add', BRIDGE, 'type', 'bridge']);
      if (r.code === 0) {
        await host.ip('link', 'set', BRIDGE, 'up');
        return new L2Switch(host, 'bridge');
      }
      if (want === 'bridge') throw new Error('the kernel has no bridge device (FERRY_SANDBOX_SWITCH=bridge)');
    }
    // The macvlans' parent: one end of a veth pair, its peer up too so that it has carrier.
    await host.ip('link', 'add', PARENT, 'type', 'veth', 'peer', 'name', 'up1');
    await host.ip('link', 'set', 'up1', 'up');
    await host.ip('link', 'set', PARENT, 'up');
    return new L2Switch(host, 'macvlan');
  }

  /** Connect `host` as `ifname` (addressed, up), with `mac` if given. */
  async attach(host: Host, ifname: string, o: { address?: string; mac?: string } = {}): Promise<void> {
    const n = ++this.ports;
    if (this.kind === 'bridge') {
      const port = `p${n}`;
      await exec('ip', ['link', 'add', ifname, 'netns', host.netns, 'type', 'veth', 'peer', 'name', port, 'netns', this.host.netns]).then(check);
      await this.host.ip('link', 'set', port, 'master', BRIDGE);
      await this.host.ip('link', 'set', port, 'up');
      this.members.set(host, { ifname, port });
    } else {
      const tmp = `mv${n}`;
      await this.host.ip('link', 'add', tmp, 'link', PARENT, 'type', 'macvlan', 'mode', 'bridge');
      await this.host.ip('link', 'set', tmp, 'netns', host.netns);
      await host.ip('link', 'set', tmp, 'name', ifname);
      this.members.set(host, { ifname });
    }
    if (o.mac) await host.ip('link', 'set', ifname, 'address', o.mac);
    if (o.address) await host.ip('addr', 'add', o.address, 'dev', ifname);
    await host.ip('link', 'set', ifname, 'up');
  }

  /**
   * Make the switch carry what XDP on its members needs, as a physical network would:
   * - every frame a member sends has a complete checksum (a NIC receives nothing else;
   *   a veth would otherwise carry the sender's partial checksum, which XDP cannot see,
   *   and its rewrites would be wrong): checksum offload off on the members' interfaces;
   * - a bridge port takes the frames a member's XDP sends back out (XDP_TX onto a veth
   *   needs its peer to poll, which an XDP program on the peer turns on; GRO would too,
   *   but loses frames of long TCP transfers there).
   */
  async prepareForXdp(): Promise<void> {
    for (const [host, m] of this.members) {
      await host.execOk(['ethtool', '-K', m.ifname, 'tx', 'off']);
      if (m.port) await this.host.ip('link', 'set', 'dev', m.port, 'xdpdrv', 'obj', XDP_PASS_OBJECT, 'sec', 'xdp');
    }
  }

  /** Each member's port on the switch (bridge), or its own interface (macvlan), by host name. */
  portsByHost(): Record<string, string> {
    return Object.fromEntries([...this.members].map(([h, m]) => [h.name, m.port ?? m.ifname]));
  }

  /**
   * Cut a member off the switch, or put it back: the switch's port goes down (bridge), or
   * the member's interface does (macvlan has no port of its own; the caller restores the
   * member's routes after).
   */
  async setConnected(host: Host, connected: boolean): Promise<void> {
    const m = this.members.get(host);
    if (!m) throw new Error(`${host.name} is not on switch ${this.host.name}`);
    if (m.port) await this.host.ip('link', 'set', m.port, connected ? 'up' : 'down');
    else await host.ip('link', 'set', m.ifname, connected ? 'up' : 'down');
  }
}

function check(r: { code: number; stderr: string }): void {
  if (r.code !== 0) throw new Error(`ip link add: ${r.stderr.trim()}`);
}
