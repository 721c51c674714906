// BGP announcements, pure: BGPPeer and BGPAdvertisement objects read defensively (their
// values end up in FRR's configuration, so nothing that could break a line gets through),
// and what one node announces: its peers and a /32 per address, with the attributes of
// the advertisements that select it. With externalTrafficPolicy Local a node announces an
// address only while it has a ready endpoint of the Service; a node whose datapath cannot
// be programmed announces nothing.
import { isIPv4 } from 'node:net';
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { selectorError, selectorMatches, type LabelSelector } from '../ipam/selector.js';
import { LB_CLASS, serviceKey, serviceLabels } from '../ipam/service-request.js';
import { EXCLUDE_LABEL } from './announcements.js';

export const BGP_PEER_PATH = '/apis/ferry.dev/v1alpha1/bgppeers';
export const BGP_ADVERTISEMENT_PATH = '/apis/ferry.dev/v1alpha1/bgpadvertisements';

export interface CustomObject {
  metadata?: { name?: string };
  spec?: Record<string, unknown>;
}

export interface BfdSettings {
  receiveIntervalMs: number;
  transmitIntervalMs: number;
  detectMultiplier: number;
}

export interface BgpPeer {
  name: string;
  address: string;
  asn: number;
  myAsn: number;
  nodeSelector: LabelSelector | undefined;
  passwordSecretRef?: { name: string; key: string };
  bfd?: BfdSettings;
  gracefulRestart: boolean;
  holdTimeSeconds: number;
  keepaliveTimeSeconds: number;
  ebgpMultihop?: number;
  errors: string[];
}

export interface BgpAdvertisement {
  name: string;
  serviceSelector: LabelSelector | undefined;
  nodeSelector: LabelSelector | undefined;
  loadBalancerIPs: boolean;
  externalIPs: boolean;
  communities: string[];
  localPref?: number;
  /** Peer names; empty: every peer. */
  peers: string[];
  errors: string[];
}

/** What a name may hold to be used inside FRR names (route maps, prefix lists, profiles). */
const SAFE_NAME = /^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$/;
const COMMUNITY = /^(\d{1,5}:\d{1,5}|no-export|no-advertise|local-AS)$/;
/** FRR refuses a community half above 65535 ("Malformed communities attribute"): every apply would fail on it. */
const communityInRange = (c: string) => !/^\d/.test(c) || c.split(':').every((h) => Number(h) <= 65535);
/**
 * The values FRR prints by name (FRR 8.4 and 10.x): a route map's communities are read back
 * as FRR writes them — deduplicated, in numeric order, these by name — so they are rendered
 * so too; otherwise ['9:1', '10:1'] or '0:0' would differ from what a restarted agent reads
 * back, and be applied again (an update to the peers).
 */
const WELL_KNOWN_COMMUNITIES: ReadonlyMap<number, string> = new Map([
  [0x00000000, 'internet'], [0xffff0000, 'graceful-shutdown'], [0xffff0001, 'accept-own'], [0xffff0002, 'route-filter-translated-v4'],
  [0xffff0003, 'route-filter-v4'], [0xffff0004, 'route-filter-translated-v6'], [0xffff0005, 'route-filter-v6'], [0xffff0006, 'llgr-stale'],
  [0xffff0007, 'no-llgr'], [0xffff0008, 'accept-own-nexthop'], [0xffff029a, 'blackhole'], [0xffffff01, 'no-export'],
  [0xffffff02, 'no-advertise'], [0xffffff03, 'local-AS'], [0xffffff04, 'no-peer'],
]);
const COMMUNITY_BY_NAME = new Map([...WELL_KNOWN_COMMUNITIES].map(([v, n]) => [n, v]));

/** Communities (as the reader accepts them) in FRR's own form: numeric order, once each, well-known values by name. */
export function canonicalCommunities(cs: readonly string[]): string[] {
  const values = new Set<number>();
  for (const c of cs) {
    const named = COMMUNITY_BY_NAME.get(c);
    const [hi, lo] = c.split(':').map(Number);
    values.add(named ?? hi! * 65536 + lo!);
  }
  return [...values].sort((a, b) => a - b).map((v) => WELL_KNOWN_COMMUNITIES.get(v) ?? `${Math.floor(v / 65536)}:${v % 65536}`);
}

/** A unicast peer: not 0/8, loopback, multicast, reserved or broadcast. */
const unicastIPv4 = (a: string) => {
  const first = Number(a.split('.')[0]);
  return first !== 0 && first !== 127 && first < 224;
};
/** A TCP MD5 key: printable ASCII without blanks, at most 80 bytes. */
export const PASSWORD = /^[!-~]{1,80}$/;

