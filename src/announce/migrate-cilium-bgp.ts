// `ferry migrate` for Cilium's BGP control plane, pure: the older CiliumBGPPeeringPolicy
// (virtual routers, each with its neighbors and one Service selector) and the newer trio
// CiliumBGPClusterConfig → CiliumBGPPeerConfig → CiliumBGPAdvertisement (peers name a
// config; a config's ipv4 family selects advertisements by label) become ferry's BGPPeer
// and BGPAdvertisement. Cilium's defaults are written out (hold 90 s, keepalive 30 s, where
// ferry's are 9 and 3), and Cilium's "no selector: nothing" is kept (an object that would
// announce nothing is not made, and says so). IPv4 only, Services only: pod CIDRs, ClusterIPs,
// IPv6 peers and pool-limited attributes are warnings.
import { CILIUM_LABELS, rename } from '../ipam/migrate.js';
import { selectorMatches, type LabelSelector } from '../ipam/selector.js';
import { ferryDoc, groupKind, isObj, listOf, nameOf, specOf, type Doc, type Warn } from './migrate-docs.js';

export const CILIUM_BGP_KINDS: ReadonlySet<string> = new Set(['CiliumBGPPeeringPolicy', 'CiliumBGPClusterConfig', 'CiliumBGPPeerConfig', 'CiliumBGPAdvertisement'].map((k) => `cilium.io/${k}`));

/** Cilium's timer defaults (ferry's own are shorter: written out so the sessions keep them). */
const CILIUM_HOLD_SECONDS = 90;
const CILIUM_KEEPALIVE_SECONDS = 30;
const CILIUM_RESTART_SECONDS = 120;
const CILIUM_CONNECT_RETRY_SECONDS = 120;

/** The well-known communities FRR (and so ferry) names. */
const WELL_KNOWN: Readonly<Record<string, string>> = { 'no-export': 'no-export', 'no-advertise': 'no-advertise', 'no-export-subconfed': 'local-AS' };

/** Names made unique and fit for ferry (lower case, digits, - and .; at most 63). */
class Names {
  private readonly used = new Set<string>();
  take(...parts: string[]): string {
    const base = parts.join('-').toLowerCase().replace(/[^a-z0-9.-]+/g, '-').slice(0, 58).replace(/^[^a-z0-9]+|[^a-z0-9]+$/g, '') || 'cilium';
    let name = base;
    for (let i = 2; this.used.has(name); i++) name = `${base}-${i}`;
    this.used.add(name);
    return name;
  }
}

function communities(what: string, c: unknown, warn: Warn): string[] {
  if (!isObj(c)) return [];
  const out: string[] = [];
  for (const v of listOf(c.standard)) {
    const s = String(v);
    // Cilium takes a 32-bit decimal too; ferry (and FRR's route maps here) take ASN:value.
    if (/^\d{1,10}$/.test(s) && Number(s) <= 0xffffffff) out.push(`${Math.floor(Number(s) / 65536)}:${Number(s) % 65536}`);
    else if (/^\d{1,5}:\d{1,5}$/.test(s)) out.push(s);
    else warn(`${what}: community ${JSON.stringify(s)} left out (not ASN:value)`);
  }
  for (const v of listOf(c.wellKnown)) {
    const known = WELL_KNOWN[String(v)];
    if (known) out.push(known);
    else warn(`${what}: well-known community ${String(v)} is not supported; left out`);
  }
  if (listOf(c.large).length) warn(`${what}: large communities are not supported; left out`);
  return [...new Set(out)];
}

interface PeerSource {
  what: string;
  address: unknown;
  peerASN: unknown;
  localASN: unknown;
  nodeSelector: unknown;
  timers: Doc;
  ebgpMultihop: unknown;
  gracefulRestart: unknown;
  authSecretRef: unknown;
  peerPort: unknown;
}

