// Which of ferry's devices get XDP when acceleration is on. Named in `xdpDevices`: those
// (names or patterns, as `devices` takes them). None named: every device but tunnels and
// devices stacked on another, which are left to tc, as Cilium's best-effort leaves every
// device without driver XDP: XDP cannot send a frame out of them, so flows routed through
// them are tc's whatever runs there, and generic XDP on them turns the device's own GRO off
// and copies every packet short of XDP's 256 bytes of headroom. In the sandbox, pod-to-pod
// traffic through a VXLAN tunnel ran at 0.60-0.69x with generic XDP on the tunnel where
// the underlay had no GRO (the tunnel's own GRO is what generic XDP turns off), and no
// slower where it had (bench/results/full/xdp-devices-*.md).
import { ErrorCode, FerryError } from '../errors.js';
import type { LinkInfo } from '../sys/links.js';
import { entryMatches } from './devices.js';

/** Link kinds that carry another network's packets over this one. */
const TUNNEL_KINDS = new Set(['vxlan', 'geneve', 'gre', 'gretap', 'ip6gre', 'ip6gretap', 'erspan', 'ip6erspan', 'ipip', 'sit', 'ip6tnl', 'vti', 'vti6', 'xfrm', 'wireguard', 'bareudp', 'gtp', 'amt']);
/** Link kinds made on another device, whose frames arrive through it. */
const STACKED_KINDS = new Set(['vlan', 'macvlan', 'macvtap', 'ipvlan', 'ipvtap']);

/** Why `link` (one of ferry's devices) is left to tc although acceleration is on; undefined: XDP runs on it. */
export function xdpLeftOff(wanted: readonly string[], link: Pick<LinkInfo, 'name' | 'kind'>): string | undefined {
  if (wanted.length > 0) return wanted.some((w) => entryMatches(w, link.name)) ? undefined : 'not named in xdpDevices';
  const kind = link.kind ?? '';
  if (TUNNEL_KINDS.has(kind)) return `a ${kind} tunnel: XDP cannot send frames out of it, and generic XDP there costs a copy of each packet short of headroom (name it in xdpDevices to run XDP on it)`;
  if (STACKED_KINDS.has(kind)) return `a ${kind} device: no driver XDP, and generic XDP there costs a copy of each packet short of headroom (name it in xdpDevices to run XDP on it)`;
  return undefined;
}

/** The check at an agent's start: every `xdpDevices` entry takes one of ferry's devices (XDP runs only where tc does). */
export function checkXdpDevices(wanted: readonly string[], devices: readonly string[]): void {
  for (const w of wanted) {
    if (devices.some((d) => entryMatches(w, d))) continue;
    throw new FerryError({ code: ErrorCode.Config, op: 'choose the XDP devices', cause: `xdpDevices entry "${w}" takes none of ferry's devices (${devices.join(', ')})`, hint: 'XDP runs only on devices ferry serves: name them in devices too, or take the entry out' });
  }
}

/** At an agent's start: the entries checked against the chosen devices, and the reason (if any) each device is left to tc. */
export function xdpChoice(wanted: readonly string[], links: readonly LinkInfo[], devices: readonly string[]): (device: string) => string | undefined {
  checkXdpDevices(wanted, devices);
  const byName = new Map(links.map((l) => [l.name, l]));
  return (device) => xdpLeftOff(wanted, byName.get(device) ?? { name: device });
}
