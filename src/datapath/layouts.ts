// The TypeScript side of bpf/shared: one codec per shared struct and one mirror per shared
// enum. Codecs are checked against the objects' BTF whenever a map is opened or adopted;
// the enum mirrors by a test against bpf/tests/contract.bpf.c.
import { ipv4Codec, structCodec, u32Codec, u64Codec, u8Codec, type Codec } from '../ebpf/codec.js';
import type { BpfMap } from '../ebpf/map.js';
import type { ProtoName } from '../model/frontend.js';
import { Ct6Dir, Lb6SrcRangeBits, ct6EntryCodec, ct6KeyCodec, nat6EntryCodec, lb6AffinityKeyCodec, lb6AffinityValueCodec, lb6KeyCodec, lb6ServiceCodec, lb6SockKeyCodec, lb6SockValueCodec, lb6SrcRangeKeyCodec, lb6NetnsSourceCodec, node6AddressCodec, fib6HopKeyCodec, fib6HopCodec, nat6EndsCodec, pkt6HandoffCodec, frag6KeyCodec, frag6EntryCodec, frag6RecordCodec } from './layouts6.js';

export const LbScope = { LB_SCOPE_EXTERNAL: 0, LB_SCOPE_INTERNAL: 1 } as const;

export const LbFlags = {
  LB_F_CLUSTER_IP: 1 << 0,
  LB_F_NODE_PORT: 1 << 1,
  LB_F_LOAD_BALANCER: 1 << 2,
  LB_F_EXTERNAL_IP: 1 << 3,
  LB_F_WILDCARD: 1 << 4,
  LB_F_NODE_PORT_ANY: 1 << 5,
  LB_F_DROP_WHEN_EMPTY: 1 << 6,
  LB_F_SOURCE_RANGES: 1 << 7,
  LB_F_FWD_DSR: 1 << 8,
  LB_F_FWD_SNAT: 1 << 9,
  LB_F_LOCAL_ONLY: 1 << 10,
} as const;

export const FwdMode = { FWD_MODE_SNAT: 0, FWD_MODE_DSR: 1, FWD_MODE_HYBRID: 2 } as const;
export const DsrOption = { DSR_OPT_TYPE: 0x9e, DSR_OPT_LEN: 8 } as const;

export const BackendFlags = { LB_BACKEND_F_LOCAL: 1 << 0, LB_BACKEND_F_TERMINATING: 1 << 1 } as const;

export const CtFlags = { CT_F_LOCAL: 1 << 0, CT_F_SNAT: 1 << 1, CT_F_SEEN_REPLY: 1 << 2, CT_F_CLOSING: 1 << 3, CT_F_DSR: 1 << 4, CT_F_RESET: 1 << 5, CT_F_ESTABLISHED: 1 << 6, CT_F_RANGED: 1 << 7 } as const;
export const FragAction = { FRAG_ACT_PASS: 0, FRAG_ACT_REDIRECT: 1 } as const;

export const CtLifetime = {
  CT_LIFETIME_TCP_SYN: 60,
  CT_LIFETIME_TCP_ESTABLISHED: 21600,
  CT_LIFETIME_TCP_CLOSING: 10,
  CT_LIFETIME_NONTCP: 60,
} as const;

export const Stat = {
  STAT_FWD_LOCAL: 0,
  STAT_FWD_REMOTE: 1,
  STAT_REPLY_LOCAL: 2,
  STAT_REPLY_REMOTE: 3,
  STAT_ICMP_REJECT: 4,
  STAT_ICMP_RELATED: 5,
  STAT_SOCK_XLATE: 6,
  STAT_SOCK_REJECT: 7,
  STAT_CT_REBALANCED: 8,
  STAT_FWD_DSR: 9,
  STAT_DSR_RECEIVED: 10,
  STAT_ICMP_FRAG_NEEDED: 11,
  STAT_NAT_EARLY_DROP: 12,
  STAT_ICMP_TIME_EXCEEDED: 13,
  STAT_FRAGMENT: 14,
  STAT_ARP_REPLY: 15,
  STAT_DSR_CONTESTED: 16,
  STAT_CT_MIDSTREAM: 17,
  STAT_LOCAL_CONTESTED: 18,
  STAT_LOCAL_REMAPPED: 19,
  STAT_FWD_LOCAL6: 20,
  STAT_REPLY_LOCAL6: 21,
  STAT_FWD_REMOTE6: 22,
  STAT_REPLY_REMOTE6: 23,
  STAT_MAX: 24,
} as const;