const int = (v: unknown, lo: number, hi: number): number | undefined => (typeof v === 'number' && Number.isInteger(v) && v >= lo && v <= hi ? v : undefined);
const spec = (o: CustomObject) => (typeof o.spec === 'object' && o.spec !== null ? o.spec : {});

export function parseBgpPeer(o: CustomObject): BgpPeer {
  const s = spec(o);
  const errors: string[] = [];
  const name = o.metadata?.name ?? '';
  if (!SAFE_NAME.test(name)) errors.push(`name ${JSON.stringify(name)}: lower case letters, digits, - and . only`);
  const address = typeof s.peerAddress === 'string' && isIPv4(s.peerAddress) && unicastIPv4(s.peerAddress) ? s.peerAddress : '';
  if (!address) errors.push(`peerAddress ${JSON.stringify(s.peerAddress)}: a unicast IPv4 address`);
  const asn = int(s.peerASN, 1, 4294967295);
  const myAsn = int(s.myASN, 1, 4294967295);
  if (asn === undefined) errors.push('peerASN: an integer in 1..4294967295');
  if (myAsn === undefined) errors.push('myASN: an integer in 1..4294967295');
  const nodeSelector = s.nodeSelector as LabelSelector | undefined;
  const selErr = selectorError(nodeSelector);
  if (selErr) errors.push(`nodeSelector: ${selErr}`);
  let passwordSecretRef: BgpPeer['passwordSecretRef'];
  if (s.passwordSecretRef !== undefined) {
    const r = s.passwordSecretRef as { name?: unknown; key?: unknown };
    if (typeof r?.name === 'string' && SAFE_NAME.test(r.name) && typeof r.key === 'string' && /^[-._a-zA-Z0-9]{1,253}$/.test(r.key)) passwordSecretRef = { name: r.name, key: r.key };
    else errors.push('passwordSecretRef: a Secret name and key');
  }
  let bfd: BfdSettings | undefined;
  if (s.bfd !== undefined && s.bfd !== null) {
    const b = s.bfd as Record<string, unknown>;
    const rx = b.receiveIntervalMs === undefined ? 300 : int(b.receiveIntervalMs, 10, 60000);
    const tx = b.transmitIntervalMs === undefined ? 300 : int(b.transmitIntervalMs, 10, 60000);
    const mult = b.detectMultiplier === undefined ? 3 : int(b.detectMultiplier, 2, 255);
    if (rx === undefined || tx === undefined || mult === undefined) errors.push('bfd: intervals in 10..60000 ms, a multiplier in 2..255');
    else bfd = { receiveIntervalMs: rx, transmitIntervalMs: tx, detectMultiplier: mult };
  }
  const hold = s.holdTimeSeconds === undefined ? 9 : int(s.holdTimeSeconds, 3, 65535);
  const keepalive = s.keepaliveTimeSeconds === undefined ? 3 : int(s.keepaliveTimeSeconds, 1, 65535);
  if (hold === undefined || keepalive === undefined || keepalive * 3 > hold) errors.push('holdTimeSeconds/keepaliveTimeSeconds: hold in 3..65535, keepalive at most a third of it');
  const multihop = s.ebgpMultihop === undefined ? undefined : int(s.ebgpMultihop, 2, 255);
  if (s.ebgpMultihop !== undefined && multihop === undefined) errors.push('ebgpMultihop: an integer in 2..255');
  return {
    name, address, asn: asn ?? 0, myAsn: myAsn ?? 0, nodeSelector, ...(passwordSecretRef ? { passwordSecretRef } : {}), ...(bfd ? { bfd } : {}),
    // Off unless asked: with it, a peer keeps a dead node's routes for the restart time.
    gracefulRestart: typeof s.gracefulRestart === 'boolean' ? s.gracefulRestart : false,
    holdTimeSeconds: hold ?? 9, keepaliveTimeSeconds: keepalive ?? 3, ...(multihop !== undefined ? { ebgpMultihop: multihop } : {}), errors,
  };
}