/** A ferry BGPPeer spec, or undefined (and why) when ferry cannot have the session. */
function peerSpec(p: PeerSource, warn: Warn): Doc | undefined {
  const address = typeof p.address === 'string' ? p.address.trim().replace(/\/(32|128)$/, '') : '';
  if (!address) {
    warn(`${p.what}: no peerAddress (Cilium may find it on the node); not migrated — ferry needs the address`);
    return undefined;
  }
  if (address.includes(':')) {
    warn(`${p.what}: IPv6 peer ${address} not migrated (ferry's BGP is IPv4 only)`);
    return undefined;
  }
  if (p.localASN === undefined) {
    warn(`${p.what}: no localASN (Cilium may take it from a node override); not migrated — set myASN on a ferry BGPPeer`);
    return undefined;
  }
  const t = p.timers;
  const spec: Doc = {
    peerAddress: address, peerASN: p.peerASN, myASN: p.localASN,
    holdTimeSeconds: t.holdTimeSeconds ?? CILIUM_HOLD_SECONDS, keepaliveTimeSeconds: t.keepAliveTimeSeconds ?? CILIUM_KEEPALIVE_SECONDS,
  };
  if (isObj(p.nodeSelector)) spec.nodeSelector = p.nodeSelector;
  if (typeof p.ebgpMultihop === 'number' && p.ebgpMultihop > 1) spec.ebgpMultihop = p.ebgpMultihop;
  if (isObj(p.gracefulRestart) && p.gracefulRestart.enabled === true) {
    spec.gracefulRestart = true;
    const rt = p.gracefulRestart.restartTimeSeconds;
    if (rt !== undefined && rt !== CILIUM_RESTART_SECONDS) warn(`${p.what}: restartTimeSeconds ${String(rt)} not carried over (FRR's restart time is ${CILIUM_RESTART_SECONDS} s)`);
  }
  if (typeof p.authSecretRef === 'string' && p.authSecretRef) {
    spec.passwordSecretRef = { name: p.authSecretRef, key: 'password' };
    warn(`${p.what}: the password Secret ${p.authSecretRef} is read from ferry's namespace: copy it there from Cilium's BGP secrets namespace (key "password")`);
  }
  if (p.peerPort !== undefined && p.peerPort !== 179) warn(`${p.what}: peerPort ${String(p.peerPort)} not supported by ferry; 179 is used`);
  if (t.connectRetryTimeSeconds !== undefined && t.connectRetryTimeSeconds !== CILIUM_CONNECT_RETRY_SECONDS) warn(`${p.what}: connectRetryTimeSeconds not carried over`);
  return spec;
}

interface AdvertisementSource {
  what: string;
  serviceSelector: unknown;
  addresses: unknown[];
  attributes: { communities?: unknown; localPreference?: unknown } | undefined;
  peers: string[];
}

function advertisementSpec(a: AdvertisementSource, warn: Warn): Doc | undefined {
  if (!isObj(a.serviceSelector)) {
    warn(`${a.what}: no Service selector, so Cilium announces no Service; nothing made`);
    return undefined;
  }
  if (a.addresses.includes('ClusterIP')) warn(`${a.what}: ClusterIPs are not announced by ferry; left out`);
  const lb = a.addresses.includes('LoadBalancerIP');
  const external = a.addresses.includes('ExternalIP');
  if (!lb && !external) {
    warn(`${a.what}: announces neither LoadBalancer nor external IPs; nothing made`);
    return undefined;
  }
  const spec: Doc = { serviceSelector: rename(a.serviceSelector as LabelSelector, CILIUM_LABELS), loadBalancerIPs: lb, externalIPs: external, peers: a.peers };
  const c = communities(a.what, a.attributes?.communities, warn);
  if (c.length) spec.communities = c;
  if (a.attributes?.localPreference !== undefined) spec.localPref = a.attributes.localPreference;
  return spec;
}

