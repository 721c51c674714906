// Load the datapath objects (tc and sock) with this node's settings, share their maps
// through pins, and attach them. The maps handed out here are the only way to write them.
import { renameSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BpfMap } from '../ebpf/map.js';
import { BpfObject, type Program } from '../ebpf/object.js';
import { attachCgroup, type CgroupTarget } from '../ebpf/link-cgroup.js';
import { HostPorts } from './host-ports.js';
import type { XdpMode } from '../ebpf/link-xdp.js';
import type { Link } from '../ebpf/link.js';
import { assertBpffs } from '../ebpf/pinned.js';
import { ErrorCode, FerryError } from '../errors.js';
import { XDP_PROGRAM, XdpDevices, type XdpDeviceChoice, type XdpDeviceState } from './xdp-devices.js';
import { HopEpoch } from './hop-epoch.js';
import { SnatDevices, chooseSnatDevices, type DeviceAddresses, type SnatDevice } from './snat-devices.js';
import { SnatAddress, snat4Checked, snat6Canonical } from './snat-address.js';
import { readLinks } from '../sys/links.js';
import { TC_PROGRAM, detachStrayPrograms, type StrayReport } from './stray-programs.js';
import { mapOptions, mapSpecs, type DatapathMaps, type MapName } from './layouts.js';
import { configureObject, loadXdpObject, setForwardingConstants } from './object-settings.js';
import { rebuildBackendIndex } from './backend-index.js';
import { isPrime } from './maglev.js';
import { LayoutMigration, type MigratedMap } from './layout-migration.js';
import { monotonicNs } from './ct-gc.js';
import { chainPreviousPrograms, handoverUntil } from './handover-chain.js';
import { attachTcHooks, tcAttachMode, type TcAttachMode, type TcAttachSetting } from './tc-hooks.js';
import { tcObjectFile } from './tc-object.js';
import type { Codec } from '../ebpf/codec.js';

export { loadXdpObject } from './object-settings.js';
export type { DatapathMaps } from './layouts.js';
export type { StrayReport } from './stray-programs.js';

export interface MapSizes {
  services: number;
  backends: number;
  reverseNat: number;
  sockReverse: number;
  sourceRanges: number;
  affinity: number;
  maglevTables: number;
  conntrack: number;
  nat: number;
  fragments: number;
  nodes: number;
  l2Addresses: number; // addresses this node may announce by ARP, per interface
}

/** Defaults fit 64k services and 64k backends. */
export const DEFAULT_MAP_SIZES: MapSizes = {
  services: 262_144,
  backends: 65_536,
  reverseNat: 131_072,
  sockReverse: 65_536,
  sourceRanges: 65_536,
  affinity: 65_536,
  maglevTables: 16_384,
  conntrack: 131_072,
  nat: 131_072,
  fragments: 16_384,
  nodes: 16_384,
  l2Addresses: 4_096,
};

/**
 * SNAT source ports, per backend ip:port. They stay out of the node's ephemeral range
 * (net.ipv4.ip_local_port_range, 32768–60999 by default), or a reply to one of the host's
 * own connections to a backend could be taken for a reply to an SNATed flow, and out of
 * the NodePort range (30000–32767). Ports where the host has a socket of its own (a
 * listener such as the kubelet's) are skipped when a flow takes one.
 */
export const DEFAULT_SNAT_PORTS = { min: 1024, max: 29999 } as const;

/** Where the compiled BPF objects ship: build/bpf beside dist/. */
export function defaultObjectsDir(): string {
  return join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'build', 'bpf');
}

/** Where the tc program's .rodata (the node's datapath settings) is pinned. */
export const RODATA_PIN = 'tc_rodata';