export function parseBgpAdvertisement(o: CustomObject): BgpAdvertisement {
  const s = spec(o);
  const errors: string[] = [];
  const selector = (key: 'serviceSelector' | 'nodeSelector') => {
    const v = s[key] as LabelSelector | undefined;
    const err = selectorError(v);
    if (err) errors.push(`${key}: ${err}`);
    return v;
  };
  const list = (key: string, ok: (x: string) => boolean, what: string): string[] => {
    const v = s[key] ?? [];
    if (!Array.isArray(v) || v.length > 64 || v.some((x) => typeof x !== 'string' || !ok(x))) {
      errors.push(`${key}: ${what}`);
      return [];
    }
    return v as string[];
  };
  const localPref = s.localPref === undefined ? undefined : int(s.localPref, 0, 4294967295);
  if (s.localPref !== undefined && localPref === undefined) errors.push('localPref: an integer in 0..4294967295');
  return {
    name: o.metadata?.name ?? '',
    serviceSelector: selector('serviceSelector'),
    nodeSelector: selector('nodeSelector'),
    loadBalancerIPs: typeof s.loadBalancerIPs === 'boolean' ? s.loadBalancerIPs : true,
    externalIPs: typeof s.externalIPs === 'boolean' ? s.externalIPs : false,
    communities: list('communities', (c) => COMMUNITY.test(c) && communityInRange(c), 'standard communities (ASN:value with each part at most 65535, no-export, no-advertise, local-AS)'),
    ...(localPref !== undefined ? { localPref } : {}),
    peers: list('peers', (n) => SAFE_NAME.test(n), 'BGPPeer names'),
    errors,
  };
}

/** The attributes a prefix carries to one peer: those of the advertisements aimed at it. */
export interface PrefixToPeer {
  peer: string;
  communities: string[];
  localPref?: number;
}

export interface BgpPrefix {
  /** a.b.c.d/32 */
  prefix: string;
  services: string[];
  /** Per peer it goes to (sorted by peer name). */
  to: PrefixToPeer[];
}

export interface BgpSession extends Omit<BgpPeer, 'nodeSelector' | 'passwordSecretRef' | 'errors'> {
  password?: string;
}

export interface BgpNodeConfig {
  asn: number;
  routerId: string;
  peers: BgpSession[];
  prefixes: BgpPrefix[];
  /** Why some peer or advertisement is left out. */
  problems: string[];
  /** Of those, what only this node sees (a valid peer left out here): for Events on the peer. */
  peerProblems: PeerProblem[];
}

export interface PeerProblem {
  peer: string;
  reason: 'ASNConflict' | 'PasswordMissing' | 'LocalAddress';
  message: string;
}

export interface BgpInput {
  node: V1Node;
  nodes: readonly V1Node[];
  services: readonly V1Service[];
  slices: readonly V1EndpointSlice[];
  peers: readonly BgpPeer[];
  advertisements: readonly BgpAdvertisement[];
  /** Peer name → its password, read from its Secret. */
  passwords: ReadonlyMap<string, string>;
  /** False when this node's datapath could not be programmed: it announces nothing. */
  datapathHealthy: boolean;
  /** Services the datapath could not take: their addresses are not announced from here. */
  unprogrammed?: ReadonlySet<string>;
}

const readyHere = (svc: V1Service, slices: readonly V1EndpointSlice[], node: string) =>
  slices.some((s) => s.metadata?.namespace === svc.metadata?.namespace && s.metadata?.labels?.['kubernetes.io/service-name'] === svc.metadata?.name &&
    (s.endpoints ?? []).some((e) => e.nodeName === node && e.conditions?.ready !== false));

