// FRR configuration for a node's BGP announcements, pure: the model (prefix lists, route
// maps, BFD profiles, the `router bgp` block), its text (the golden files; `vtysh -C`
// checks them), the same model read back from FRR's running configuration (only what
// ferry owns: names starting ferry-, and `router bgp`), and the commands that turn one
// into the other, so that an apply changes only what changed and never restarts FRR.
// Syntax kept to what FRR 8.4 (Debian 12) and 10.x (Debian 13) both accept.
import type { BgpNodeConfig, BgpSession } from './bgp.js';

export interface FrrConfig {
  /** `ip prefix-list NAME permit PREFIX` lines. */
  prefixLists: string[];
  /** `route-map NAME permit|deny SEQ` → its lines. */
  routeMaps: Map<string, string[]>;
  /** BFD profile name → its lines. */
  bfdProfiles: Map<string, string[]>;
  bgp?: { asn: number; lines: string[]; ipv4: string[] };
}

export const ROUTE_MAP_IN = 'ferry-in';
/** FRR's BFD defaults (left out of its running configuration). */
const BFD_DEFAULTS = { receiveIntervalMs: 300, transmitIntervalMs: 300, detectMultiplier: 3 };
/**
 * `router bgp` lines FRR leaves out of its running configuration under its `datacenter`
 * defaults (the profile ferry's FRR runs with), put back when reading it.
 */
const DATACENTER_IMPLICIT = ['no bgp ebgp-requires-policy'];
const outMap = (peer: string) => `ferry-out-${peer}`;
const bfdProfile = (peer: string) => `ferry-${peer}`;

/** FNV-1a, 8 hex digits: a stable name for a group of attributes. */
function hashName(s: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h.toString(16).padStart(8, '0');
}

function neighborLines(p: BgpSession): string[] {
  const n = `neighbor ${p.address}`;
  return [
    `${n} remote-as ${p.asn}`,
    `${n} description ferry BGPPeer ${p.name}`,
    ...(p.password ? [`${n} password ${p.password}`] : []),
    `${n} timers ${p.keepaliveTimeSeconds} ${p.holdTimeSeconds}`,
    `${n} timers connect 5`,
    ...(p.ebgpMultihop !== undefined ? [`${n} ebgp-multihop ${p.ebgpMultihop}`] : []),
    ...(p.bfd ? [`${n} bfd`, `${n} bfd profile ${bfdProfile(p.name)}`] : []),
    ...(p.gracefulRestart ? [`${n} graceful-restart`] : []),
  ];
}

export function renderFrr(cfg: BgpNodeConfig): FrrConfig {
  const out: FrrConfig = { prefixLists: [], routeMaps: new Map(), bfdProfiles: new Map() };
  // Nothing is learned from the peers (a node must not route the pool back to the router).
  out.routeMaps.set(`route-map ${ROUTE_MAP_IN} deny 10`, []);
  const ipv4: string[] = cfg.prefixes.map((p) => `network ${p.prefix}`);
  for (const peer of cfg.peers) {
    // What each prefix carries to this peer (or that it is not for this peer: "deny").
    // The most common case becomes the route map's last entry, matching everything, so
    // that prefix lists (slow for FRR to take in bulk: each line re-evaluates the route
    // maps) hold only the exceptions; with one advertisement for every peer, none at all.
    const groups = new Map<string, { sets: string[]; deny: boolean; prefixes: string[] }>();
    for (const p of cfg.prefixes) {
      const t = p.to.find((x) => x.peer === peer.name);
      const sets = t ? [...(t.communities.length ? [`set community ${t.communities.join(' ')}`] : []), ...(t.localPref !== undefined ? [`set local-preference ${t.localPref}`] : [])] : [];
      const key = t ? `permit|${sets.join('|')}` : 'deny';
      const g = groups.get(key) ?? { sets, deny: !t, prefixes: [] };
      g.prefixes.push(p.prefix);
      groups.set(key, g);
    }
    const sorted = [...groups].sort(([a, x], [b, y]) => y.prefixes.length - x.prefixes.length || (a < b ? -1 : 1));
    const [, common] = sorted[0] ?? [undefined, { sets: [], deny: true, prefixes: [] }];
    sorted.slice(1).sort(([a], [b]) => (a < b ? -1 : 1)).forEach(([key, g], i) => {
      const list = `ferry-${peer.name}-${hashName(key)}`;
      for (const prefix of g.prefixes) out.prefixLists.push(`ip prefix-list ${list} permit ${prefix}`);
      out.routeMaps.set(`route-map ${outMap(peer.name)} ${g.deny ? 'deny' : 'permit'} ${10 * (i + 1)}`, [`match ip address prefix-list ${list}`, ...g.sets]);
    });
    out.routeMaps.set(`route-map ${outMap(peer.name)} ${common!.deny ? 'deny' : 'permit'} 65535`, common!.sets);
    if (peer.bfd) {
      // FRR leaves out of its running configuration what equals its defaults: so does ferry.
      const b = peer.bfd;
      out.bfdProfiles.set(bfdProfile(peer.name), [
        ...(b.receiveIntervalMs !== BFD_DEFAULTS.receiveIntervalMs ? [`receive-interval ${b.receiveIntervalMs}`] : []),
        ...(b.transmitIntervalMs !== BFD_DEFAULTS.transmitIntervalMs ? [`transmit-interval ${b.transmitIntervalMs}`] : []),
        ...(b.detectMultiplier !== BFD_DEFAULTS.detectMultiplier ? [`detect-multiplier ${b.detectMultiplier}`] : []),
      ]);
    }
    ipv4.push(`neighbor ${peer.address} route-map ${ROUTE_MAP_IN} in`, `neighbor ${peer.address} route-map ${outMap(peer.name)} out`);
  }
  out.bgp = {
    asn: cfg.asn,
    lines: [
      ...(cfg.routerId ? [`bgp router-id ${cfg.routerId}`] : []),
      'no bgp ebgp-requires-policy',
      'no bgp network import-check',
      ...cfg.peers.flatMap(neighborLines),
    ],
    ipv4,
  };
  return out;
}