export interface DatapathConfig {
  objectsDir: string; // with tc.bpf.o (or tc_compat.bpf.o: tc-object.ts) and sock.bpf.o
  /** bpffs directory for pins (one per ferry instance). */
  pinDir: string;
  /** The node addresses remote flows are SNATed to at load; without an IPv6 one, IPv6 to remote backends is dropped (the agent follows the Node's: snat-address.ts). */
  snatIPv4: string;
  snatIPv6?: string; snatPortMin?: number; snatPortMax?: number;
  /** How remote backends are reached: snat (default), dsr, or hybrid (DSR for TCP, SNAT for UDP). */
  forwardingMode?: 'snat' | 'dsr' | 'hybrid';
  /** Maglev table size (a prime such as 16381) for external frontends; 0: off. */
  maglevTableSize?: number;
  /** Backend-selection hash seed; the same on every node of a cluster. */
  hashSeed?: number;
  mapSizes?: Partial<MapSizes>;
  ctLifetimes?: Partial<{ tcpSyn: number; tcpEstablished: number; tcpClosing: number; nonTcp: number }>;
  /** The host's network namespace (its cookie), where NodePorts answer on loopback; 0: the initial one. */
  hostNetnsCookie?: bigint;
  /** ICMP errors the datapath sends, per CPU: messages a second and burst. */
  icmpRatePerSec?: number; icmpBurst?: number;
  /** XDP before tc on the external devices, as Cilium names it: none (tc only), native (run
   * by the driver; a device whose driver cannot is an error), best-effort (native where the
   * driver can; elsewhere generic XDP where the agent's choice allows it, else none). */
  acceleration?: Acceleration;
  /** How the tc programs attach: tcx (Linux 6.6+), clsact, or auto (tcx where the kernel has it). */
  tcAttach?: TcAttachSetting;
}

export const ACCELERATIONS = ['none', 'native', 'best-effort'] as const;
export type Acceleration = (typeof ACCELERATIONS)[number];
export { XDP_PROGRAM } from './xdp-devices.js';

/** The socket hooks: IPv4, and IPv6 sockets reaching IPv4 Services through ::ffff:a.b.c.d. */
export const SOCK_PROGRAMS = ['sock4_connect', 'sock4_sendmsg', 'sock4_recvmsg', 'sock4_getpeername', 'sock6_connect', 'sock6_sendmsg', 'sock6_recvmsg', 'sock6_getpeername', 'sock4_post_bind', 'sock6_post_bind'] as const;

/** The longest an upgrade's switch drops packets of flows not copied yet (ferry_handover): the switch clears
 * it after the last copy (tens of ms); an agent that dies in between leaves it to lapse. */
const HANDOVER_LIMIT_NS = 5_000_000_000n;

/** How an upgrade's switch hands over what the new programs cannot place yet. */
export interface HandoverChainReport {
  /** The previous programs wait behind the new ones; else such packets are dropped. */
  chained: boolean;
  reason?: string;
}

export class Datapath {
  readonly tc: BpfObject;
  readonly sock: BpfObject;
  readonly maps: DatapathMaps;
  readonly sizes: MapSizes;
  readonly links: Link[] = [];
  /** Maglev table size the tc program was loaded with (0: off). */
  maglevTableSize = 0;
  readonly pinDir: string;
  private readonly migration: LayoutMigration;
  /** In an upgrade's switch: the previous programs attached behind this build's. */
  private chain: Link[] = [];
  private handoverDeadline = 0n;
  private readonly deviceLinks = new Map<string, Link[]>();
  /** The ports the host has bound (host_ports), once the socket hooks are attached. */
  hostPorts?: HostPorts;
  /** Per device: its XDP object and mode; the devices XDP may send by. */
  private readonly xdp: XdpDevices;
  /** The one writer of ferry_hop_epoch: route changes and the SNAT devices set its flags. */
  readonly hopEpoch: HopEpoch;
  /** The devices whose own address the SNAT flows routed out of them take. */
  private readonly snatDevices: SnatDevices;
  readonly snat4: SnatAddress; // the node's addresses remote flows leave from (snat-address.ts)
  readonly snat6: SnatAddress;
  readonly tcMode: TcAttachMode; // how the tc programs attach on this kernel (tc-hooks.ts)