/** CiliumBGPPeeringPolicy: per virtual router, its neighbors and an advertisement to them. */
function fromPeeringPolicy(d: Doc, names: Names, advertisementNames: Names, out: Doc[], warn: Warn): void {
  const policy = nameOf(d);
  const s = specOf(d);
  listOf(s.virtualRouters).forEach((vr, i) => {
    if (!isObj(vr)) return;
    const what = `CiliumBGPPeeringPolicy ${policy} virtualRouters[${i}]`;
    if (vr.exportPodCIDR === true) warn(`${what}: exportPodCIDR — ferry announces Service addresses only; pod CIDRs stay the CNI's`);
    // Neighbors with the same pool-wide attributes share one advertisement.
    const groups = new Map<string, { attributes: AdvertisementSource['attributes']; peers: string[] }>();
    listOf(vr.neighbors).forEach((n, j) => {
      if (!isObj(n)) return;
      const nWhat = `${what} neighbors[${j}]`;
      const name = names.take(policy, String(n.peerAddress ?? j).replace(/\/32$/, ''));
      const spec = peerSpec({ what: nWhat, address: n.peerAddress, peerASN: n.peerASN, localASN: vr.localASN, nodeSelector: s.nodeSelector, timers: n, ebgpMultihop: n.eBGPMultihopTTL, gracefulRestart: n.gracefulRestart, authSecretRef: n.authSecretRef, peerPort: n.peerPort }, warn);
      if (!spec) return;
      out.push(ferryDoc('BGPPeer', name, spec, `cilium.io CiliumBGPPeeringPolicy ${policy}`));
      const attrs = listOf(n.advertisedPathAttributes).filter((a): a is Doc => isObj(a) && a.selectorType === 'CiliumLoadBalancerIPPool');
      if (attrs.some((a) => a.selector !== undefined)) warn(`${nWhat}: path attributes for some pools left out (ferry's advertisements select Services, not pools)`);
      const all = attrs.filter((a) => a.selector === undefined);
      if (all.length > 1) warn(`${nWhat}: several path attributes for every pool; the first kept`);
      const attributes = all[0] ? { communities: all[0].communities, localPreference: all[0].localPreference } : undefined;
      const key = JSON.stringify(attributes ?? null);
      const g = groups.get(key) ?? { attributes, peers: [] };
      g.peers.push(name);
      groups.set(key, g);
    });
    const addresses = Array.isArray(vr.serviceAdvertisements) ? vr.serviceAdvertisements : ['LoadBalancerIP'];
    for (const g of groups.values()) {
      const spec = advertisementSpec({ what, serviceSelector: vr.serviceSelector, addresses, attributes: g.attributes, peers: g.peers }, warn);
      if (spec) out.push(ferryDoc('BGPAdvertisement', advertisementNames.take(policy, String(i)), spec, `cilium.io CiliumBGPPeeringPolicy ${policy}`));
    }
  });
}