export const DropReason = {
  DROP_NONE: 0,
  DROP_UNKNOWN_PORT: 1,
  DROP_NO_BACKEND: 2,
  DROP_NAT_EXHAUSTED: 3,
  DROP_MALFORMED: 4,
  DROP_FIB_FAILED: 5,
  DROP_CT_MAP_FULL: 6,
  DROP_BACKEND_MISSING: 7,
  DROP_FRAGMENT: 8,
  DROP_CSUM_FAILED: 9,
  DROP_NO_LOCAL_BACKEND: 10,
  DROP_SOURCE_RANGE: 11,
  DROP_DSR_OPTION: 12,
  DROP_DSR_INVALID: 13,
  DROP_TTL_EXCEEDED: 14,
  DROP_ICMP_RATELIMIT: 15,
  DROP_HANDOVER_UNBOUND: 16,
  DROP_SOURCE_UNKNOWN: 17,
  DROP_TOO_BIG: 18,
  DROP_TUPLE_TAKEN: 19,
  DROP_REMOTE_IPV6: 20,
  DROP_NOT_SERVED: 21,
  DROP_REASON_MAX: 32,
} as const;

export const EventType = { EVENT_DROP: 1, EVENT_TRACE: 2 } as const;
/** Bits of ferry_handover.until_ns (bpf/shared/ct.h). */
export const HandoverFlags = { FERRY_HANDOVER_CHAINED: 1 } as const;
/** Bits of ferry_hop_epoch.since_ns (bpf/shared/ct.h). */
export const HopEpochFlags = { FERRY_HOPS_PER_FLOW: 1, FERRY_SNAT_BY_DEVICE: 2, FERRY_HOP_EPOCH_FLAGS: 3 } as const;
/** host_ports' slots (bpf/shared/ct.h, src/datapath/host-ports.ts). */
export const HostPortsSlot = { HOST_PORTS_WORDS: 1024, HOST_PORTS_AGENT: 1024, HOST_PORTS_TRUSTED: 2048, HOST_PORTS_SLOTS: 2049 } as const;
/** local_remap (bpf/shared/ct.h): how many client ports a new local flow on a held tuple tries. */
export const LocalRemap = { LOCAL_REMAP_TRIES: 8 } as const;
export const MonitorFlags = { MONITOR_DROPS: 1 << 0, MONITOR_TRACES: 1 << 1 } as const;
export const Hook = { HOOK_TC_INGRESS: 0, HOOK_TC_EGRESS: 1, HOOK_XDP: 2 } as const;
/** The pinned maps' layout (bpf/shared/types.h); older ones are in layout-history.ts. */
export const Layout = { FERRY_LAYOUT_VERSION: 6 } as const;
export const LAYOUT_VERSION = Layout.FERRY_LAYOUT_VERSION;

/** lb4_addr_filter's slots (src/datapath/address-filter.ts). */
export const FilterSlot = { LB4_FILTER_ADDRESSES: 0, LB4_FILTER_WILDCARDS: 1, LB4_FILTER_PORTS: 2, LB4_FILTER_SLOTS: 3 } as const;
/** How many first slots a master entry carries (struct lb4_service.first_backends). */
export const FirstSlots = { LB4_FIRST_SLOTS: 4 } as const;

/** Every mirrored enum, by its C name. */
export const sharedEnums: Record<string, Record<string, number>> = {
  lb_scope: LbScope,
  lb4_filter_slot: FilterSlot,
  lb4_first_slots: FirstSlots,
  lb_flags: LbFlags,
  fwd_mode: FwdMode,
  dsr_option: DsrOption,
  lb_backend_flags: BackendFlags,
  ct_flags: CtFlags,
  frag_action: FragAction,
  ct_lifetime: CtLifetime,
  ferry_stat: Stat,
  ferry_drop_reason: DropReason,
  ferry_event_type: EventType,
  ferry_monitor_flags: MonitorFlags,
  ferry_hook: Hook,
  ferry_layout: Layout,
  ferry_handover_flags: HandoverFlags,
  ferry_hop_epoch_flags: HopEpochFlags,
  host_ports_slot: HostPortsSlot,
  local_remap: LocalRemap,
  ct6_dir: Ct6Dir,
  lb6_src_range_bits: Lb6SrcRangeBits,
};

