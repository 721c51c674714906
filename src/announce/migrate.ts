// `ferry migrate` for announcements, pure: MetalLB's L2Advertisement, BGPPeer and
// BGPAdvertisement (with the BFDProfiles and Community aliases they name) and Cilium's
// CiliumL2AnnouncementPolicy become ferry's L2AnnouncementPolicy, BGPPeer and
// BGPAdvertisement (Cilium's BGP objects: migrate-cilium-bgp.ts). ferry's select Services, not pools, so an object limited to some pools
// becomes one for every Service, and says so. Every object made is read back by ferry's own
// readers: what they would refuse is a warning here, not a surprise in the agent's log.
import { CILIUM_LABELS, rename } from '../ipam/migrate.js';
import type { LabelSelector } from '../ipam/selector.js';
import { CILIUM_BGP_KINDS, migrateCiliumBgp } from './migrate-cilium-bgp.js';
import { ferryDoc, groupKind, isObj, nameOf, specOf, type Doc, type Warn } from './migrate-docs.js';
import { announcementErrors, type AnnouncementKind } from './object-status.js';

/** MetalLB's hold time for a BGPPeer that sets none (ferry's own default is 9 s). */
const METALLB_HOLD_SECONDS = 90;

/** The kinds translated here (group/kind); CiliumBGPNodeConfigOverride is not among them. */
const MIGRATED_ANNOUNCEMENTS: ReadonlySet<string> = new Set(['metallb.io/L2Advertisement', 'metallb.io/BGPPeer', 'metallb.io/BGPAdvertisement', 'metallb.io/BFDProfile', 'metallb.io/Community', 'cilium.io/CiliumL2AnnouncementPolicy', ...CILIUM_BGP_KINDS]);

/** A Go duration ("90s", "1m30s", "2h") in whole seconds; undefined if it is not one. */
export function goDurationSeconds(v: unknown): number | undefined {
  if (typeof v !== 'string') return undefined;
  const m = /^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?(?:(\d+)ms)?$/.exec(v.trim());
  if (!m || !v.trim()) return undefined;
  const [, h = '0', min = '0', s = '0', ms = '0'] = m;
  return Number(h) * 3600 + Number(min) * 60 + Number(s) + Math.floor(Number(ms) / 1000);
}

/** MetalLB's lists of selectors (any of them) as ferry's one: the first, and a warning for more. */
function firstSelector(what: string, list: unknown, warn: Warn): LabelSelector | undefined {
  if (!Array.isArray(list) || list.length === 0) return undefined;
  if (list.length > 1) warn(`${what}: ${list.length} nodeSelectors (any of them) cannot be one ferry nodeSelector; kept the first — label the nodes alike`);
  return isObj(list[0]) ? (list[0] as LabelSelector) : undefined;
}

/** MetalLB limits by pools; ferry's objects take every LoadBalancer Service. */
function warnPools(what: string, s: Doc, warn: Warn): void {
  const pools = Array.isArray(s.ipAddressPools) ? s.ipAddressPools.length : 0;
  const selectors = Array.isArray(s.ipAddressPoolSelectors) ? s.ipAddressPoolSelectors.length : 0;
  if (pools || selectors) warn(`${what}: limited to some pools (ipAddressPools/ipAddressPoolSelectors); ferry's selects Services, so this one announces every LoadBalancer Service's address — add a serviceSelector to narrow it`);
}

/** What every MetalLB object starts as: its name, spec, its first nodeSelector, the pools warned about. */
function metallbObject(kind: string, d: Doc, warn: Warn): { name: string; s: Doc; what: string; spec: Doc } {
  const name = nameOf(d);
  const s = specOf(d);
  const what = `${kind} ${name}`;
  warnPools(what, s, warn);
  const spec: Doc = {};
  const nodes = firstSelector(what, s.nodeSelectors, warn);
  if (nodes) spec.nodeSelector = nodes;
  return { name, s, what, spec };
}

/** Exact interface names as ferry's whole-name patterns. */
const exactName = (n: string) => n.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