/** CiliumBGPClusterConfig peers (settings from their CiliumBGPPeerConfig); returns which ferry peers each advertisement object reaches. */
function fromClusterConfig(d: Doc, peerConfigs: Map<string, Doc>, adverts: Doc[], names: Names, out: Doc[], reached: Map<string, string[]>, warn: Warn): void {
  const cc = nameOf(d);
  const s = specOf(d);
  for (const inst of listOf(s.bgpInstances)) {
    if (!isObj(inst)) continue;
    for (const p of listOf(inst.peers)) {
      if (!isObj(p)) continue;
      const what = `CiliumBGPClusterConfig ${cc} instance ${String(inst.name)} peer ${String(p.name)}`;
      const ref = isObj(p.peerConfigRef) ? String(p.peerConfigRef.name ?? '') : '';
      const config = ref ? peerConfigs.get(ref) : undefined;
      if (ref && !config) warn(`${what}: CiliumBGPPeerConfig ${ref} is not in the input; Cilium's defaults used, and no advertisement reaches it (pass the config too)`);
      const c = config ? specOf(config) : {};
      const name = names.take(cc, String(p.name ?? ''));
      const spec = peerSpec({
        what, address: p.peerAddress, peerASN: p.peerASN, localASN: inst.localASN, nodeSelector: s.nodeSelector,
        timers: isObj(c.timers) ? c.timers : {}, ebgpMultihop: c.ebgpMultihop, gracefulRestart: c.gracefulRestart, authSecretRef: c.authSecretRef,
        peerPort: isObj(c.transport) ? c.transport.peerPort : undefined,
      }, warn);
      if (!spec) continue;
      out.push(ferryDoc('BGPPeer', name, spec, `cilium.io CiliumBGPClusterConfig ${cc}`));
      // The ipv4 unicast family's selector picks the advertisement objects (none: nothing).
      for (const f of listOf(c.families)) {
        if (!isObj(f) || f.afi !== 'ipv4' || f.safi !== 'unicast' || !isObj(f.advertisements)) continue;
        for (const a of adverts) {
          const labels = ((a.metadata as { labels?: Record<string, string> } | undefined)?.labels ?? {}) as Record<string, string>;
          if (!selectorMatches(f.advertisements as LabelSelector, labels)) continue;
          const list = reached.get(nameOf(a)) ?? [];
          if (!list.includes(name)) list.push(name);
          reached.set(nameOf(a), list);
        }
      }
    }
  }
}

/** CiliumBGPAdvertisement: each Service entry, to the peers whose ipv4 family selects the object. */
function fromAdvertisement(d: Doc, peers: string[], names: Names, out: Doc[], warn: Warn): void {
  const adv = nameOf(d);
  if (!peers.length) {
    warn(`CiliumBGPAdvertisement ${adv}: no migrated peer's ipv4 family selects it; nothing made`);
    return;
  }
  const entries = listOf(specOf(d).advertisements);
  entries.forEach((e, j) => {
    if (!isObj(e)) return;
    const what = `CiliumBGPAdvertisement ${adv} advertisements[${j}]`;
    if (e.advertisementType !== 'Service') {
      warn(`${what}: ${String(e.advertisementType)} is not announced by ferry (Service addresses only); left out`);
      return;
    }
    const service = isObj(e.service) ? e.service : {};
    if (service.aggregationLengthIPv4 !== undefined) warn(`${what}: aggregationLengthIPv4 not supported; ferry announces each address as a /32`);
    const spec = advertisementSpec({ what, serviceSelector: e.selector, addresses: listOf(service.addresses), attributes: isObj(e.attributes) ? e.attributes : undefined, peers }, warn);
    if (spec) out.push(ferryDoc('BGPAdvertisement', entries.length > 1 ? names.take(adv, String(j)) : names.take(adv), spec, `cilium.io CiliumBGPAdvertisement ${adv}`));
  });
}

/** Every Cilium BGP object of the input (CILIUM_BGP_KINDS), as ferry's BGPPeer and BGPAdvertisement objects. */
export function migrateCiliumBgp(docs: readonly Doc[], warn: Warn): Doc[] {
  const of = (kind: string) => docs.filter((d) => groupKind(d) === `cilium.io/${kind}`);
  const peerNames = new Names();
  const advertisementNames = new Names();
  const out: Doc[] = [];
  for (const d of of('CiliumBGPPeeringPolicy')) fromPeeringPolicy(d, peerNames, advertisementNames, out, warn);
  const peerConfigs = new Map(of('CiliumBGPPeerConfig').map((d) => [nameOf(d), d]));
  const adverts = of('CiliumBGPAdvertisement');
  const reached = new Map<string, string[]>();
  for (const d of of('CiliumBGPClusterConfig')) fromClusterConfig(d, peerConfigs, adverts, peerNames, out, reached, warn);
  for (const d of adverts) fromAdvertisement(d, reached.get(nameOf(d)) ?? [], advertisementNames, out, warn);
  return out;
}
