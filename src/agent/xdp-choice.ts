// Which of ferry's devices get XDP when acceleration is on, and where best-effort may fall
// back to generic XDP. Named in `xdpDevices`: those (names or patterns, as `devices` takes
// them), generic XDP too where the driver has none. None named: every device but tunnels
// and devices stacked on another, which are left to tc (XDP cannot send a frame out of
// them, so flows routed through them are tc's anyway, and `native` then works with an
// overlay), and no generic XDP anywhere, as Cilium's best-effort: a generic XDP program
// turns its device's GRO off (the kernel's netif_elide_gro), which took a veth's TCP
// receive of MTU-sized frames to 0.39x (bench/generic-xdp-gro.ts), and on a VXLAN tunnel
// skips the tunnel's own GRO stage (0.60-0.69x without the underlay's GRO, while with it
// the stage was redundant and skipping it paid: bench/xdp-devices.ts).
import { ErrorCode, FerryError } from '../errors.js';
import type { XdpDeviceChoice } from '../datapath/xdp-devices.js';
import type { LinkInfo } from '../sys/links.js';
import { entryMatches } from './devices.js';

/** Link kinds that carry another network's packets over this one. */
const TUNNEL_KINDS = new Set(['vxlan', 'geneve', 'gre', 'gretap', 'ip6gre', 'ip6gretap', 'erspan', 'ip6erspan', 'ipip', 'sit', 'ip6tnl', 'vti', 'vti6', 'xfrm', 'wireguard', 'bareudp', 'gtp', 'amt']);
/** Link kinds made on another device, whose frames arrive through it. */
const STACKED_KINDS = new Set(['vlan', 'macvlan', 'macvtap', 'ipvlan', 'ipvtap']);

/** What XDP may do on `link` (one of ferry's devices) when acceleration is on. */
export function xdpDeviceChoice(wanted: readonly string[], link: Pick<LinkInfo, 'name' | 'kind'>): XdpDeviceChoice {
  if (wanted.length > 0) return wanted.some((w) => entryMatches(w, link.name)) ? { genericFallback: true } : { leaveOff: 'not named in xdpDevices' };
  const kind = link.kind ?? '';
  if (TUNNEL_KINDS.has(kind)) return { leaveOff: `a ${kind} tunnel: XDP cannot send frames out of it, and generic XDP would turn its GRO off (name it in xdpDevices to run XDP on it)` };
  if (STACKED_KINDS.has(kind)) return { leaveOff: `a ${kind} device: no driver XDP, and generic XDP would turn its GRO off (name it in xdpDevices to run XDP on it)` };
  return {};
}

/** The check at an agent's start: every `xdpDevices` entry takes one of ferry's devices (XDP runs only where tc does). */
export function checkXdpDevices(wanted: readonly string[], devices: readonly string[]): void {
  for (const w of wanted) {
    if (devices.some((d) => entryMatches(w, d))) continue;
    throw new FerryError({ code: ErrorCode.Config, op: 'choose the XDP devices', cause: `xdpDevices entry "${w}" takes none of ferry's devices (${devices.join(', ')})`, hint: 'XDP runs only on devices ferry serves: name them in devices too, or take the entry out' });
  }
}

/** At an agent's start: the entries checked against the chosen devices, and what XDP may do on each. */
export function xdpChoice(wanted: readonly string[], links: readonly LinkInfo[], devices: readonly string[]): (device: string) => XdpDeviceChoice {
  checkXdpDevices(wanted, devices);
  const byName = new Map(links.map((l) => [l.name, l]));
  return (device) => xdpDeviceChoice(wanted, byName.get(device) ?? { name: device });
}
