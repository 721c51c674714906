// Devices come and go: a NIC hotplugged, a bond or VLAN made after boot. Every few seconds
// the devices are chosen again (devices.ts); a chosen one without filters gets them, one
// that is gone is forgotten. A device no longer chosen but still there keeps its filters
// (traffic may still arrive on it).
import type { Logger } from 'pino';
import type { Datapath } from '../datapath/loader.js';
import { defaultRouteDevices, readLinks } from '../sys/links.js';
import { chooseDevices } from './devices.js';

export class DeviceScanner {
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly datapath: Pick<Datapath, 'attachDevice' | 'attachedDevices' | 'forgetDevice'>,
    /** The configured names and patterns (empty: automatic). */
    private readonly wanted: string[],
    /** The node's addresses: what automatic devices are chosen by. */
    private readonly nodeAddresses: string[],
    private readonly log: Logger,
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
      const links = readLinks();
      const present = new Set(links.map((l) => l.name));
      const attached = this.datapath.attachedDevices();
      for (const d of attached) {
        if (present.has(d)) continue;
        this.datapath.forgetDevice(d);
        this.log.info({ device: d }, 'device gone');
      }
      let chosen: string[];
      try {
        chosen = chooseDevices(links, defaultRouteDevices(), this.nodeAddresses, this.wanted);
      } catch {
        return; // none chosen right now (an interface being renamed, say): keep what is attached
      }
      for (const d of chosen) {
        if (attached.includes(d)) continue;
        try {
          this.datapath.attachDevice(d);
          this.log.info({ device: d }, 'device attached');
        } catch (e) {
          this.log.warn({ device: d, err: (e as Error).message }, 'cannot attach to a new device; will try again');
        }
      }
    } catch (e) {
      this.log.warn({ err: (e as Error).message }, 'cannot list devices');
    }
  }
}
