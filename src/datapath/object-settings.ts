// The node's settings as every entry object (tc, sock, xdp) gets them before it loads: map
// sizes, the hash seed, the host's netns, the pins to share, and for the objects that
// forward packets, the forwarding constants (lib/config.h).
import { join } from 'node:path';
import { BpfObject } from '../ebpf/object.js';
import { FwdMode, mapOptions, type MapName } from './layouts.js';
import { DEFAULT_SNAT_PORTS, type DatapathConfig, type MapSizes } from './loader.js';
import type { LayoutMigration } from './layout-migration.js';

/** Which size setting each map follows (undefined: fixed). */
const sizeOf: Record<MapName, keyof MapSizes | undefined> = {
  lb4_services: 'services',
  lb4_backends: 'backends',
  lb4_reverse_nat: 'reverseNat',
  lb4_backend_ids: 'backends',
  lb4_backend_hops: 'backends',
  lb4_addr_filter: undefined,
  lb4_names: 'reverseNat',
  lb4_src_ranges: 'sourceRanges',
  lb4_affinity: 'affinity',
  lb4_maglev: 'maglevTables',
  lb4_sock_rev: 'sockReverse',
  lb6_services: 'services',
  lb6_affinity: 'affinity',
  lb6_sock_rev: 'sockReverse',
  lb6_names: 'reverseNat',
  lb6_src_ranges: 'sourceRanges',
  lb4_netns_sources: undefined,
  lb6_netns_sources: undefined,
  ct4: 'conntrack',
  nat4: 'nat',
  ct6: 'conntrack',
  nat6: 'nat',
  fib6_hops: undefined,
  pkt6_handoff: undefined,
  nat6_handoff: undefined,
  frag4: 'fragments',
  frag6: 'fragments',
  frag6_scratch: undefined,
  node4_addrs: 'nodes',
  l2_owned: 'l2Addresses',
  icmp_ratelimit: undefined,
  ferry_stats: undefined,
  ferry_drops: undefined,
  ferry_monitor: undefined,
  ferry_monitor_lease: undefined,
  ferry_handover: undefined,
  ferry_hop_epoch: undefined,
  ferry_scratch: undefined,
  ct4_fresh: undefined,
  host_ports: undefined,
  xdp_tx_devices: undefined,
  snat4_devices: undefined,
  snat4_address: undefined,
  snat6_address: undefined,
};

/** What every entry object shares: map sizes, the hash seed, the host's netns, the pins. */
export function configureObject(obj: BpfObject, cfg: DatapathConfig, sizes: MapSizes, replace?: LayoutMigration['decide']): void {
  // Sparse arrays are indexed by an id and hold slot 0 too (id 0 is none), so that the
  // setting counts ids.
  for (const [name, setting] of Object.entries(sizeOf)) if (setting) obj.setMaxEntries(name, sizes[setting] + (mapOptions(name as MapName).sparse ? 1 : 0));
  obj.setConstant('hash_seed', cfg.hashSeed ?? 0);
  obj.setConstant('host_netns_cookie', cfg.hostNetnsCookie ?? 0n);
  obj.pinMaps({ dir: cfg.pinDir, ...(replace ? { replace } : {}) });
}

/** The node's forwarding settings, for the objects that forward packets (tc, xdp). */
export function setForwardingConstants(obj: BpfObject, cfg: DatapathConfig): void {
  obj.setConstant('forwarding_mode', { snat: FwdMode.FWD_MODE_SNAT, dsr: FwdMode.FWD_MODE_DSR, hybrid: FwdMode.FWD_MODE_HYBRID }[cfg.forwardingMode ?? 'snat']);
  obj.setConstant('maglev_table_size', cfg.maglevTableSize ?? 0);
  obj.setConstant('snat_port_min', cfg.snatPortMin ?? DEFAULT_SNAT_PORTS.min);
  obj.setConstant('snat_port_max', cfg.snatPortMax ?? DEFAULT_SNAT_PORTS.max);
  const lt = cfg.ctLifetimes ?? {};
  if (lt.tcpSyn !== undefined) obj.setConstant('ct_lifetime_tcp_syn', lt.tcpSyn);
  if (lt.tcpEstablished !== undefined) obj.setConstant('ct_lifetime_tcp_established', lt.tcpEstablished);
  if (lt.tcpClosing !== undefined) obj.setConstant('ct_lifetime_tcp_closing', lt.tcpClosing);
  if (lt.nonTcp !== undefined) obj.setConstant('ct_lifetime_nontcp', lt.nonTcp);
  if (cfg.icmpRatePerSec !== undefined) obj.setConstant('icmp_rate_per_sec', cfg.icmpRatePerSec);
  if (cfg.icmpBurst !== undefined) obj.setConstant('icmp_burst', cfg.icmpBurst);
}

/** The XDP program for one device: the node's settings, the device's MAC, the pinned maps. */
export function loadXdpObject(cfg: DatapathConfig, sizes: MapSizes, mac: string): BpfObject {
  const obj = BpfObject.open(join(cfg.objectsDir, 'xdp.bpf.o'));
  try {
    configureObject(obj, cfg, sizes);
    setForwardingConstants(obj, cfg);
    obj.setConstant('device_mac', Buffer.from(mac.split(':').map((h) => parseInt(h, 16))));
    obj.load();
    return obj;
  } catch (e) {
    obj.close();
    throw e;
  }
}