  private constructor(tc: BpfObject, sock: BpfObject, sizes: MapSizes, private readonly cfg: DatapathConfig, migration: LayoutMigration) {
    this.pinDir = cfg.pinDir;
    this.migration = migration;
    this.tc = tc;
    this.sock = sock;
    this.sizes = sizes;
    const maps = {} as Record<string, BpfMap<unknown, unknown>>;
    for (const [name, spec] of Object.entries(mapSpecs)) maps[name] = tc.map(name, spec.key as Codec<unknown>, spec.value as Codec<unknown>, mapOptions(name as MapName));
    this.maps = maps as unknown as DatapathMaps;
    this.xdp = new XdpDevices((mac) => loadXdpObject(this.cfg, this.sizes, mac), this.maps.xdp_tx_devices);
    this.hopEpoch = new HopEpoch(this.maps.ferry_hop_epoch);
    this.snatDevices = new SnatDevices(this.maps.snat4_devices, this.hopEpoch);
    this.snat4 = SnatAddress.ipv4(this.maps.snat4_address, cfg.snatIPv4);
    this.snat6 = SnatAddress.ipv6(this.maps.snat6_address, cfg.snatIPv6);
    this.tcMode = tcAttachMode(cfg.tcAttach);
  }

  static load(cfg: DatapathConfig): Datapath {
    assertBpffs(cfg.pinDir);
    const sizes: MapSizes = { ...DEFAULT_MAP_SIZES, ...cfg.mapSizes };
    snat4Checked(cfg.snatIPv4), snat6Canonical(cfg.snatIPv6); // refused early when malformed or (IPv4) missing
    if (cfg.maglevTableSize && !isPrime(cfg.maglevTableSize)) {
      throw new FerryError({ code: ErrorCode.Config, op: 'load datapath', cause: `maglevTableSize ${cfg.maglevTableSize} is not prime`, hint: 'use a prime such as 16381, 4093 or 1021' });
    }
    // Pinned maps of an older layout, or of other sizes, are migrated rather than refused.
    const migration = new LayoutMigration();
    const tc = BpfObject.open(join(cfg.objectsDir, tcObjectFile()));
    let sock: BpfObject | undefined;
    try {
      configureObject(tc, cfg, sizes, migration.decide);
      setForwardingConstants(tc, cfg);
      tc.load();
      migration.migrate(tc); // before sock loads: it adopts the pins tc leaves
      // The node's settings, for tools that load a twin of this program (ferry explain).
      rmSync(join(cfg.pinDir, RODATA_PIN), { force: true });
      tc.pinRodata(join(cfg.pinDir, RODATA_PIN));
      sock = BpfObject.open(join(cfg.objectsDir, 'sock.bpf.o'));
      configureObject(sock, cfg, sizes, migration.decide);
      sock.load(); // adopts the maps tc just pinned
      migration.migrate(sock);
      const dp = new Datapath(tc, sock, sizes, cfg, migration);
      dp.maglevTableSize = cfg.maglevTableSize ?? 0;
      if (!['lb4_backends', 'lb4_backend_ids'].every((m) => tc.pinReport.adopted.includes(m))) rebuildBackendIndex(dp.maps);
      return dp;
    } catch (e) {
      migration.close();
      sock?.close();
      tc.close();
      throw e;
    }
  }

  /** Pinned maps this load migrated from another layout or size (empty on a plain restart). */
  get migrated(): readonly MigratedMap[] {
    return this.migration.migrated;
  }