export const lb4KeyCodec = structCodec('lb4_key', {
  address: { type: 'ipv4' },
  port: { type: 'be16' },
  proto: { type: 'u8' },
  scope: { type: 'u8' },
  slot: { type: 'u16' },
  pad: { type: 'pad', length: 2 },
});
export type Lb4Key = ReturnType<typeof lb4KeyCodec.decode>;

export const lb4ServiceCodec = structCodec('lb4_service', {
  backendId: { type: 'u32' },
  revNatId: { type: 'u32' },
  affinityTimeout: { type: 'u32' },
  count: { type: 'u16' },
  flags: { type: 'u16' },
  affinityId: { type: 'u16' },
  pad: { type: 'pad', length: 2 },
  firstBackends: { type: 'u32s', count: FirstSlots.LB4_FIRST_SLOTS },
});
export type Lb4Service = ReturnType<typeof lb4ServiceCodec.decode>;

export const lb4BackendCodec = structCodec('lb4_backend', {
  address: { type: 'ipv4' },
  port: { type: 'be16' },
  proto: { type: 'u8' },
  flags: { type: 'u8' },
});
export type Lb4Backend = ReturnType<typeof lb4BackendCodec.decode>;

/** lb4_backend_ids' key: a backend's endpoint (the writer keeps endpoint → id there). */
export const lb4BackendKeyCodec = structCodec('lb4_backend_key', {
  address: { type: 'ipv4' },
  port: { type: 'be16' },
  proto: { type: 'u8' },
  pad: { type: 'pad', length: 1 },
});
export type Lb4BackendKey = ReturnType<typeof lb4BackendKeyCodec.decode>;

/** Written by the datapath only: the route new SNAT flows to a backend share (bpf/lib/fib.h). */
export const lb4BackendHopCodec = structCodec('lb4_backend_hop', {
  lookedUpNs: { type: 'u64' },
  daddr: { type: 'ipv4' },
  saddr: { type: 'ipv4' },
  fromIfindex: { type: 'u32' },
  hopIfindex: { type: 'u32' },
  hopMacs: { type: 'bytes', length: 12 },
  pad: { type: 'pad', length: 4 },
});

export const lb4ReverseNatCodec = structCodec('lb4_reverse_nat', {
  address: { type: 'ipv4' },
  port: { type: 'be16' },
  pad: { type: 'pad', length: 2 },
});
export type Lb4ReverseNat = ReturnType<typeof lb4ReverseNatCodec.decode>;

export const lb4AffinityKeyCodec = structCodec('lb4_affinity_key', {
  netnsCookie: { type: 'u64' },
  client: { type: 'ipv4' },
  affinityId: { type: 'u16' },
  pad: { type: 'pad', length: 2 },
});
export const lb4AffinityValueCodec = structCodec('lb4_affinity_value', {
  lastUsedNs: { type: 'u64' },
  backendId: { type: 'u32' },
  pad: { type: 'pad', length: 4 },
});

export const lb4SrcRangeKeyCodec = structCodec('lb4_src_range_key', {
  prefixlen: { type: 'u32' },
  revNatId: { type: 'u32' },
  source: { type: 'ipv4' },
});
export type Lb4SrcRangeKey = ReturnType<typeof lb4SrcRangeKeyCodec.decode>;

export const lb4FrontendNameCodec = structCodec('lb4_frontend_name', { name: { type: 'bytes', length: 96 } });

export const lb4SockKeyCodec = structCodec('lb4_sock_key', {
  cookie: { type: 'u64' },
  address: { type: 'ipv4' },
  port: { type: 'be16' },
  pad: { type: 'pad', length: 2 },
});
export const lb4SockValueCodec = structCodec('lb4_sock_value', {
  address: { type: 'ipv4' },
  port: { type: 'be16' },
  pad: { type: 'pad', length: 2 },
  revNatId: { type: 'u32' },
});

export const lb4NetnsSourceCodec = structCodec('lb4_netns_source', { address: { type: 'ipv4' }, pad: { type: 'pad', length: 4 } });
export const node4AddressCodec = structCodec('node4_address', { address: { type: 'ipv4' } });

