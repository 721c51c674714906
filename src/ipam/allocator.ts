// LB-IPAM's decision, pure: every LoadBalancer Service and every pool in, the addresses
// each Service should have out, with a reason. Recomputed whole each time, and sticky: an
// address a Service holds (its status) stays while it is still valid, so a restarted or
// newly elected operator changes nothing. Then, oldest Service first, requested addresses
// are granted, sharing keys join their address, and the rest get the lowest free address
// of the first pool that selects them, in poolOrder.
import { intToIp, ipToInt } from './ipv4.js';
import { PoolSpace, poolContains, poolUsable, resolvePools, type Pool, type PoolInput } from './pool.js';
import { anySelectorMatches, anySelectorNarrows, selectorMatches, selectorNarrows } from './selector.js';

export interface ServiceInput {
  /** namespace/name */
  key: string;
  namespace: string;
  created: string;
  /** The Service's labels plus the pseudo-labels (see serviceLabels). */
  labels: Readonly<Record<string, string>>;
  /** Its namespace's labels (a pool's namespaceSelector); undefined: the namespace is not
   * known yet (its watch event still on the way), so no pool can be judged by them. */
  namespaceLabels?: Readonly<Record<string, string>>;
  /** spec.loadBalancerIP and ferry.dev/load-balancer-ips (IPv4). */
  requestedIPs: string[];
  /** ferry.dev/pool */
  requestedPool?: string;
  /** ferry.dev/sharing-key */
  sharingKey?: string;
  /** (protocol, port) pairs: `TCP/53`. */
  ports: string[];
  etpLocal: boolean;
  /** spec.selector, canonical: Services sharing an address under ETP=Local must agree. */
  selector: string;
  /** The addresses its status holds now. */
  current: string[];
  /** A request that cannot be read (a bad address in the annotation, say). */
  requestError?: string;
}

export type Reason = 'Allocated' | 'NoPool' | 'PoolExhausted' | 'RequestedIPUnavailable' | 'SharingConflict' | 'SelectorMismatch' | 'NamespacePending';

export interface Outcome {
  ips: string[];
  pool?: string;
  reason: Reason;
  message: string;
}

export interface PoolUsage {
  total: number;
  used: number;
  available: number;
  ipv6Blocks: number;
  errors: string[];
  conflictWith?: string;
}

export interface Allocation {
  services: Map<string, Outcome>;
  pools: Map<string, PoolUsage>;
  /** Addresses a Service held and no longer may, and why. */
  released: Array<{ service: string; ip: string; why: string }>;
}

/** One address and the Services on it. */
interface Holding {
  ip: number;
  pool: Pool;
  /** namespace/sharing-key; undefined: the address is one Service's alone. */
  key: string | undefined;
  ports: Set<string>;
  etpLocal: boolean;
  selector: string;
  services: string[];
}

/** Does the pool select Services by their namespace's labels? */
const byNamespace = (p: Pool) => selectorNarrows(p.namespaceSelector) || anySelectorNarrows(p.namespaceSelectors);
/** Does the pool select some Services only (a non-empty selector of either kind)? */
const selective = (p: Pool) => selectorNarrows(p.selector) || anySelectorNarrows(p.serviceSelectors) || byNamespace(p);
/** Does the pool select this Service (its labels, and its namespace's)? While the namespace
 * is not known, its selectors are not held against the Service (see namespacePending). */
const selects = (p: Pool, s: ServiceInput) =>
  selectorMatches(p.selector, s.labels) &&
  anySelectorMatches(p.serviceSelectors, s.labels) &&
  (!s.namespaceLabels || (selectorMatches(p.namespaceSelector, s.namespaceLabels) && anySelectorMatches(p.namespaceSelectors, s.namespaceLabels)));
/** Would a decision for this Service rest on the labels of a namespace not known yet? Then
 * it waits for them: an address given meanwhile from another pool would stick. */
const namespacePending = (pools: readonly Pool[], s: ServiceInput) => !s.namespaceLabels && pools.some(byNamespace);
const waitForNamespace = (s: ServiceInput): Outcome => ({ ips: [], reason: 'NamespacePending', message: `namespace ${s.namespace} is not known yet, and a pool selects by namespace labels` });

/** The order in which pools are tried for a Service that names none: by priority (1
 * first; 0 or none after every pool with one, as MetalLB does), then a pool that selects
 * Services before a pool for everyone (it is meant for them), then the older first (the
 * order the pools come in; the sort is stable). */