/** The configuration as FRR's own files write it. */
export function frrText(c: FrrConfig): string {
  const out: string[] = [];
  out.push(...c.prefixLists, '!');
  for (const [head, body] of c.routeMaps) out.push(head, ...body.map((l) => ` ${l}`), 'exit', '!');
  if (c.bfdProfiles.size) {
    out.push('bfd');
    for (const [name, body] of c.bfdProfiles) out.push(` profile ${name}`, ...body.map((l) => `  ${l}`), ' exit', ' !');
    out.push('exit', '!');
  }
  if (c.bgp) out.push(`router bgp ${c.bgp.asn}`, ...c.bgp.lines.map((l) => ` ${l}`), ' !', ' address-family ipv4 unicast', ...c.bgp.ipv4.map((l) => `  ${l}`), ' exit-address-family', 'exit', '!');
  return `${out.join('\n')}\n`;
}

/** FRR writes prefix-list sequence numbers back; ferry's lines have none. */
const normalPrefixList = (l: string) => l.replace(/ seq \d+ /, ' ');

/** What ferry owns of FRR's running configuration (`show running-config`). */
export function parseRunning(text: string): FrrConfig {
  const out: FrrConfig = { prefixLists: [], routeMaps: new Map(), bfdProfiles: new Map() };
  const lines = text.split('\n');
  const datacenter = lines.some((l) => l.trim() === 'frr defaults datacenter');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    const body = (indent: string, end: RegExp): string[] => {
      const b: string[] = [];
      while (i + 1 < lines.length && lines[i + 1]!.startsWith(indent) && !end.test(lines[i + 1]!)) {
        const l = lines[++i]!.trim();
        if (l && l !== '!') b.push(l);
      }
      return b;
    };
    if (/^ip prefix-list ferry-/.test(line)) out.prefixLists.push(normalPrefixList(line.trim()));
    else if (/^route-map ferry-\S+ (permit|deny) \d+$/.test(line)) out.routeMaps.set(line.trim(), body(' ', /^exit/));
    else if (line === 'bfd') {
      while (i + 1 < lines.length && lines[i + 1]!.startsWith(' ')) {
        const l = lines[++i]!;
        const m = /^ profile (ferry-\S+)$/.exec(l);
        if (m) out.bfdProfiles.set(m[1]!, body('  ', /^ exit/));
      }
    } else {
      const m = /^router bgp (\d+)$/.exec(line);
      if (!m) continue;
      const bgp = { asn: Number(m[1]), lines: [] as string[], ipv4: [] as string[] };
      while (i + 1 < lines.length && lines[i + 1]!.startsWith(' ')) {
        const l = lines[++i]!;
        if (l === ' address-family ipv4 unicast') {
          while (i + 1 < lines.length && lines[i + 1]!.startsWith('  ')) {
            const a = lines[++i]!.trim();
            if (a && a !== '!') bgp.ipv4.push(a);
          }
          if (lines[i + 1]?.trim() === 'exit-address-family') i++;
        } else if (/^ address-family /.test(l)) {
          while (i + 1 < lines.length && lines[i + 1]!.startsWith('  ')) i++; // not ferry's
          if (lines[i + 1]?.trim() === 'exit-address-family') i++;
        } else if (l.trim() && l.trim() !== '!') bgp.lines.push(l.trim());
      }
      if (datacenter) for (const l of DATACENTER_IMPLICIT) if (!bgp.lines.includes(l) && !bgp.lines.includes(negate(l))) bgp.lines.push(l);
      out.bgp = bgp;
    }
  }
  return out;
}