/** What this node announces (undefined: no peer selects it; BGP is off here). */
export function bgpNodeConfig(input: BgpInput): BgpNodeConfig | undefined {
  const me = input.node.metadata?.name ?? '';
  const labels = input.node.metadata?.labels ?? {};
  const problems: string[] = [];
  const peerProblems: PeerProblem[] = [];
  const leftOut = (peer: string, reason: PeerProblem['reason'], message: string) => {
    problems.push(`BGPPeer ${peer}: ${message}`);
    peerProblems.push({ peer, reason, message });
  };
  for (const p of input.peers) if (p.errors.length) problems.push(`BGPPeer ${p.name}: ${p.errors.join('; ')}`);
  for (const a of input.advertisements) if (a.errors.length) problems.push(`BGPAdvertisement ${a.name}: ${a.errors.join('; ')}`);
  let mine = input.peers.filter((p) => p.errors.length === 0 && selectorMatches(p.nodeSelector, labels));
  if (mine.length === 0) return undefined;
  const asn = mine[0]!.myAsn;
  for (const p of mine.filter((x) => x.myAsn !== asn)) leftOut(p.name, 'ASNConflict', `myASN ${p.myAsn} differs from ${asn} (BGPPeer ${mine[0]!.name}) on this node: left out`);
  mine = mine.filter((p) => p.myAsn === asn);
  const sessions: BgpSession[] = [];
  const own = new Set((input.node.status?.addresses ?? []).map((a) => a.address));
  for (const p of mine) {
    const { nodeSelector: _n, passwordSecretRef, errors: _e, ...rest } = p;
    // FRR refuses the whole neighbor ("the local system"): left out here, not a failed apply.
    if (own.has(p.address)) {
      leftOut(p.name, 'LocalAddress', `peerAddress ${p.address} is this node's own address: left out`);
      continue;
    }
    if (passwordSecretRef) {
      const pw = input.passwords.get(p.name);
      if (!pw || !PASSWORD.test(pw)) {
        leftOut(p.name, 'PasswordMissing', `its password (Secret ${passwordSecretRef.name}, key ${passwordSecretRef.key}) is missing or not printable ASCII of at most 80 bytes: left out`);
        continue;
      }
      sessions.push({ ...rest, password: pw });
    } else sessions.push(rest);
  }
  const routerId = (input.node.status?.addresses ?? []).find((a) => a.type === 'InternalIP' && isIPv4(a.address))?.address ?? '';
  const excluded = EXCLUDE_LABEL in labels || Boolean(input.node.metadata?.deletionTimestamp);
  const nodeAddresses = new Set(input.nodes.flatMap((n) => (n.status?.addresses ?? []).map((a) => a.address)));
  const byPrefix = new Map<string, BgpPrefix>();
  const peerNames = sessions.map((s) => s.name);
  if (input.datapathHealthy && !excluded) {
    const ads = input.advertisements.filter((a) => a.errors.length === 0 && selectorMatches(a.nodeSelector, labels));
    for (const svc of input.services) {
      const key = serviceKey(svc);
      if (input.unprogrammed?.has(key)) continue;
      const svcLabels = serviceLabels(svc);
      const selecting = ads.filter((a) => selectorMatches(a.serviceSelector, svcLabels));
      if (selecting.length === 0) continue;
      if (svc.spec?.externalTrafficPolicy === 'Local' && !readyHere(svc, input.slices, me)) continue;
      const cls = svc.spec?.loadBalancerClass;
      const lbIPs = svc.spec?.type === 'LoadBalancer' && (!cls || cls === LB_CLASS) ? (svc.status?.loadBalancer?.ingress ?? []).map((i) => i.ip ?? '') : [];
      for (const a of selecting) {
        const peers = a.peers.length ? peerNames.filter((n) => a.peers.includes(n)) : peerNames;
        for (const ip of [...(a.loadBalancerIPs ? lbIPs : []), ...(a.externalIPs ? (svc.spec?.externalIPs ?? []) : [])]) {
          if (!isIPv4(ip) || nodeAddresses.has(ip) || peers.length === 0) continue;
          const prefix = `${ip}/32`;
          const p = byPrefix.get(prefix) ?? { prefix, services: [], to: [] };
          if (!p.services.includes(key)) p.services.push(key);
          for (const peer of peers) {
            const t = p.to.find((x) => x.peer === peer) ?? { peer, communities: [] };
            t.communities = canonicalCommunities([...t.communities, ...a.communities]);
            if (a.localPref !== undefined) t.localPref = Math.max(t.localPref ?? 0, a.localPref);
            if (!p.to.includes(t)) p.to.push(t);
          }
          p.to.sort((x, y) => (x.peer < y.peer ? -1 : 1));
          byPrefix.set(prefix, p);
        }
      }
    }
  }
  const ipKey = (p: string) => p.split(/[./]/).map((x) => x.padStart(3, '0')).join('.');
  return { asn, routerId, peers: sessions.sort((a, b) => (a.name < b.name ? -1 : 1)), prefixes: [...byPrefix.values()].sort((a, b) => (ipKey(a.prefix) < ipKey(b.prefix) ? -1 : 1)), problems, peerProblems };
}

/**
 * Which nodes the BGP resources make announce each address (`ferry lb list`), as each
 * node's agent would decide it, assuming healthy datapaths and present passwords: whether a
 * session is up is FRR's to say (`ferry bgp peers`).
 */
export function bgpAnnouncers(input: Omit<BgpInput, 'node' | 'passwords' | 'datapathHealthy' | 'unprogrammed'>): Map<string, string[]> {
  const passwords = new Map(input.peers.filter((p) => p.passwordSecretRef).map((p) => [p.name, 'assumed-present']));
  const byIp = new Map<string, string[]>();
  for (const node of input.nodes) {
    const cfg = bgpNodeConfig({ ...input, node, passwords, datapathHealthy: true });
    for (const p of cfg?.peers.length ? cfg.prefixes : []) {
      const ip = p.prefix.replace(/\/32$/, '');
      byIp.set(ip, [...(byIp.get(ip) ?? []), node.metadata?.name ?? '']);
    }
  }
  for (const names of byIp.values()) names.sort();
  return byIp;
}