export const ct4KeyCodec = structCodec('ct4_key', {
  saddr: { type: 'ipv4' },
  daddr: { type: 'ipv4' },
  sport: { type: 'be16' },
  dport: { type: 'be16' },
  proto: { type: 'u8' },
  pad: { type: 'pad', length: 3 },
});
export type Ct4Key = ReturnType<typeof ct4KeyCodec.decode>;

export const ct4EntryCodec = structCodec('ct4_entry', {
  expiresNs: { type: 'u64' },
  createdNs: { type: 'u64' },
  backendId: { type: 'u32' },
  revNatId: { type: 'u32' },
  natAddr: { type: 'ipv4' },
  natPort: { type: 'be16' },
  flags: { type: 'u8' },
  tcpFlags: { type: 'u8' },
  packets: { type: 'u64' },
  bytes: { type: 'u64' },
  clientSeqNext: { type: 'u32' },
  ifindex: { type: 'u32' },
  hopIfindex: { type: 'u32' },
  hopMacs: { type: 'bytes', length: 12 },
});
export type Ct4Entry = ReturnType<typeof ct4EntryCodec.decode>;

export const nat4EntryCodec = structCodec('nat4_entry', {
  expiresNs: { type: 'u64' },
  clientAddr: { type: 'ipv4' },
  clientPort: { type: 'be16' },
  frontendPort: { type: 'be16' },
  frontendAddr: { type: 'ipv4' },
  revNatId: { type: 'u32' },
  flags: { type: 'u8' },
  pad: { type: 'pad', length: 1 },
  pendingPort: { type: 'be16' },
  pendingAddr: { type: 'ipv4' },
  packets: { type: 'u64' },
  bytes: { type: 'u64' },
  hopIfindex: { type: 'u32' },
  hopMacs: { type: 'bytes', length: 12 },
});
export type Nat4Entry = ReturnType<typeof nat4EntryCodec.decode>;

export const frag4KeyCodec = structCodec('frag4_key', {
  saddr: { type: 'ipv4' },
  daddr: { type: 'ipv4' },
  id: { type: 'be16' },
  proto: { type: 'u8' },
  pad: { type: 'pad', length: 1 },
});
export const frag4EntryCodec = structCodec('frag4_entry', {
  expiresNs: { type: 'u64' },
  saddr: { type: 'ipv4' },
  daddr: { type: 'ipv4' },
  action: { type: 'u8' },
  pad: { type: 'pad', length: 7 },
});

export const node4ValueCodec = structCodec('node4_value', { flags: { type: 'u8' }, pad: { type: 'pad', length: 3 } });
export const l2KeyCodec = structCodec('l2_key', { ifindex: { type: 'u32' }, addr: { type: 'ipv4' } });
export const l2EntryCodec = structCodec('l2_entry', { mac: { type: 'bytes', length: 6 }, pad: { type: 'pad', length: 2 }, expiresNs: { type: 'u64' } });
export type L2Key = ReturnType<typeof l2KeyCodec.decode>;
export type L2Entry = ReturnType<typeof l2EntryCodec.decode>;
export const icmpBucketCodec = structCodec('icmp_bucket', { lastNs: { type: 'u64' }, tokens: { type: 'u64' } });

/** A slot of lb4_addr_filter: 65536 bits (src/datapath/address-filter.ts). */
export const ADDR_FILTER_BYTES = 8192;
export const lb4AddrFilterCodec = structCodec('lb4_addr_filter', { ready: { type: 'u32' }, pad: { type: 'pad', length: 4 }, bits: { type: 'bytes', length: ADDR_FILTER_BYTES } });
export const handoverCodec = structCodec('ferry_handover', { untilNs: { type: 'u64' } });
export const hopEpochCodec = structCodec('ferry_hop_epoch', { sinceNs: { type: 'u64' } });
export const monitorCodec = structCodec('ferry_monitor', { flags: { type: 'u32' }, pad: { type: 'pad', length: 4 } });
export const monitorLeaseCodec = structCodec('ferry_monitor_lease', { untilNs: { type: 'u64' }, owner: { type: 'u32' }, pad: { type: 'pad', length: 4 } });
const address16 = { type: 'bytes', length: 16 } as const;
export const scratchCodec = structCodec('ferry_scratch', {
  lastDrop: { type: 'u32' }, lastStat: { type: 'u32' }, clockJiffies: { type: 'u64' }, clockNs: { type: 'u64' },
  inSaddr: address16, inDaddr: address16, inSport: { type: 'be16' }, inDport: { type: 'be16' }, inProto: { type: 'u8' }, inFamily: { type: 'u8' }, inPad: { type: 'pad', length: 2 },
});

