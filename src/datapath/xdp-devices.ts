// ferry's XDP, per device: one program copy each (with the device's MAC), native or generic,
// and the devices XDP may send a frame out of besides the one it arrived on
// (xdp_tx_devices). A frame XDP redirects to a device that cannot take it (a VXLAN overlay,
// a VLAN, a NIC without XDP, a veth whose peer runs no XDP) is dropped by the kernel, so
// only devices running ferry's XDP natively whose driver says it takes redirected frames
// (NETDEV_XDP_ACT_NDO_XMIT) are listed; a flow routed out of any other is tc's.
import type { BpfMap } from '../ebpf/map.js';
import type { BpfObject, Program } from '../ebpf/object.js';
import type { Link } from '../ebpf/link.js';
import { attachXdpDevice, detachXdpDevice, programNameById, xdpAttached, type XdpMode } from '../ebpf/link-xdp.js';
import { ErrorCode, type FerryError } from '../errors.js';
import { interfaceInfo } from '../sys/interfaces.js';
import { NETDEV_XDP_ACT_NDO_XMIT, xdpFeatures } from '../sys/netdev-features.js';

/** The program name of ferry's XDP entry (bpf/xdp.bpf.c). */
export const XDP_PROGRAM = 'xdp_ingress';

/** Where XDP runs on a device ('off': left to tc by the agent's choice), and whether XDP
 * elsewhere may send frames out of it (and if not, or if off, why). */
export interface XdpDeviceState {
  mode: XdpMode | 'off';
  redirectTarget: boolean;
  reason?: string;
}

/** The agent's word on one device: leave XDP off it (and why), and whether `best-effort`
 * may run generic XDP there when the driver has none (only where the operator named the
 * device: generic XDP turns the device's GRO off). */
export interface XdpDeviceChoice {
  leaveOff?: string;
  genericFallback?: boolean;
}

/** Why best-effort left a device without driver XDP alone. */
export const NO_DRIVER_XDP = "its driver has no XDP, and generic XDP would turn the device's GRO off (name it in xdpDevices to run generic XDP there)";

export class XdpDevices {
  private readonly byDevice = new Map<string, { obj: BpfObject; mode: XdpMode; link: Link; ifindex: number; target: boolean; reason?: string }>();
  /** Devices whose XDP the agent left off although acceleration is on, and why. */
  private readonly leftOff = new Map<string, string>();

  constructor(
    /** The XDP object for a device with this MAC, loaded. */
    private readonly load: (mac: string) => BpfObject,
    private readonly targets: BpfMap<number, number>,
    private readonly features: typeof xdpFeatures = xdpFeatures,
  ) {}

  /**
   * XDP on a device as the acceleration setting says (in the calling thread's netns): native;
   * where the driver has none, an error under native, and under best-effort generic XDP if
   * the choice allows it, else nothing (Cilium's best-effort). none, or the choice's reason
   * to leave this device off, takes a previous agent's program off.
   */
  attach(ifname: string, acceleration: 'none' | 'native' | 'best-effort', choice: XdpDeviceChoice = {}): Link | undefined {
    const leaveOff = acceleration === 'none' ? undefined : choice.leaveOff;
    if (acceleration === 'none' || leaveOff !== undefined) return this.leave(ifname, leaveOff);
    try {
      return this.set(ifname, 'native');
    } catch (e) {
      if (acceleration !== 'best-effort' || (e as FerryError).code !== ErrorCode.XdpUnsupported) throw e;
      return choice.genericFallback ? this.set(ifname, 'generic') : this.leave(ifname, NO_DRIVER_XDP);
    }
  }

  /** No XDP of ferry's on `ifname` (a previous agent's taken off); `reason`: why, when acceleration is on. */
  private leave(ifname: string, reason: string | undefined): undefined {
    const have = xdpAttached(ifname);
    if (have && programNameById(have.id) === XDP_PROGRAM) detachXdpDevice(ifname);
    if (reason !== undefined) this.leftOff.set(ifname, reason);
    return undefined;
  }

  /** ferry's XDP on `ifname` in `mode`, in place of this process's program there (if any). */
  set(ifname: string, mode: XdpMode): Link {
    const info = interfaceInfo(ifname);
    const obj = this.load(info.mac);
    try {
      const link = attachXdpDevice(obj.program(XDP_PROGRAM), ifname, mode);
      this.byDevice.get(ifname)?.obj.close();
      this.byDevice.set(ifname, { obj, mode, link, ifindex: info.ifindex, target: false });
      this.leftOff.delete(ifname);
      this.refreshTargets();
      return link;
    } catch (e) {
      obj.close();
      throw e;
    }
  }

  /** This process's XDP on `ifname` taken off; its link (closed) for the caller's lists. */
  remove(ifname: string): Link | undefined {
    const have = this.byDevice.get(ifname);
    if (!have) return undefined;
    have.link.close();
    have.obj.close();
    this.byDevice.delete(ifname);
    this.refreshTargets();
    return have.link;
  }

  /** A device that is gone (its program went with it): the object closed, nothing detached. */
  forget(ifname: string): void {
    this.leftOff.delete(ifname);
    this.byDevice.get(ifname)?.obj.close();
    if (this.byDevice.delete(ifname)) this.refreshTargets();
  }

  program(ifname: string): Program | undefined {
    return this.byDevice.get(ifname)?.obj.program(XDP_PROGRAM);
  }

  modes(): Record<string, XdpMode | 'off'> {
    return Object.fromEntries([...[...this.byDevice].map(([d, x]): [string, XdpMode | 'off'] => [d, x.mode]), ...[...this.leftOff.keys()].map((d): [string, 'off'] => [d, 'off'])]);
  }

  states(): Record<string, XdpDeviceState> {
    const off = [...this.leftOff].map(([d, reason]): [string, XdpDeviceState] => [d, { mode: 'off', redirectTarget: false, reason }]);
    return Object.fromEntries([...[...this.byDevice].map(([d, x]) => [d, { mode: x.mode, redirectTarget: x.target, ...(x.reason ? { reason: x.reason } : {}) }]), ...off]);
  }

  /**
   * xdp_tx_devices rewritten from the devices' current features (in the netns of the
   * devices): on every XDP change, and on each device scan, as a veth's follow its peer.
   */
  refreshTargets(): void {
    const want = new Set<number>();
    for (const x of this.byDevice.values()) {
      const f = x.mode === 'native' ? this.features(x.ifindex) : undefined;
      x.target = f !== undefined && 'features' in f && (f.features & NETDEV_XDP_ACT_NDO_XMIT) !== 0n;
      x.reason = x.target ? undefined : !f ? 'generic XDP' : 'unknown' in f ? f.unknown : 'the driver does not take redirected frames (no ndo_xdp_xmit)';
      if (x.target) want.add(x.ifindex);
    }
    for (const k of [...this.targets.keys()]) if (!want.has(k)) this.targets.delete(k);
    for (const k of want) this.targets.update(k, 1);
  }

  closeAll(): void {
    for (const x of this.byDevice.values()) x.obj.close();
    this.byDevice.clear();
    this.leftOff.clear();
  }
}