function poolOrder(pools: readonly Pool[]): Pool[] {
  const rank = (p: Pool) => p.priority || Number.MAX_SAFE_INTEGER;
  return [...pools].sort((a, b) => rank(a) - rank(b) || Number(selective(b)) - Number(selective(a)));
}
const byAge = (a: ServiceInput, b: ServiceInput) => (a.created < b.created ? -1 : a.created > b.created ? 1 : a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
const sharingKeyOf = (s: ServiceInput) => (s.sharingKey ? `${s.namespace}/${s.sharingKey}` : undefined);

/** Why `s` may not share `h` (undefined: it may). */
function sharingConflict(s: ServiceInput, h: Holding): string | undefined {
  const key = sharingKeyOf(s);
  if (!h.key || !key) return `${intToIp(h.ip)} is ${h.services.join(', ')}'s${h.key ? '' : ' alone (no sharing key)'}`;
  if (h.key !== key) return `${intToIp(h.ip)} is shared under key ${h.key}, not ${key} (sharing keys are per namespace)`;
  const overlap = s.ports.filter((p) => h.ports.has(p));
  if (overlap.length) return `${intToIp(h.ip)}: ports ${overlap.join(', ')} are already ${h.services.join(', ')}'s`;
  if (h.etpLocal !== s.etpLocal) return `${intToIp(h.ip)}: externalTrafficPolicy differs from ${h.services.join(', ')}'s`;
  if (s.etpLocal && h.selector !== s.selector) return `${intToIp(h.ip)}: with externalTrafficPolicy Local, the selectors of Services sharing an address must be the same as ${h.services.join(', ')}'s`;
  return undefined;
}

export function allocate(poolInputs: PoolInput[], services: ServiceInput[]): Allocation {
  const pools = resolvePools(poolInputs);
  const usable = pools.filter(poolUsable);
  const ordered = poolOrder(usable);
  const spaces = new Map(usable.map((p) => [p.name, new PoolSpace(p)]));
  const holdings = new Map<number, Holding>();
  /** Holdings by sharing key: a keyed Service looks only at its key's addresses. */
  const byKey = new Map<string, Holding[]>();
  const out: Allocation = { services: new Map(), pools: new Map(), released: [] };
  const poolOf = (ip: number) => usable.find((p) => poolContains(p, ip));
  const join = (s: ServiceInput, h: Holding) => {
    h.services.push(s.key);
    for (const p of s.ports) h.ports.add(p);
  };
  const hold = (s: ServiceInput, ip: number, pool: Pool): Holding => {
    const h: Holding = { ip, pool, key: sharingKeyOf(s), ports: new Set(s.ports), etpLocal: s.etpLocal, selector: s.selector, services: [s.key] };
    holdings.set(ip, h);
    if (h.key) {
      const list = byKey.get(h.key);
      if (list) list.push(h);
      else byKey.set(h.key, [h]);
    }
    spaces.get(pool.name)!.take(ip);
    return h;
  };
  const sorted = [...services].sort(byAge);

  // Pass 1: what each Service holds stays while it is still valid.
  const kept = new Map<string, Holding[]>();
  for (const s of sorted) {
    const mine: Holding[] = [];
    if (s.requestError) {
      for (const ip of s.current) out.released.push({ service: s.key, ip, why: s.requestError });
      continue;
    }
    for (const text of s.current) {
      const ip = ipToInt(text);
      const pool = poolOf(ip);
      const why = !pool ? 'no pool holds it any more'
        : !selects(pool, s) ? `pool ${pool.name} does not select the Service any more`
        : s.requestedPool && s.requestedPool !== pool.name ? `the Service asks for pool ${s.requestedPool}`
        : s.requestedIPs.length && !s.requestedIPs.includes(text) ? `the Service asks for ${s.requestedIPs.join(', ')}`
        : undefined;
      if (why) {
        out.released.push({ service: s.key, ip: text, why });
        continue;
      }
      const h = holdings.get(ip);
      if (!h) mine.push(hold(s, ip, pool!));
      else if (!h.services.includes(s.key)) {
        const conflict = sharingConflict(s, h);
        if (conflict) out.released.push({ service: s.key, ip: text, why: conflict });
        else {
          join(s, h);
          mine.push(h);
        }
      }
    }
    if (mine.length) kept.set(s.key, mine);
  }

  // Pass 2: the others, oldest first.
  for (const s of sorted) {
    if (s.requestError) {
      out.services.set(s.key, { ips: [], reason: 'RequestedIPUnavailable', message: s.requestError });
      continue;
    }
    const mine = kept.get(s.key);
    if (mine && (s.requestedIPs.length === 0 || mine.length === s.requestedIPs.length)) {
      out.services.set(s.key, { ips: mine.map((h) => intToIp(h.ip)), pool: mine[0]!.pool.name, reason: 'Allocated', message: `${mine.map((h) => intToIp(h.ip)).join(', ')} from pool ${mine[0]!.pool.name}` });
      continue;
    }
    out.services.set(s.key, s.requestedIPs.length ? grantRequested(s, mine ?? []) : assign(s));
  }

  function grantRequested(s: ServiceInput, have: Holding[]): Outcome {
    const fail = (reason: Reason, message: string): Outcome => ({ ips: [], reason, message });
    const plan: Array<{ ip: number; pool: Pool; h?: Holding }> = [];
    for (const text of s.requestedIPs) {
      const ip = ipToInt(text);
      if (have.some((h) => h.ip === ip)) continue;
      const pool = poolOf(ip);
      if (!pool) return fail('RequestedIPUnavailable', `${text} is in no usable pool`);
      if (s.requestedPool && pool.name !== s.requestedPool) return fail('RequestedIPUnavailable', `${text} is in pool ${pool.name}, not in ${s.requestedPool}`);
      if (!selects(pool, s)) return fail('SelectorMismatch', `${text} is in pool ${pool.name}, which does not select this Service`);
      if (namespacePending([pool], s)) return waitForNamespace(s);
      const h = holdings.get(ip);
      if (h) {
        const conflict = sharingConflict(s, h);
        if (conflict) return fail(h.key && sharingKeyOf(s) ? 'SharingConflict' : 'RequestedIPUnavailable', conflict);
      } else if (pool.disabled) return fail('RequestedIPUnavailable', `${text} is in pool ${pool.name}, which is disabled`);
      plan.push({ ip, pool, h });
    }
    for (const p of plan) {
      if (p.h) join(s, p.h);
      else hold(s, p.ip, p.pool);
    }
    return { ips: [...s.requestedIPs], pool: plan[0]?.pool.name ?? have[0]?.pool.name, reason: 'Allocated', message: `${s.requestedIPs.join(', ')} as requested` };
  }

  function assign(s: ServiceInput): Outcome {
    let candidates: Pool[];
    if (s.requestedPool) {
      const p = pools.find((x) => x.name === s.requestedPool);
      if (!p) return { ips: [], reason: 'NoPool', message: `pool ${s.requestedPool} does not exist` };
      if (!poolUsable(p)) return { ips: [], reason: 'NoPool', message: `pool ${p.name} is not usable: ${p.conflictWith ? `it overlaps the older pool ${p.conflictWith}` : p.errors.join('; ')}` };
      if (!selects(p, s)) return { ips: [], reason: 'SelectorMismatch', message: `pool ${p.name} does not select this Service` };
      if (namespacePending([p], s)) return waitForNamespace(s);
      if (p.disabled) return { ips: [], reason: 'NoPool', message: `pool ${p.name} is disabled` };
      candidates = [p];
    } else {
      candidates = ordered.filter((p) => p.autoAssign && !p.disabled && selects(p, s));
      if (namespacePending(candidates, s)) return waitForNamespace(s);
      if (candidates.length === 0) return { ips: [], reason: 'NoPool', message: usable.length ? 'no pool that assigns addresses by itself selects this Service' : 'there is no usable pool' };
    }
    const key = sharingKeyOf(s);
    if (key) {
      let why: string | undefined;
      for (const h of byKey.get(key) ?? []) {
        if (!candidates.includes(h.pool)) continue;
        const conflict = sharingConflict(s, h);
        if (!conflict) {
          join(s, h);
          return { ips: [intToIp(h.ip)], pool: h.pool.name, reason: 'Allocated', message: `${intToIp(h.ip)} from pool ${h.pool.name}` };
        }
        why ??= conflict;
      }
      if (why) return { ips: [], reason: 'SharingConflict', message: why };
    }
    for (const p of candidates) {
      const ip = spaces.get(p.name)!.takeNext();
      if (ip === undefined) continue;
      hold(s, ip, p);
      return { ips: [intToIp(ip)], pool: p.name, reason: 'Allocated', message: `${intToIp(ip)} from pool ${p.name}` };
    }
    return { ips: [], reason: 'PoolExhausted', message: `no free address in ${candidates.map((p) => `pool ${p.name}`).join(', ')}` };
  }

  // Who shares an address is known only now: every Service on it says so, the same way
  // each pass (a message that changed from pass to pass would be a status write each time).
  for (const [key, o] of out.services) {
    if (o.reason !== 'Allocated') continue;
    const others = [...new Set(o.ips.flatMap((ip) => holdings.get(ipToInt(ip))?.services ?? []))].filter((x) => x !== key).sort();
    if (others.length) o.message = `${o.message}, shared with ${others.join(', ')}`;
  }

  for (const p of pools) {
    const used = spaces.get(p.name)?.inUse ?? 0;
    out.pools.set(p.name, { total: p.total, used, available: Math.max(0, p.total - used), ipv6Blocks: p.ipv6Blocks, errors: p.errors, ...(p.conflictWith ? { conflictWith: p.conflictWith } : {}) });
  }
  return out;
}
