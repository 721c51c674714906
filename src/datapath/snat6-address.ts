// The node's IPv6 address that flows to remote IPv6 backends leave from (snat6_address):
// written when the datapath loads (the setting, else the Node's first IPv6 address), then
// by the agent whenever that address of its Node changes, so that a node which gains an
// IPv6 address after the agent started forwards IPv6 from then on. None: such flows are
// dropped (DROP_REMOTE_IPV6). Flows SNATed to an address the node loses end with it.
import { ErrorCode, FerryError } from '../errors.js';
import { ipv6Bytes, ipv6Text } from '../packet/addr.js';
import type { DatapathMaps } from './layouts.js';

const NONE = '::';

/** `address` as the map holds it (RFC 5952 text), or undefined for none; a bad one throws. */
export function snat6Canonical(address: string | undefined): string | undefined {
  if (!address) return undefined;
  let text: string;
  try {
    text = ipv6Text(ipv6Bytes(address));
  } catch {
    throw new FerryError({ code: ErrorCode.Config, op: 'set the IPv6 SNAT address', cause: `"${address}" is not an IPv6 address`, hint: 'check snatIPv6' });
  }
  const first = ipv6Bytes(text)[0]!;
  if (text === NONE || text === '::1' || first === 0xff || (first === 0xfe && (ipv6Bytes(text)[1]! & 0xc0) === 0x80)) {
    throw new FerryError({ code: ErrorCode.Config, op: 'set the IPv6 SNAT address', cause: `${text} is not an address a node's flows can leave from (unspecified, loopback, multicast or link-local)`, hint: 'check snatIPv6, or the Node\'s IPv6 InternalIP' });
  }
  return text;
}

/** A Node's first IPv6 address a flow can leave from; one that cannot (link-local, say) is passed over. */
export function snat6Pick(nodeAddresses6: readonly string[]): string | undefined {
  return nodeAddresses6.find((a) => {
    try {
      return snat6Canonical(a) !== undefined;
    } catch {
      return false;
    }
  });
}

export class Snat6Address {
  private current: string | undefined;

  constructor(private readonly map: DatapathMaps['snat6_address'], address: string | undefined) {
    this.current = snat6Canonical(address);
    this.map.update(0, { address: this.current ?? NONE });
  }

  /** The address new IPv6 SNAT flows take; undefined: none. */
  get(): string | undefined {
    return this.current;
  }

  /** The Node's first IPv6 address a flow can leave from (snat6Pick). */
  follow(nodeAddresses6: readonly string[]): { from?: string; to?: string } | undefined {
    return this.set(snat6Pick(nodeAddresses6));
  }

  /** Take `address` (undefined: none). Returns the change, or undefined if there was none. */
  set(address: string | undefined): { from?: string; to?: string } | undefined {
    const next = snat6Canonical(address);
    if (next === this.current) return undefined;
    this.map.update(0, { address: next ?? NONE });
    const change = { ...(this.current ? { from: this.current } : {}), ...(next ? { to: next } : {}) };
    this.current = next;
    return change;
  }
}