function fromL2Advertisement(d: Doc, warn: Warn): Doc {
  const { name, s, spec } = metallbObject('L2Advertisement', d, warn);
  if (Array.isArray(s.interfaces) && s.interfaces.length) spec.interfaces = s.interfaces.filter((i): i is string => typeof i === 'string').map(exactName);
  return ferryDoc('L2AnnouncementPolicy', name, spec, `metallb.io L2Advertisement ${name}`);
}

function fromCiliumL2Policy(d: Doc): Doc {
  const name = nameOf(d);
  const s = specOf(d);
  const spec: Doc = {
    // Cilium's flags are plain booleans: absent is false (ferry's loadBalancerIPs defaults to true).
    loadBalancerIPs: s.loadBalancerIPs === true,
    externalIPs: s.externalIPs === true,
  };
  if (isObj(s.serviceSelector)) spec.serviceSelector = rename(s.serviceSelector as LabelSelector, CILIUM_LABELS);
  if (isObj(s.nodeSelector)) spec.nodeSelector = s.nodeSelector;
  // Cilium finds its patterns anywhere in a name (Go's MatchString); ferry's match whole names.
  if (Array.isArray(s.interfaces) && s.interfaces.length) spec.interfaces = s.interfaces.filter((i): i is string => typeof i === 'string').map((p) => `.*(?:${p}).*`);
  return ferryDoc('L2AnnouncementPolicy', name, spec, `cilium.io CiliumL2AnnouncementPolicy ${name}`);
}

function fromBgpPeer(d: Doc, bfdProfiles: Map<string, Doc>, warn: Warn): Doc {
  const { name, s, what, spec: selected } = metallbObject('BGPPeer', d, warn);
  const spec: Doc = { peerAddress: s.peerAddress, peerASN: s.peerASN, myASN: s.myASN, ...selected };
  const hold = s.holdTime === undefined ? METALLB_HOLD_SECONDS : goDurationSeconds(s.holdTime);
  if (hold === undefined) warn(`${what}: holdTime ${JSON.stringify(s.holdTime)} is not a duration; ferry's default (9 s) applies`);
  else {
    spec.holdTimeSeconds = hold;
    const keepalive = s.keepaliveTime === undefined ? Math.floor(hold / 3) : goDurationSeconds(s.keepaliveTime);
    if (keepalive === undefined) warn(`${what}: keepaliveTime ${JSON.stringify(s.keepaliveTime)} is not a duration; a third of the hold time applies`);
    spec.keepaliveTimeSeconds = keepalive ?? Math.floor(hold / 3);
  }
  if (s.enableGracefulRestart === true) spec.gracefulRestart = true;
  // MetalLB's ebgpMultiHop is a switch; FRR's bare ebgp-multihop allows 255 hops.
  if (s.ebgpMultiHop === true) spec.ebgpMultihop = 255;
  const secret = s.passwordSecret as { name?: unknown; namespace?: unknown } | undefined;
  if (isObj(secret) && typeof secret.name === 'string') {
    spec.passwordSecretRef = { name: secret.name, key: 'password' };
    warn(`${what}: the password Secret ${String(secret.namespace ?? 'metallb-system')}/${secret.name} is read from ferry's namespace: copy it there (key "password")`);
  } else if (typeof s.password === 'string' && s.password) {
    warn(`${what}: an inline password is not carried over (it would land in this output); put it in a Secret in ferry's namespace and set passwordSecretRef`);
  }
  if (typeof s.bfdProfile === 'string' && s.bfdProfile) {
    const p = bfdProfiles.get(s.bfdProfile);
    if (!p) warn(`${what}: BFDProfile ${s.bfdProfile} is not in the input; BFD left off (pass the profile too, or set bfd)`);
    else {
      const b = specOf(p);
      spec.bfd = { receiveIntervalMs: b.receiveInterval ?? 300, transmitIntervalMs: b.transmitInterval ?? 300, detectMultiplier: b.detectMultiplier ?? 3 };
      if (b.echoMode === true || b.passiveMode === true || b.minimumTtl !== undefined) warn(`${what}: BFDProfile ${s.bfdProfile}'s echoMode, passiveMode and minimumTtl are not carried over`);
    }
  }
  const unsupported = ['peerPort', 'sourceAddress', 'routerID', 'vrf', 'connectTime', 'dynamicASN', 'disableMP'].filter((k) => s[k] !== undefined && !(k === 'peerPort' && s[k] === 179));
  if (unsupported.length) warn(`${what}: ${unsupported.join(', ')} not supported by ferry; left out`);
  return ferryDoc('BGPPeer', name, spec, `metallb.io BGPPeer ${name}`);
}