  /**
   * An upgrade's last steps: call `catchUpMigration` right before attaching the tc programs
   * and `completeMigration` right after. Each copies the flows the previous build's
   * programs created meanwhile; the second also lets the previous maps go. In between, a
   * reply with no binding and a client's TCP segment with no flow entry (ferry_handover),
   * which the host would answer with a reset, go to the previous programs chained behind
   * on `devices`, or are dropped where that chain could not be made.
   */
  catchUpMigration(devices: readonly string[] = []): HandoverChainReport | undefined {
    let report: HandoverChainReport | undefined;
    if (this.migration.catchingUp) {
      // The previous programs wait behind the new ones on `devices` (handover-chain.ts): what
      // the new ones cannot place goes to them instead of being dropped.
      const chain = chainPreviousPrograms(devices, this.tcMode);
      const chained = chain.links.length > 0;
      this.chain = chain.links;
      this.handoverDeadline = monotonicNs() + HANDOVER_LIMIT_NS;
      this.maps.ferry_handover.update(0, { untilNs: handoverUntil(this.handoverDeadline, chained) });
      report = { chained, ...(chain.reason ? { reason: chain.reason } : {}) };
    }
    this.migration.catchUp();
    return report;
  }

  completeMigration(): void {
    this.migration.catchUp();
    if (this.chain.length) {
      // That copy ran with the new programs on every device and the previous ones behind
      // them: it holds every flow the previous ones opened. What they get now was passed on
      // by the new ones (they open nothing that matters), so the switch ends here, with no
      // window of drops; one more copy after they go takes whatever they made meanwhile.
      this.maps.ferry_handover.update(0, { untilNs: 0n });
      for (const l of this.chain.splice(0).reverse()) l.close();
      this.migration.catchUp();
    }
    this.migration.close();
    this.maps.ferry_handover.update(0, { untilNs: 0n });
  }

  /**
   * tc ingress and egress on an external device (in the calling thread's netns), and XDP
   * before them as the acceleration setting says and the agent's choice for the device
   * allows (xdp-devices.ts). tc goes first: what XDP passes on finds it.
   */
  attachDevice(ifname: string, xdp: XdpDeviceChoice = {}): void {
    const links = attachTcHooks({ ingress: this.tc.program(TC_PROGRAM.ingress), egress: this.tc.program(TC_PROGRAM.egress) }, ifname, this.tcMode, this.chain.length > 0);
    try {
      const x = this.xdp.attach(ifname, this.cfg.acceleration ?? 'none', xdp);
      if (x) links.push(x);
    } catch (e) {
      for (const l of links.reverse()) l.close();
      throw e;
    }
    this.links.push(...links);
    this.deviceLinks.set(ifname, links);
  }

  /** The agent's start: tc (and XDP) on `devices`; ferry's programs an earlier agent left on other devices taken off (stray-programs.ts). */
  attachDevices(devices: readonly string[], present: readonly string[] = readLinks().map((l) => l.name), xdp: (device: string) => XdpDeviceChoice = () => ({})): StrayReport {
    for (const dev of devices) this.attachDevice(dev, xdp(dev));
    return detachStrayPrograms(present, new Set(devices));
  }

  /**
   * XDP on an attached device, whatever the acceleration setting: in `mode`, or off (the
   * benchmarks compare one node with and without). In the calling thread's netns.
   */
  setXdp(ifname: string, mode: XdpMode | 'off'): void {
    const links = this.deviceLinks.get(ifname);
    if (!links) throw new FerryError({ code: ErrorCode.NotFound, op: `set xdp on ${ifname}`, cause: 'ferry is not attached to that device' });
    const gone = this.xdp.remove(ifname);
    if (gone) {
      links.splice(links.indexOf(gone), 1);
      this.links.splice(this.links.indexOf(gone), 1);
    }
    if (mode === 'off') return;
    const link = this.xdp.set(ifname, mode);
    links.push(link);
    this.links.push(link);
  }

  /** The XDP program on a device this process attached (bench/pps-node.ts runs it directly). */
  xdpProgram(ifname: string): Program | undefined { return this.xdp.program(ifname); }

  /** Devices the tc programs were attached to (by this process). */
  attachedDevices(): string[] {
    return [...this.deviceLinks.keys()];
  }

  /** The settings it was loaded with. */
  get config(): Readonly<DatapathConfig> {
    return this.cfg;
  }