const negate = (l: string) => (l.startsWith('no ') ? l.slice(3) : `no ${l}`);
const neighborOf = (l: string) => /^neighbor (\S+) /.exec(l)?.[1];
/** FRR writes a block's lines in its own order (a BFD profile's detect-multiplier first): compared as sets. */
const sameLines = (a: readonly string[] | undefined, b: readonly string[]) => a !== undefined && a.length === b.length && [...a].sort().join('\n') === [...b].sort().join('\n');
const minus = (a: readonly string[], b: readonly string[]) => {
  const s = new Set(b);
  return a.filter((x) => !s.has(x));
};

/**
 * The commands (a `vtysh -f` file) that turn `from` into `to`: new prefix lists, route
 * maps and BFD profiles first, then `router bgp`, then the removal of what nothing uses
 * any more. Empty when there is nothing to do.
 */
export function frrCommands(from: FrrConfig, to: FrrConfig): string {
  const out: string[] = [];
  const fromPl = from.prefixLists.map(normalPrefixList);
  out.push(...minus(to.prefixLists, fromPl));
  for (const [head, body] of to.routeMaps) {
    const had = from.routeMaps.get(head);
    if (sameLines(had, body)) continue;
    out.push(head, ...(had ? minus(had, body).map((l) => ` ${negate(l)}`) : []), ...minus(body, had ?? []).map((l) => ` ${l}`), 'exit');
  }
  const profiles = [...to.bfdProfiles].filter(([n, b]) => !sameLines(from.bfdProfiles.get(n), b));
  if (profiles.length) {
    out.push('bfd');
    for (const [name, body] of profiles) out.push(` profile ${name}`, ...body.map((l) => `  ${l}`), ' exit');
    out.push('exit');
  }

  if (from.bgp && (!to.bgp || from.bgp.asn !== to.bgp.asn)) out.push(`no router bgp ${from.bgp.asn}`);
  if (to.bgp) {
    const base = from.bgp?.asn === to.bgp.asn ? from.bgp : { asn: to.bgp.asn, lines: [], ipv4: [] };
    const gone = new Set(base.lines.filter((l) => / remote-as /.test(l) && !to.bgp!.lines.includes(l)).map((l) => neighborOf(l)!));
    // A neighbor removed with its remote-as takes its other lines along.
    const removable = (l: string) => !gone.has(neighborOf(l) ?? '') || / remote-as /.test(l);
    const af = (l: string[]) => (l.length ? [' address-family ipv4 unicast', ...l.map((x) => `  ${x}`), ' exit-address-family'] : []);
    // Order: what goes from the address family, then the neighbors' lines (a neighbor
    // must exist before the address family names it, and go after), then what comes.
    const body = [
      ...af(minus(base.ipv4, to.bgp.ipv4).filter(removable).map(negate)),
      ...minus(base.lines, to.bgp.lines).filter(removable).map((l) => ` ${negate(l)}`),
      ...minus(to.bgp.lines, base.lines).map((l) => ` ${l}`),
      ...af(minus(to.bgp.ipv4, base.ipv4)),
    ];
    if (body.length) out.push(`router bgp ${to.bgp.asn}`, ...body, 'exit');
  }

  // An entry is its map and sequence number: one whose action changed was replaced in
  // place above, and `no route-map NAME deny SEQ` would now remove the new one.
  const entry = (head: string) => head.replace(/ (permit|deny) (\d+)$/, ' $2');
  const kept = new Set([...to.routeMaps.keys()].map(entry));
  for (const head of from.routeMaps.keys()) if (!kept.has(entry(head))) out.push(`no ${head}`);
  out.push(...minus(fromPl, to.prefixLists).map((l) => `no ${l}`));
  const goneProfiles = [...from.bfdProfiles.keys()].filter((n) => !to.bfdProfiles.has(n));
  if (goneProfiles.length) out.push('bfd', ...goneProfiles.map((n) => ` no profile ${n}`), 'exit');
  return out.length ? `${out.join('\n')}\n` : '';
}

/** An empty configuration: what to diff against to remove everything ferry owns. */
export const EMPTY_FRR: FrrConfig = { prefixLists: [], routeMaps: new Map(), bfdProfiles: new Map() };

/**
 * `from` (read back from FRR) less the prefix lists and route maps `to` holds, so that
 * frrCommands sends those again: each FRR daemon keeps its own copy, and `show
 * running-config` shows them while any daemon has them, so a bgpd restarted empty (by
 * watchfrr) would lack them unseen. FRR takes an entry it already has without change.
 */
export function resendShared(from: FrrConfig, to: FrrConfig): FrrConfig {
  const wanted = new Set(to.prefixLists);
  return { ...from, prefixLists: from.prefixLists.filter((l) => !wanted.has(normalPrefixList(l))), routeMaps: new Map([...from.routeMaps].filter(([head]) => !to.routeMaps.has(head))) };
}