function fromBgpAdvertisement(d: Doc, aliases: Map<string, string>, warn: Warn): Doc {
  const { name, s, what, spec } = metallbObject('BGPAdvertisement', d, warn);
  if (s.aggregationLength !== undefined && s.aggregationLength !== 32) warn(`${what}: aggregationLength ${String(s.aggregationLength)} is not supported; ferry announces each address as a /32`);
  if (s.aggregationLengthV6 !== undefined) warn(`${what}: aggregationLengthV6 ignored (IPv4 only)`);
  if (s.localPref !== undefined) spec.localPref = s.localPref;
  if (Array.isArray(s.communities) && s.communities.length) {
    const communities: string[] = [];
    for (const c of s.communities) {
      const v = typeof c === 'string' ? (aliases.get(c) ?? c) : String(c);
      if (v.startsWith('large:')) warn(`${what}: large community ${v} is not supported; left out`);
      else communities.push(v);
    }
    if (communities.length) spec.communities = communities;
  }
  if (Array.isArray(s.peers) && s.peers.length) spec.peers = s.peers;
  return ferryDoc('BGPAdvertisement', name, spec, `metallb.io BGPAdvertisement ${name}`);
}

/** Check a made object with the reader the agent uses: its complaints become warnings. */
function readBack(doc: Doc, warn: Warn): void {
  const errors = announcementErrors(doc.kind as AnnouncementKind, doc);
  for (const e of errors) warn(`${String(doc.kind)} ${nameOf(doc)}: ${e} (ferry's agent would ignore this object; fix it after migrating)`);
}

/** The announcement objects of the input (MIGRATED_ANNOUNCEMENTS), as ferry's. */
export function migrateAnnouncements(docs: readonly Doc[], warn: Warn): Doc[] {
  const bfdProfiles = new Map(docs.filter((d) => groupKind(d) === 'metallb.io/BFDProfile').map((d) => [nameOf(d), d]));
  const aliases = new Map<string, string>();
  for (const c of docs.filter((d) => groupKind(d) === 'metallb.io/Community')) {
    const list = specOf(c).communities;
    if (Array.isArray(list)) for (const a of list) if (isObj(a) && typeof a.name === 'string' && typeof a.value === 'string') aliases.set(a.name, a.value);
  }
  const out: Doc[] = [];
  for (const d of docs) {
    const gk = groupKind(d);
    const made = gk === 'metallb.io/L2Advertisement' ? fromL2Advertisement(d, warn)
      : gk === 'cilium.io/CiliumL2AnnouncementPolicy' ? fromCiliumL2Policy(d)
      : gk === 'metallb.io/BGPPeer' ? fromBgpPeer(d, bfdProfiles, warn)
      : gk === 'metallb.io/BGPAdvertisement' ? fromBgpAdvertisement(d, aliases, warn)
      : undefined; // BFDProfile, Community: read above
    if (made) out.push(made);
  }
  out.push(...migrateCiliumBgp(docs, warn));
  for (const made of out) readBack(made, warn);
  return out;
}

/** What `ferry migrate` hands the announcement kinds to (src/ipam/migrate.ts). */
export const announcementMigrator = { kinds: MIGRATED_ANNOUNCEMENTS, migrate: migrateAnnouncements };
