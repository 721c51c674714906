// The TypeScript side of bpf/shared/lb6.h (IPv6 Services) and bpf/shared/ct6.h (IPv6
// north-south flows). Checked against the objects' BTF as every codec in layouts.ts.
import { structCodec } from '../ebpf/codec.js';

export const lb6KeyCodec = structCodec('lb6_key', {
  address: { type: 'ipv6' },
  port: { type: 'be16' },
  proto: { type: 'u8' },
  scope: { type: 'u8' },
  slot: { type: 'u16' },
  pad: { type: 'pad', length: 2 },
});
export type Lb6Key = ReturnType<typeof lb6KeyCodec.decode>;

export const lb6ServiceCodec = structCodec('lb6_service', {
  address: { type: 'ipv6' },
  port: { type: 'be16' },
  count: { type: 'u16' },
  flags: { type: 'u16' },
  draining: { type: 'u16' },
  affinityTimeout: { type: 'u32' },
});
export type Lb6Service = ReturnType<typeof lb6ServiceCodec.decode>;

export const lb6AffinityKeyCodec = structCodec('lb6_affinity_key', {
  netnsCookie: { type: 'u64' },
  address: { type: 'ipv6' },
  port: { type: 'be16' },
  proto: { type: 'u8' },
  pad: { type: 'pad', length: 5 },
});

export const lb6AffinityValueCodec = structCodec('lb6_affinity_value', {
  lastUsedNs: { type: 'u64' },
  address: { type: 'ipv6' },
  port: { type: 'be16' },
  pad: { type: 'pad', length: 6 },
});

export const lb6SockKeyCodec = structCodec('lb6_sock_key', {
  cookie: { type: 'u64' },
  address: { type: 'ipv6' },
  port: { type: 'be16' },
  pad: { type: 'pad', length: 6 },
});

export const lb6SockValueCodec = structCodec('lb6_sock_value', {
  address: { type: 'ipv6' },
  port: { type: 'be16' },
  pad: { type: 'pad', length: 2 },
});

export const Ct6Dir = { CT6_DIR_CLIENT: 0, CT6_DIR_REPLY: 1 } as const;
/** An lb6_src_ranges key's frontend part, in bits: always matched whole. */
export const Lb6SrcRangeBits = { LB6_SRC_RANGE_FRONTEND_BITS: 160 } as const;

export const ct6KeyCodec = structCodec('ct6_key', {
  saddr: { type: 'ipv6' },
  daddr: { type: 'ipv6' },
  sport: { type: 'be16' },
  dport: { type: 'be16' },
  proto: { type: 'u8' },
  dir: { type: 'u8' },
  pad: { type: 'pad', length: 2 },
});
export type Ct6Key = ReturnType<typeof ct6KeyCodec.decode>;

export const ct6EntryCodec = structCodec('ct6_entry', {
  expiresNs: { type: 'u64' },
  addr: { type: 'ipv6' },
  port: { type: 'be16' },
  flags: { type: 'u8' },
  pad: { type: 'pad', length: 1 },
  natPort: { type: 'be16' },
  pad2: { type: 'pad', length: 2 },
});
export type Ct6Entry = ReturnType<typeof ct6EntryCodec.decode>;

/** Layouts 5 and before: before IPv6 SNAT (no port). */
export const ct6EntryV5Codec = structCodec('ct6_entry', {
  expiresNs: { type: 'u64' },
  addr: { type: 'ipv6' },
  port: { type: 'be16' },
  flags: { type: 'u8' },
  pad: { type: 'pad', length: 5 },
});

export const nat6EntryCodec = structCodec('nat6_entry', {
  expiresNs: { type: 'u64' },
  clientAddr: { type: 'ipv6' },
  frontendAddr: { type: 'ipv6' },
  clientPort: { type: 'be16' },
  frontendPort: { type: 'be16' },
  flags: { type: 'u8' },
  pad: { type: 'pad', length: 3 },
});
export type Nat6Entry = ReturnType<typeof nat6EntryCodec.decode>;

export const lb6SrcRangeKeyCodec = structCodec('lb6_src_range_key', {
  prefixlen: { type: 'u32' },
  frontend: { type: 'ipv6' },
  port: { type: 'be16' },
  proto: { type: 'u8' },
  pad: { type: 'pad', length: 1 },
  source: { type: 'ipv6' },
});
export type Lb6SrcRangeKey = ReturnType<typeof lb6SrcRangeKeyCodec.decode>;

export const lb6NetnsSourceCodec = structCodec('lb6_netns_source', {
  address: { type: 'ipv6' },
});
export const node6AddressCodec = structCodec('node6_address', { address: { type: 'ipv6' } });

export const fib6HopKeyCodec = structCodec('fib6_hop_key', {
  daddr: { type: 'ipv6' },
  saddr: { type: 'ipv6' },
  fromIfindex: { type: 'u32' },
  pad: { type: 'pad', length: 4 },
});

export const fib6HopCodec = structCodec('fib6_hop', {
  lookedUpNs: { type: 'u64' },
  ifindex: { type: 'u32' },
  macs: { type: 'bytes', length: 12 },
});

/** An IPv6 packet as the datapath parsed it, handed between tc_ingress's functions (per CPU, scratch). */
export const pkt6Codec = structCodec('pkt6', {
  saddr: { type: 'ipv6' },
  daddr: { type: 'ipv6' },
  sport: { type: 'be16' },
  dport: { type: 'be16' },
  proto: { type: 'u8' },
  tcpFlags: { type: 'u8' },
  icmpType: { type: 'u8' },
  fragment: { type: 'u8' },
  l4Off: { type: 'u32' },
  len: { type: 'u32' },
  fragId: { type: 'be32' },
});

/** The packet, and a new flow's chosen backend (port 0: none) and hash (pkt6_handoff, per CPU, scratch). */
export const pkt6HandoffCodec = structCodec('pkt6_handoff', {
  p: { type: 'struct', codec: pkt6Codec },
  backend: { type: 'ipv6' },
  backendPort: { type: 'be16' },
  ranged: { type: 'u8' },
  pad: { type: 'pad', length: 1 },
  hash: { type: 'u32' },
});

export const frag6KeyCodec = structCodec('frag6_key', {
  saddr: { type: 'ipv6' },
  daddr: { type: 'ipv6' },
  id: { type: 'be32' },
  proto: { type: 'u8' },
  pad: { type: 'pad', length: 3 },
});
export const frag6EntryCodec = structCodec('frag6_entry', {
  expiresNs: { type: 'u64' },
  saddr: { type: 'ipv6' },
  daddr: { type: 'ipv6' },
  action: { type: 'u8' },
  pad: { type: 'pad', length: 7 },
});
/** A frag6 write in the making, per CPU (scratch). */
export const frag6RecordCodec = structCodec('frag6_record', {
  key: { type: 'struct', codec: frag6KeyCodec },
  entry: { type: 'struct', codec: frag6EntryCodec },
});

/** The new ends of a forwarded IPv6 packet, handed between tc_ingress's functions (per CPU, scratch). */
export const nat6EndsCodec = structCodec('nat6_ends', {
  saddr: { type: 'ipv6' },
  daddr: { type: 'ipv6' },
  sport: { type: 'be16' },
  dport: { type: 'be16' },
  fromSport: { type: 'be16' },
  fromDport: { type: 'be16' },
  stat: { type: 'u32' },
});