  /** Where XDP runs, per device this process attached: native, generic, or off (left to tc by the agent's choice); absent: tc only. */
  xdpModes(): Record<string, XdpMode | 'off'> {
    return this.xdp.modes();
  }

  /** Per device with XDP: its mode and whether XDP may redirect frames out of it (xdp-devices.ts). */
  xdpDevices(): Record<string, XdpDeviceState> {
    return this.xdp.states();
  }

  /** The devices XDP may send by, asked of the kernel again (a veth's follow its peer). */
  refreshXdpTargets(): void {
    this.xdp.refreshTargets();
  }

  /**
   * The attached devices that lend their address to the SNAT flows routed out of them, made
   * to match `links` (their addresses now, in the calling thread's netns). True if changed.
   */
  refreshSnatDevices(links: readonly DeviceAddresses[] = readLinks()): boolean {
    return this.snatDevices.apply(chooseSnatDevices(links, this.attachedDevices(), this.snat4.get()!));
  }

  /** The devices listed now, with the address their SNAT flows leave from. */
  snatDeviceList(): SnatDevice[] {
    return this.snatDevices.list();
  }

  /** A device that is gone (its filters went with it): its links are dropped, not detached. */
  forgetDevice(ifname: string): void {
    const links = this.deviceLinks.get(ifname) ?? [];
    this.deviceLinks.delete(ifname);
    for (const l of links) {
      l.disown();
      this.links.splice(this.links.indexOf(l), 1);
    }
    this.xdp.forget(ifname);
  }

  /**
   * The socket hooks at a cgroup v2 root. With `pinLinks`, each link is pinned in the
   * pin directory and replaces the one a previous agent pinned there, new before old: for
   * a moment both run, which is harmless (the second sees a backend, not a Service).
   * Then the ports the host's sockets hold are marked (`hostNetns`: its namespace by name,
   * if not this process's), and new SNAT bindings ask the host about marked ports only.
   */
  attachCgroup(target: CgroupTarget, opts: { pinLinks?: boolean; hostNetns?: string } = {}): void {
    for (const p of SOCK_PROGRAMS) {
      const link = attachCgroup(this.sock.program(p), target);
      this.links.push(link);
      if (!opts.pinLinks) continue;
      const path = join(this.pinDir, `link_${p}`);
      const fresh = `${path}_new`; // bpffs refuses names with dots
      rmSync(fresh, { force: true });
      link.pin(fresh);
      rmSync(path, { force: true }); // the old link goes when its last reference does
      renameSync(fresh, path);
    }
    this.hostPorts = new HostPorts(this.maps.host_ports, { min: this.cfg.snatPortMin ?? DEFAULT_SNAT_PORTS.min, max: this.cfg.snatPortMax ?? DEFAULT_SNAT_PORTS.max }, opts.hostNetns);
    this.hostPorts.seed();
  }

  /**
   * A switch that failed before its end: the previous programs behind go, and what the new
   * ones cannot place is dropped again until the deadline lapses (as without a chain).
   */
  private abandonChain(): void {
    if (!this.chain.length) return;
    this.maps.ferry_handover.update(0, { untilNs: handoverUntil(this.handoverDeadline, false) });
    for (const l of this.chain.splice(0).reverse()) l.close();
  }

  /** Detach everything and close: the datapath stops (tests, uninstall). */
  close(): void {
    this.abandonChain();
    this.migration.close();
    for (const l of this.links.splice(0).reverse()) l.close();
    this.xdp.closeAll();
    this.sock.close();
    this.tc.close();
  }

  /**
   * Close this process's handles but leave the datapath running: tc filters stay, pinned
   * links stay, maps stay pinned. What an agent does on exit, so traffic flows while it
   * restarts; the next agent adopts all of it.
   */
  release(): void {
    this.abandonChain();
    this.migration.close();
    for (const l of this.links.splice(0).reverse()) l.disown();
    this.xdp.closeAll();
    this.sock.close();
    this.tc.close();
  }
}
