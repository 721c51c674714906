// Which destination addresses may be a Service's: lb4_addr_filter, a 65536-bit set the
// datapath reads before its frontend lookups (bpf/lib/lb.h lb4_maybe_service). A packet to
// an address whose bit is clear (pod-to-pod traffic across nodes, the host's own) is passed
// on without the two hash lookups that would miss. The service writer holds every address
// of an external frontend or wildcard entry here; a bit is set while any address hashing
// to it is held. A set bit too many costs lookups; a clear bit too few would pass a
// Service's packets by, so an address's bit is set before its entries are written and
// cleared only after they are gone.
import { ipv4FromString } from '../ebpf/codec.js';
import { ADDR_FILTER_BYTES } from './layouts.js';
import type { DatapathMaps } from './loader.js';

/** The bit an address takes: lb4_addr_hash in bpf/lib/lb.h (the top 16 bits of Knuth's
 * multiplicative hash of the address in host order). */
export function addressBit(address: string): number {
  return Math.imul(ipv4FromString(address), 2654435761) >>> 16;
}

export class ServiceAddressFilter {
  /** Entries that hold each address (external frontends, and its wildcard). */
  private readonly refs = new Map<string, number>();
  /** Held addresses per bit. */
  private readonly perBit: Uint32Array;
  private readonly bits: Buffer;
  /** What the map was last given (none yet: a restart or an upgrade must write it). */
  private written: Buffer | undefined;

  constructor(private readonly map: DatapathMaps['lb4_addr_filter']) {
    this.bits = Buffer.alloc(ADDR_FILTER_BYTES);
    this.perBit = new Uint32Array(this.bits.length * 8);
  }

  /** One more (`by` > 0) or one less entry holds `address`. */
  hold(address: string, by: number): void {
    const was = this.refs.get(address) ?? 0;
    const now = was + by;
    if (now > 0) this.refs.set(address, now);
    else this.refs.delete(address);
    if (was <= 0 && now > 0) this.count(address, +1);
    else if (was > 0 && now <= 0) this.count(address, -1);
  }

  /** Before entries for `addresses` are written: the map has their bits (and every bit it had). */
  admit(addresses: Iterable<string>): void {
    const extra: number[] = [];
    for (const a of addresses) {
      const bit = addressBit(a);
      if (!this.isSet(bit)) extra.push(bit);
    }
    const bits = Buffer.from(this.bits);
    for (const bit of extra) bits[bit >> 3]! |= 1 << (bit & 7);
    this.write(bits);
  }

  /** After the entries are written and removed: the map says exactly what is held. */
  flush(): void {
    this.write(Buffer.from(this.bits));
  }

  /** One map update, when the map would say something else. */
  private write(bits: Buffer): void {
    if (this.written?.equals(bits)) return;
    this.map.update(0, { ready: 1, bits });
    this.written = bits;
  }

  /** Forget everything held (the writer reads its view from the maps again). */
  reset(): void {
    this.refs.clear();
    this.perBit.fill(0);
    this.bits.fill(0);
    this.written = undefined;
  }

  /** Addresses held (for tests and the CLI). */
  addresses(): string[] {
    return [...this.refs.keys()];
  }

  private isSet(bit: number): boolean {
    return ((this.bits[bit >> 3]! >> (bit & 7)) & 1) === 1;
  }

  private count(address: string, by: number): void {
    const bit = addressBit(address);
    const n = (this.perBit[bit] = this.perBit[bit]! + by);
    const set = n > 0;
    if (set === this.isSet(bit)) return;
    if (set) this.bits[bit >> 3]! |= 1 << (bit & 7);
    else this.bits[bit >> 3]! &= ~(1 << (bit & 7));
  }
}