export const counterCodec = structCodec('ferry_counter', { packets: { type: 'u64' }, bytes: { type: 'u64' } });

/**
 * Every datapath map: its codecs, the setting that resizes it, whether it is a sparse
 * array (indexed by an id, an all-zero slot is absent: MapOptions.sparse), and whether it
 * is scratch space whose contents live for one packet or are read again when missing (an
 * upgrade replaces it empty, whatever its layout was).
 */
export const mapSpecs = {
  lb4_services: { key: lb4KeyCodec, value: lb4ServiceCodec, sizeSetting: 'mapSizes.services' },
  lb4_backends: { key: u32Codec, value: lb4BackendCodec, sizeSetting: 'mapSizes.backends', sparse: true },
  lb4_reverse_nat: { key: u32Codec, value: lb4ReverseNatCodec, sizeSetting: 'mapSizes.reverseNat' },
  lb4_backend_ids: { key: lb4BackendKeyCodec, value: u32Codec, sizeSetting: 'mapSizes.backends' },
  lb4_backend_hops: { key: u32Codec, value: lb4BackendHopCodec, sizeSetting: 'mapSizes.backends', sparse: true },
  lb4_addr_filter: { key: u32Codec, value: lb4AddrFilterCodec, sizeSetting: undefined },
  // Outer map of the Maglev tables: written with inner map FDs, read back as map ids.
  lb4_maglev: { key: u32Codec, value: u32Codec, sizeSetting: 'mapSizes.maglevTables' },
  lb4_affinity: { key: lb4AffinityKeyCodec, value: lb4AffinityValueCodec, sizeSetting: 'mapSizes.affinity' },
  lb4_names: { key: u32Codec, value: lb4FrontendNameCodec, sizeSetting: 'mapSizes.reverseNat' },
  lb4_src_ranges: { key: lb4SrcRangeKeyCodec, value: u8Codec, sizeSetting: 'mapSizes.sourceRanges' },
  lb4_sock_rev: { key: lb4SockKeyCodec, value: lb4SockValueCodec, sizeSetting: 'mapSizes.sockReverse' },
  // IPv6 Services at the socket hooks (layouts6.ts), sized as their IPv4 counterparts.
  lb6_services: { key: lb6KeyCodec, value: lb6ServiceCodec, sizeSetting: 'mapSizes.services' },
  lb6_affinity: { key: lb6AffinityKeyCodec, value: lb6AffinityValueCodec, sizeSetting: 'mapSizes.affinity' },
  lb6_sock_rev: { key: lb6SockKeyCodec, value: lb6SockValueCodec, sizeSetting: 'mapSizes.sockReverse' },
  // An IPv6 frontend's master key → `namespace/name:port`, for the CLI.
  lb6_names: { key: lb6KeyCodec, value: lb4FrontendNameCodec, sizeSetting: 'mapSizes.reverseNat' },
  lb6_src_ranges: { key: lb6SrcRangeKeyCodec, value: u8Codec, sizeSetting: 'mapSizes.sourceRanges' },
  // Keyed by a network namespace's cookie.
  lb4_netns_sources: { key: u64Codec, value: lb4NetnsSourceCodec, sizeSetting: undefined },
  lb6_netns_sources: { key: u64Codec, value: lb6NetnsSourceCodec, sizeSetting: undefined },
  ct4: { key: ct4KeyCodec, value: ct4EntryCodec, sizeSetting: 'mapSizes.conntrack' },
  nat4: { key: ct4KeyCodec, value: nat4EntryCodec, sizeSetting: 'mapSizes.nat' },
  // IPv6 north-south flows to local backends, both directions (layouts6.ts).
  ct6: { key: ct6KeyCodec, value: ct6EntryCodec, sizeSetting: 'mapSizes.conntrack' },
  nat6: { key: ct6KeyCodec, value: nat6EntryCodec, sizeSetting: 'mapSizes.nat' },
  // Next hops of forwarded IPv6 packets by destination (written by the datapath).
  fib6_hops: { key: fib6HopKeyCodec, value: fib6HopCodec, sizeSetting: undefined },
  // A forwarded IPv6 packet as parsed, and its new ends, while tc_ingress sends it (per CPU).
  pkt6_handoff: { key: u32Codec, value: pkt6HandoffCodec, sizeSetting: undefined, scratch: true },
  nat6_handoff: { key: u32Codec, value: nat6EndsCodec, sizeSetting: undefined, scratch: true },
  frag4: { key: frag4KeyCodec, value: frag4EntryCodec, sizeSetting: 'mapSizes.fragments' },
  frag6: { key: frag6KeyCodec, value: frag6EntryCodec, sizeSetting: 'mapSizes.fragments' },
  frag6_scratch: { key: u32Codec, value: frag6RecordCodec, sizeSetting: undefined, scratch: true },
  node4_addrs: { key: ipv4Codec, value: node4ValueCodec, sizeSetting: 'mapSizes.nodes' },
  l2_owned: { key: l2KeyCodec, value: l2EntryCodec, sizeSetting: 'mapSizes.l2Addresses' },
  icmp_ratelimit: { key: u32Codec, value: icmpBucketCodec, sizeSetting: undefined },
  ferry_stats: { key: u32Codec, value: counterCodec, sizeSetting: undefined },
  ferry_drops: { key: u32Codec, value: counterCodec, sizeSetting: undefined },
  ferry_monitor: { key: u32Codec, value: monitorCodec, sizeSetting: undefined },
  ferry_monitor_lease: { key: u32Codec, value: monitorLeaseCodec, sizeSetting: undefined },
  ferry_handover: { key: u32Codec, value: handoverCodec, sizeSetting: undefined },
  ferry_hop_epoch: { key: u32Codec, value: hopEpochCodec, sizeSetting: undefined },
  ferry_scratch: { key: u32Codec, value: scratchCodec, sizeSetting: undefined, scratch: true },
  // A new flow's conntrack entry while its first packet is sent on (per CPU).
  ct4_fresh: { key: u32Codec, value: ct4EntryCodec, sizeSetting: undefined, scratch: true },
  host_ports: { key: u32Codec, value: u64Codec, sizeSetting: undefined },
  // Devices XDP may redirect frames to, by ifindex (lib/maps.h).
  xdp_tx_devices: { key: u32Codec, value: u8Codec, sizeSetting: undefined },
  // The address new SNAT flows routed out of a device leave from, by ifindex (snat-devices.ts).
  snat4_devices: { key: u32Codec, value: ipv4Codec, sizeSetting: undefined },
  // The node's addresses remote flows leave from, one slot each (snat-address.ts).
  snat4_address: { key: u32Codec, value: node4AddressCodec, sizeSetting: undefined },
  snat6_address: { key: u32Codec, value: node6AddressCodec, sizeSetting: undefined },
} as const;
export type MapName = keyof typeof mapSpecs;

/** How a datapath map is opened: its size setting (named when it is full), sparse or not. */
export function mapOptions(name: MapName): { sizeSetting?: string; sparse: boolean } {
  const spec: { sizeSetting?: string; sparse?: boolean } = mapSpecs[name];
  return { ...(spec.sizeSetting ? { sizeSetting: spec.sizeSetting } : {}), sparse: spec.sparse === true };
}

type SpecOf<N extends MapName> = (typeof mapSpecs)[N];
export type MapKey<N extends MapName> = SpecOf<N>['key'] extends Codec<infer K> ? K : never;
export type MapValue<N extends MapName> = SpecOf<N>['value'] extends Codec<infer V> ? V : never;
/** Every datapath map, typed by its codecs. */
export type DatapathMaps = { [N in MapName]: BpfMap<MapKey<N>, MapValue<N>> };

/** Protocol numbers as on the wire. */
export const Proto: Readonly<Record<ProtoName, number>> = { TCP: 6, UDP: 17, SCTP: 132 };
export function protoName(n: number): string {
  return (Object.entries(Proto).find(([, v]) => v === n)?.[0] ?? String(n)).toLowerCase();
}
