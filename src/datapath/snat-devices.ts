// The address a new SNAT flow leaves from, per device its route leaves by
// (snat4_devices): as kube-proxy's MASQUERADE takes the outgoing device's address, every
// device the tc programs run on other than the one holding the node's SNAT address
// (snatIPv4) lends its own first IPv4 address to the flows routed out of it. An overlay's
// tunnel device (flannel's flannel.1, its address from the node's pod range) named in
// `devices` so gets its flows' replies back through the tunnel: from the node's address,
// they would arrive at the backend's node on the tunnel from an address it routes
// elsewhere, which a strict rp_filter drops. A device with no IPv4 address lends none
// (the node's address applies), and none does while no attached device holds the SNAT
// address (one configured apart from the devices, say a VIP, is meant for every flow).
// FERRY_SNAT_BY_DEVICE in ferry_hop_epoch tells the programs whether any is listed, so
// that without one a new flow looks nothing up.
import { ErrorCode, FerryError } from '../errors.js';
import type { BpfMap } from '../ebpf/map.js';
import type { HopEpoch } from './hop-epoch.js';
import type { LinkInfo } from '../sys/links.js';

export interface SnatDevice {
  name: string;
  ifindex: number;
  /** The address flows routed out of it leave from. */
  address: string;
}

/** A device as `ip` reports it: its index and IPv4 addresses, the primary first. */
export type DeviceAddresses = Pick<LinkInfo, 'name' | 'ifindex' | 'addresses'>;

/** Which of the attached devices lend their address: those with one, other than the node's SNAT address's device. */
export function chooseSnatDevices(devices: readonly DeviceAddresses[], attached: readonly string[], snatIPv4: string): SnatDevice[] {
  const ours = devices.filter((d) => attached.includes(d.name) && d.ifindex > 0);
  if (!ours.some((d) => d.addresses.includes(snatIPv4))) return [];
  return ours
    .filter((d) => d.addresses.length > 0 && !d.addresses.includes(snatIPv4))
    .map((d) => ({ name: d.name, ifindex: d.ifindex, address: d.addresses[0]! }));
}

export class SnatDevices {
  private listed: SnatDevice[] = [];
  /** Written once: a previous agent's entries and flag (pinned) are not taken on trust. */
  private written = false;

  constructor(
    private readonly map: BpfMap<number, string>,
    private readonly epoch: Pick<HopEpoch, 'setSnatByDevice'>,
  ) {}

  /** The map made to hold exactly these devices; the flag follows (set after the first entry, cleared before the last goes). */
  apply(devices: readonly SnatDevice[]): boolean {
    if (devices.length > this.map.maxEntries) {
      throw new FerryError({ code: ErrorCode.MapFull, op: 'list the devices SNAT flows take their address from', cause: `${devices.length} devices, room for ${this.map.maxEntries}`, hint: 'name fewer devices' });
    }
    const want = new Map(devices.map((d) => [d.ifindex, d]));
    const same = want.size === this.listed.length && this.listed.every((d) => want.get(d.ifindex)?.address === d.address);
    if (same && this.written) return false;
    if (want.size === 0) this.epoch.setSnatByDevice(false);
    for (const ifindex of [...this.map.keys()]) if (!want.has(ifindex)) this.map.delete(ifindex);
    for (const d of want.values()) this.map.update(d.ifindex, d.address);
    if (want.size > 0) this.epoch.setSnatByDevice(true);
    this.listed = [...want.values()];
    this.written = true;
    return true;
  }

  /** The devices listed now. */
  list(): SnatDevice[] {
    return [...this.listed];
  }
}
