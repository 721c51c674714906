// Devices come and go: a NIC hotplugged, a bond or VLAN made after boot. Every few seconds
// the devices are chosen again (devices.ts); a chosen one without filters gets them, one
// that is gone is forgotten. A device no longer chosen but still there keeps its filters
// (traffic may still arrive on it) until the agent's next start takes them off
// (stray-programs.ts). A device deleted and made again under the same name
// between two scans (a new ifindex) lost its filters: it is attached again. Each change is
// reported, so the L2 announcer answers ARP on the devices the tc programs run on. Each scan
// also asks again which devices XDP may redirect frames to (xdp-devices.ts), and which lend
// their address to the SNAT flows routed out of them (snat-devices.ts: an overlay's tunnel
// device gets its address after the device appears).
import type { Logger } from 'pino';
import type { Datapath } from '../datapath/loader.js';
import { defaultRouteDevices, readLinks, type LinkInfo } from '../sys/links.js';
import type { AgentConfig } from './config.js';
import { chooseDevices, vlansLeftOut } from './devices.js';
import { xdpDeviceChoice } from './xdp-choice.js';

/** A VLAN of one of ferry's devices that is not one itself. */
export interface VlanNotServed {
  device: string;
  vlan: number;
  parent: string;
}

export class DeviceScanner {
  private timer: NodeJS.Timeout | undefined;
  /** The ifindex each attached device had when last seen. */
  private readonly ifindexes = new Map<string, number>();
  /** VLANs of attached devices, not attached themselves, as the last scan found them (each is warned of once while it lasts). */
  private vlansLeft: VlanNotServed[] = [];

  constructor(
    private readonly datapath: Pick<Datapath, 'attachDevice' | 'attachedDevices' | 'forgetDevice' | 'refreshXdpTargets' | 'refreshSnatDevices' | 'snatDeviceList'>,
    /** The configured names and patterns (empty: automatic) of the devices, and of those with XDP. */
    private readonly wanted: Pick<AgentConfig, 'devices' | 'xdpDevices'>,
    /** The node's addresses: what automatic devices are chosen by. */
    private readonly nodeAddresses: string[],
    private readonly log: Logger,
    /** Called with the attached devices after any was attached or forgotten. */
    private readonly onChange: (attached: string[]) => void = () => undefined,
    /** Where the links and the default routes' devices are read (the node's own; tests give theirs). */
    private readonly host: { links: () => LinkInfo[]; defaultRouteDevices: () => string[] } = { links: readLinks, defaultRouteDevices },
  ) {}

  start(everyMs: number): void {
    this.timer = setInterval(() => this.scan(), everyMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  scan(): void {
    try {
      const links = this.host.links();
      const byName = new Map(links.map((l) => [l.name, l]));
      let changed = false;
      for (const d of this.datapath.attachedDevices()) {
        const link = byName.get(d);
        const known = this.ifindexes.get(d);
        if (link && (known === undefined || known === link.ifindex)) {
          this.ifindexes.set(d, link.ifindex);
          continue;
        }
        this.datapath.forgetDevice(d);
        this.ifindexes.delete(d);
        changed = true;
        this.log.info({ device: d }, link ? 'device replaced (a new ifindex)' : 'device gone');
      }
      const attached = this.datapath.attachedDevices();
      let chosen: string[] = [];
      try {
        chosen = chooseDevices(links, this.host.defaultRouteDevices(), this.nodeAddresses, this.wanted.devices);
      } catch {
        // none chosen right now (an interface being renamed, say): keep what is attached
      }
      for (const d of chosen) {
        if (attached.includes(d)) continue;
        try {
          this.datapath.attachDevice(d, xdpDeviceChoice(this.wanted.xdpDevices, byName.get(d) ?? { name: d }));
          this.ifindexes.set(d, byName.get(d)?.ifindex ?? 0);
          changed = true;
          this.log.info({ device: d }, 'device attached');
        } catch (e) {
          this.log.warn({ device: d, err: (e as Error).message }, 'cannot attach to a new device; will try again');
        }
      }
      if (changed) this.onChange(this.datapath.attachedDevices());
      this.reportVlans(links);
      this.refreshXdpTargets();
      this.refreshSnatDevices(links);
    } catch (e) {
      this.log.warn({ err: (e as Error).message }, 'cannot list devices');
    }
  }

  /** Say once which VLANs of ferry's devices ferry does not serve (the trunk leaves their frames to them). */
  private reportVlans(links: LinkInfo[]): void {
    const before = new Set(this.vlansLeft.map((v) => v.device));
    this.vlansLeft = vlansLeftOut(links, this.datapath.attachedDevices()).map((l) => ({ device: l.name, vlan: l.vlan!.id, parent: l.vlan!.parent }));
    for (const v of this.vlansLeft) {
      if (!before.has(v.device)) this.log.warn(v, 'a VLAN of a ferry device is not one of its devices: Service traffic tagged for it is left to the kernel (name it in devices to serve it)');
    }
  }

  /** The VLANs of ferry's devices it does not serve, as the last scan found them (/status). */
  vlansNotServed(): VlanNotServed[] {
    return this.vlansLeft;
  }

  /** The SNAT devices follow the attached devices' addresses. */
  private refreshSnatDevices(links: LinkInfo[]): void {
    try {
      if (this.datapath.refreshSnatDevices(links)) this.log.info({ snatDevices: this.datapath.snatDeviceList() }, 'devices whose own address SNAT flows routed out of them take');
    } catch (e) {
      this.log.warn({ err: (e as Error).message }, 'cannot list the devices SNAT flows take their address from');
    }
  }

  /** The devices XDP may redirect to follow their drivers (a veth's, its peer's XDP). */
  private refreshXdpTargets(): void {
    try {
      this.datapath.refreshXdpTargets();
    } catch (e) {
      this.log.warn({ err: (e as Error).message }, 'cannot refresh the devices XDP may send by');
    }
  }
}
