// Which packets may be a Service's: lb4_addr_filter, three 65536-bit sets the datapath
// reads before any lookup (bpf/lib/lb.h lb4_maybe_service): the addresses an external
// frontend or wildcard entry holds, the addresses with a wildcard, and the ports of
// external frontends. A packet to an address not held (pod-to-pod traffic across nodes),
// or to a port no frontend uses at an address without a wildcard (the host's own traffic
// to a node address), is passed on without the lookups that would miss. The service
// writer holds every address and port here; a bit is set while anything held takes it. A
// set bit too many costs lookups; a clear bit too few would pass a Service's packets by,
// so bits are set before their entries are written and cleared only after they are gone.
import { ipv4FromString } from '../ebpf/codec.js';
import { ADDR_FILTER_BYTES, FilterSlot } from './layouts.js';
import type { DatapathMaps } from './loader.js';

/** The bit an address takes: lb4_addr_hash in bpf/lib/lb.h (the top 16 bits of Knuth's
 * multiplicative hash of the address in host order). */
export function addressBit(address: string): number {
  return Math.imul(ipv4FromString(address), 2654435761) >>> 16;
}

/** A set of 65536 bits, each set while anything held takes it. */
class CountedBits<K> {
  /** How many holders each key has. */
  private readonly refs = new Map<K, number>();
  /** Held keys per bit. */
  private readonly perBit = new Uint32Array(ADDR_FILTER_BYTES * 8);
  readonly bits = Buffer.alloc(ADDR_FILTER_BYTES);

  constructor(readonly bitOf: (key: K) => number) {}

  hold(key: K, by: number): void {
    const was = this.refs.get(key) ?? 0;
    const now = was + by;
    if (now > 0) this.refs.set(key, now);
    else this.refs.delete(key);
    if (was <= 0 && now > 0) this.count(this.bitOf(key), +1);
    else if (was > 0 && now <= 0) this.count(this.bitOf(key), -1);
  }

  /** The bits, with those of `keys` set too. */
  withKeys(keys: Iterable<K>): Buffer {
    const bits = Buffer.from(this.bits);
    for (const k of keys) {
      const bit = this.bitOf(k);
      bits[bit >> 3]! |= 1 << (bit & 7);
    }
    return bits;
  }

  keys(): K[] {
    return [...this.refs.keys()];
  }

  clear(): void {
    this.refs.clear();
    this.perBit.fill(0);
    this.bits.fill(0);
  }

  private count(bit: number, by: number): void {
    const set = (this.perBit[bit] = this.perBit[bit]! + by) > 0;
    if (set) this.bits[bit >> 3]! |= 1 << (bit & 7);
    else this.bits[bit >> 3]! &= ~(1 << (bit & 7));
  }
}

export class ServiceAddressFilter {
  private readonly sets = {
    [FilterSlot.LB4_FILTER_ADDRESSES]: new CountedBits<string>(addressBit),
    [FilterSlot.LB4_FILTER_WILDCARDS]: new CountedBits<string>(addressBit),
    [FilterSlot.LB4_FILTER_PORTS]: new CountedBits<number>((port) => port),
  };
  /** What each slot was last given (none yet: a restart or an upgrade must write it). */
  private readonly written = new Map<number, Buffer>();

  constructor(private readonly map: DatapathMaps['lb4_addr_filter']) {}

  /** One more (`by` > 0) or one less external frontend at address:port. */
  holdFrontend(address: string, port: number, by: number): void {
    this.sets[FilterSlot.LB4_FILTER_ADDRESSES].hold(address, by);
    this.sets[FilterSlot.LB4_FILTER_PORTS].hold(port, by);
  }

  /** The address's wildcard entry is written (`by` > 0) or gone. */
  holdWildcard(address: string, by: number): void {
    this.sets[FilterSlot.LB4_FILTER_ADDRESSES].hold(address, by);
    this.sets[FilterSlot.LB4_FILTER_WILDCARDS].hold(address, by);
  }

  /** Before the entries of `frontends` and `wildcards` are written: the map has their bits (and every bit it had). */
  admit(frontends: Iterable<{ address: string; port: number }>, wildcards: Iterable<string>): void {
    const fs = [...frontends];
    const ws = [...wildcards];
    this.write(FilterSlot.LB4_FILTER_ADDRESSES, this.sets[FilterSlot.LB4_FILTER_ADDRESSES].withKeys([...fs.map((f) => f.address), ...ws]));
    this.write(FilterSlot.LB4_FILTER_WILDCARDS, this.sets[FilterSlot.LB4_FILTER_WILDCARDS].withKeys(ws));
    this.write(FilterSlot.LB4_FILTER_PORTS, this.sets[FilterSlot.LB4_FILTER_PORTS].withKeys(fs.map((f) => f.port)));
  }

  /** After the entries are written and removed: the map says exactly what is held. */
  flush(): void {
    for (const [slot, set] of Object.entries(this.sets)) this.write(Number(slot), Buffer.from(set.bits));
  }

  /** One map update per slot, when the map would say something else. */
  private write(slot: number, bits: Buffer): void {
    if (this.written.get(slot)?.equals(bits)) return;
    this.map.update(slot, { ready: 1, bits });
    this.written.set(slot, bits);
  }

  /** Forget everything held (the writer reads its view from the maps again). */
  reset(): void {
    for (const set of Object.values(this.sets)) set.clear();
    this.written.clear();
  }

  /** Addresses held (for tests and the CLI). */
  addresses(): string[] {
    return this.sets[FilterSlot.LB4_FILTER_ADDRESSES].keys();
  }

  /** Ports held. */
  ports(): number[] {
    return this.sets[FilterSlot.LB4_FILTER_PORTS].keys();
  }
}
