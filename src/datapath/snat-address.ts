// The node's addresses that flows to remote backends leave from, one map slot per family
// (snat4_address, snat6_address): written when the datapath loads (the setting, else the
// Node's first usable address), then by the agent whenever that address of its Node
// changes, so that a renumbered node (a new DHCP lease, a re-addressed NIC) forwards from
// its new address without a restart, and a node that gains an IPv6 address forwards IPv6
// from then on. IPv4 always has one (the agent refuses to start without it; a Node that
// lists none keeps the last); IPv6 may have none, and such flows are then dropped
// (DROP_REMOTE_IPV6). Flows SNATed to an address the node loses end with it.
import { isIPv4 } from 'node:net';
import { ErrorCode, FerryError } from '../errors.js';
import { ipv6Bytes, ipv6Text } from '../packet/addr.js';

/** One family's rules: what an address a flow can leave from is, and what the slot holds for none. */
interface SnatFamily {
  setting: 'snatIPv4' | 'snatIPv6';
  none: string;
  /** Keeps the last address when a Node lists none (a node cannot forward IPv4 without one). */
  required: boolean;
  /** The address in the form the map holds; throws a reason when a flow cannot leave from it. */
  canonical(address: string): string;
}

const IPV4: SnatFamily = {
  setting: 'snatIPv4',
  none: '0.0.0.0',
  required: true,
  canonical(address) {
    if (!isIPv4(address)) throw new Error(`"${address}" is not an IPv4 address`);
    const first = Number(address.split('.')[0]);
    if (address === '0.0.0.0' || first === 127 || first >= 224) throw new Error(`${address} is not an address a node's flows can leave from (unspecified, loopback, multicast or reserved)`);
    return address;
  },
};

const IPV6: SnatFamily = {
  setting: 'snatIPv6',
  none: '::',
  required: false,
  canonical(address) {
    let text: string;
    try {
      text = ipv6Text(ipv6Bytes(address));
    } catch {
      throw new Error(`"${address}" is not an IPv6 address`);
    }
    const [first, second] = ipv6Bytes(text);
    if (text === '::' || text === '::1' || first === 0xff || (first === 0xfe && (second! & 0xc0) === 0x80)) {
      throw new Error(`${text} is not an address a node's flows can leave from (unspecified, loopback, multicast or link-local)`);
    }
    return text;
  },
};

function canonicalIn(family: SnatFamily, address: string | undefined): string | undefined {
  if (!address) return undefined;
  try {
    return family.canonical(address);
  } catch (e) {
    throw new FerryError({ code: ErrorCode.Config, op: `set the ${family.setting === 'snatIPv4' ? 'IPv4' : 'IPv6'} SNAT address`, cause: (e as Error).message, hint: `check ${family.setting}, or the Node's InternalIP` });
  }
}

function pickIn(family: SnatFamily, nodeAddresses: readonly string[]): string | undefined {
  return nodeAddresses.find((a) => {
    try {
      return family.canonical(a) !== undefined;
    } catch {
      return false;
    }
  });
}

/** `address` as snat6_address holds it (RFC 5952 text), or undefined for none; a bad one throws. */
export const snat6Canonical = (address: string | undefined): string | undefined => canonicalIn(IPV6, address);
/** A Node's first IPv6 address a flow can leave from; one that cannot (link-local, say) is passed over. */
export const snat6Pick = (nodeAddresses6: readonly string[]): string | undefined => pickIn(IPV6, nodeAddresses6);
/** The IPv4 address a datapath loads with (snat4_address): one a flow can leave from, and there must be one. */
export function snat4Checked(address: string | undefined): string {
  const a = canonicalIn(IPV4, address);
  if (!a) throw new FerryError({ code: ErrorCode.Config, op: 'set the IPv4 SNAT address', cause: 'none given', hint: 'set snatIPv4, or give the Node an IPv4 InternalIP' });
  return a;
}
/** A Node's first IPv4 address a flow can leave from (snat4_address). */
export const snat4Pick = (nodeAddresses: readonly string[]): string | undefined => pickIn(IPV4, nodeAddresses);

/** The one slot of snat4_address or snat6_address. */
interface AddressSlot {
  update(key: number, value: { address: string }): void;
}

/** A change of the address: the old one and the new (either absent: none). */
export type SnatAddressChange = { from?: string; to?: string };

export class SnatAddress {
  private current: string | undefined;

  private constructor(private readonly map: AddressSlot, private readonly family: SnatFamily, address: string | undefined) {
    this.current = family.required ? snat4Checked(address) : canonicalIn(family, address);
    this.map.update(0, { address: this.current ?? family.none });
  }

  static ipv4(map: AddressSlot, address: string): SnatAddress {
    return new SnatAddress(map, IPV4, address);
  }

  static ipv6(map: AddressSlot, address: string | undefined): SnatAddress {
    return new SnatAddress(map, IPV6, address);
  }

  /** The address new SNAT flows take; undefined: none. */
  get(): string | undefined {
    return this.current;
  }

  /** The Node's first address of the family a flow can leave from; for IPv4, none keeps the last. */
  follow(nodeAddresses: readonly string[]): SnatAddressChange | undefined {
    const next = pickIn(this.family, nodeAddresses);
    if (!next && this.family.required) return undefined;
    return this.set(next);
  }

  /** Take `address` (undefined: none, refused for IPv4). Returns the change, or undefined if there was none. */
  set(address: string | undefined): SnatAddressChange | undefined {
    const next = canonicalIn(this.family, address);
    if (!next && this.family.required) throw new FerryError({ code: ErrorCode.Config, op: 'set the IPv4 SNAT address', cause: 'IPv4 flows to remote backends need one', hint: 'give an IPv4 address' });
    if (next === this.current) return undefined;
    this.map.update(0, { address: next ?? this.family.none });
    const change = { ...(this.current ? { from: this.current } : {}), ...(next ? { to: next } : {}) };
    this.current = next;
    return change;
  }
}
