// This network namespace's links, their IPv4 addresses and the default routes' devices, as
// iproute2 reports them (`ip -j`): what the agent chooses its devices from.
import { execFileSync } from 'node:child_process';
import { ErrorCode, FerryError } from '../errors.js';

export interface LinkInfo {
  name: string;
  /** The kernel's index: a device deleted and made again under its name gets a new one. */
  ifindex: number;
  up: boolean;
  loopback: boolean;
  addresses: string[];
  /** A VLAN device: the device it is a VLAN of, and the VLAN's id. */
  vlan?: { parent: string; id: number };
  /** A port of a bond, bridge or team (not a VRF's member): its frames are that device's. */
  portOf?: string;
  /** What kind of link it is (`ip -d`'s info_kind: vxlan, vlan, bond, veth…); none for a plain NIC. */
  kind?: string;
}

/** One row of `ip -d -j addr show`, as far as ferry reads it. */
export interface IpLinkRow {
  ifname?: string;
  ifindex?: number;
  flags?: string[];
  link?: string;
  master?: string;
  linkinfo?: { info_kind?: string; info_data?: { id?: number }; info_slave_kind?: string };
  addr_info?: Array<{ family?: string; local?: string }>;
}

function ipJson(args: string[]): unknown {
  try {
    return JSON.parse(execFileSync('ip', ['-j', ...args], { encoding: 'utf8', timeout: 5000 }) || '[]');
  } catch (e) {
    throw new FerryError({ code: ErrorCode.Config, op: `ip -j ${args.join(' ')}`, cause: (e as Error).message, hint: 'iproute2 (ip) must be installed' });
  }
}

export function readLinks(): LinkInfo[] {
  // Every link (`ip -4 addr` would leave out the ones without an IPv4 address), its IPv4
  // addresses, and (-d) what kind of link it is.
  return parseLinks(ipJson(['-d', 'addr', 'show']) as IpLinkRow[]);
}

/** The names of this network namespace's links (up or not, with addresses or not). */
export function linkNames(): string[] {
  return (ipJson(['link', 'show']) as Array<{ ifname?: unknown }>).flatMap((r) => (typeof r.ifname === 'string' ? [r.ifname] : []));
}

export function parseLinks(rows: readonly IpLinkRow[]): LinkInfo[] {
  return rows.filter((r) => typeof r.ifname === 'string').map((r) => {
    const id = r.linkinfo?.info_data?.id;
    const vlan = r.linkinfo?.info_kind === 'vlan' && typeof r.link === 'string' && typeof id === 'number' ? { parent: r.link, id } : undefined;
    // A VRF's member keeps its own frames (the VRF only picks its routing table).
    const portOf = typeof r.master === 'string' && r.linkinfo?.info_slave_kind !== 'vrf' ? r.master : undefined;
    return {
      name: r.ifname!,
      ifindex: r.ifindex ?? 0,
      up: (r.flags ?? []).includes('UP'),
      loopback: (r.flags ?? []).includes('LOOPBACK'),
      addresses: (r.addr_info ?? []).filter((a) => a.family === 'inet').map((a) => a.local).filter((a): a is string => typeof a === 'string'),
      ...(vlan ? { vlan } : {}),
      ...(portOf ? { portOf } : {}),
      ...(typeof r.linkinfo?.info_kind === 'string' ? { kind: r.linkinfo.info_kind } : {}),
    };
  });
}

export function defaultRouteDevices(): string[] {
  const rows = ipJson(['-4', 'route', 'show', 'default']) as Array<{ dev?: string; nexthops?: Array<{ dev?: string }> }>;
  return [...new Set(rows.flatMap((r) => [r.dev, ...(r.nexthops ?? []).map((n) => n.dev)]).filter((d): d is string => typeof d === 'string'))];
}

/** A link's MAC address (link/ether), if it has one. */
export function linkMac(name: string): string | undefined {
  const rows = ipJson(['link', 'show', 'dev', name]) as Array<{ link_type?: string; address?: string }>;
  const r = rows[0];
  return r?.link_type === 'ether' && r.address && r.address !== '00:00:00:00:00:00' ? r.address : undefined;
}
