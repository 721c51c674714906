// LoadBalancerIPPools: their blocks as IPv4 ranges, checked, and the address space each
// hands out. A pool that overlaps an older one is in conflict and hands out nothing (the
// older wins); a pool with a bad block hands out nothing and says which. IPv6 blocks are
// accepted and kept for when the datapath speaks IPv6, and no address is taken from them.
import { isIPv4, isIPv6 } from 'node:net';
import { edgeAddresses, intToIp, ipToInt, isEdge, parseCidr4 } from './ipv4.js';
import { selectorError, type LabelSelector } from './selector.js';

/** More blocks than this make a pool invalid (the CRD's maxItems). */
export const MAX_BLOCKS = 1024;
/** More selectors than this in one list make a pool invalid (the CRD's maxItems). */
export const MAX_SELECTORS = 16;
/** The largest priority (the CRD's maximum: a Kubernetes int32). */
export const MAX_PRIORITY = 2147483647;
/** A priority a pool may have: an integer from 0 (none) to MAX_PRIORITY. */
export const isPriority = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= MAX_PRIORITY;

export interface PoolBlock {
  cidr?: string;
  start?: string;
  stop?: string;
}

export interface PoolSpec {
  blocks?: PoolBlock[];
  serviceSelector?: LabelSelector;
  /** Services that match any of these (MetalLB's serviceAllocation.serviceSelectors); with
   * serviceSelector, that one as well. */
  serviceSelectors?: LabelSelector[];
  /** Which namespaces' Services, by the namespaces' labels (with serviceSelector: both must match). */
  namespaceSelector?: LabelSelector;
  /** Namespaces any of these matches (MetalLB's namespaceSelectors); with namespaceSelector,
   * that one as well. */
  namespaceSelectors?: LabelSelector[];
  /** Hand out each /24's .0 and .255 too (default: skip them, as some clients mistreat them). */
  allowFirstLastIPs?: boolean;
  /** Take addresses from this pool for Services that name no pool and no address (default true). */
  autoAssign?: boolean;
  /** No new addresses from this pool; those given stay. */
  disabled?: boolean;
  /** The order pools are tried in for a Service that names none: 1 first; 0 or none after
   * every pool with a priority (MetalLB's serviceAllocation.priority). */
  priority?: number;
}

export interface PoolInput {
  name: string;
  /** creationTimestamp: the older of two overlapping pools wins. */
  created: string;
  spec: PoolSpec;
}

export interface Pool {
  name: string;
  created: string;
  ranges: Array<[number, number]>;
  ipv6Blocks: number;
  selector: LabelSelector | undefined;
  /** Any of them (empty: no such condition). */
  serviceSelectors: LabelSelector[];
  namespaceSelector: LabelSelector | undefined;
  /** Any of them (empty: no such condition). */
  namespaceSelectors: LabelSelector[];
  allowFirstLast: boolean;
  autoAssign: boolean;
  disabled: boolean;
  /** 0: none (tried after every pool with one). */
  priority: number;
  /** Why the pool hands out nothing (bad blocks, a bad selector). */
  errors: string[];
  /** The older pool this one overlaps, if any. */
  conflictWith?: string;
  /** Addresses it can hand out. */
  total: number;
}

function parseBlock(b: PoolBlock): { range?: [number, number]; ipv6?: boolean; error?: string } {
  if (b.cidr !== undefined) {
    if (b.start !== undefined || b.stop !== undefined) return { error: `block ${JSON.stringify(b)}: a cidr, or a start and a stop, not both` };
    const [addr = '', bits] = b.cidr.split('/');
    if (isIPv6(addr)) return bits !== undefined && /^\d{1,3}$/.test(bits) && Number(bits) <= 128 ? { ipv6: true } : { error: `"${b.cidr}" is not an IPv6 CIDR` };
    const p = parseCidr4(b.cidr);
    return 'error' in p ? { error: p.error } : { range: p.range };
  }
  if (b.start === undefined || b.stop === undefined) return { error: `block ${JSON.stringify(b)}: a cidr, or a start and a stop` };
  if (isIPv6(b.start) && isIPv6(b.stop)) return { ipv6: true };
  if (!isIPv4(b.start) || !isIPv4(b.stop)) return { error: `block ${b.start}-${b.stop}: start and stop must be IPv4 (or both IPv6) addresses` };
  const a = ipToInt(b.start);
  const z = ipToInt(b.stop);
  if (a > z) return { error: `block ${b.start}-${b.stop}: start is after stop` };
  return { range: [a, z] };
}

/** What is wrong with a list of selectors (a field of the spec, any of which must match). */
function selectorListErrors(field: string, list: unknown): string[] {
  if (list === undefined) return [];
  if (!Array.isArray(list)) return [`${field}: must be a list of selectors`];
  if (list.length > MAX_SELECTORS) return [`${field}: ${list.length} selectors, at most ${MAX_SELECTORS}`];
  return list.flatMap((sel: unknown, i) => {
    const e = selectorError(sel as LabelSelector);
    return e ? [`${field}[${i}]: ${e}`] : [];
  });
}

export function parsePool(input: PoolInput): Pool {
  const errors: string[] = [];
  const ranges: Array<[number, number]> = [];
  let ipv6Blocks = 0;
  const blocks = input.spec.blocks ?? [];
  if (blocks.length === 0) errors.push('no blocks');
  if (blocks.length > MAX_BLOCKS) errors.push(`${blocks.length} blocks: at most ${MAX_BLOCKS}`);
  for (const b of blocks) {
    const r = parseBlock(b);
    if (r.error) errors.push(r.error);
    else if (r.ipv6) ipv6Blocks++;
    else if (r.range) ranges.push(r.range);
  }
  ranges.sort((x, y) => x[0] - y[0]);
  for (let i = 1; i < ranges.length; i++) {
    if (ranges[i]![0] <= ranges[i - 1]![1]) errors.push(`blocks overlap at ${intToIp(ranges[i]![0])}`);
  }
  const selErr = selectorError(input.spec.serviceSelector);
  if (selErr) errors.push(`serviceSelector: ${selErr}`);
  const nsErr = selectorError(input.spec.namespaceSelector);
  if (nsErr) errors.push(`namespaceSelector: ${nsErr}`);
  const listErrors = [...selectorListErrors('serviceSelectors', input.spec.serviceSelectors), ...selectorListErrors('namespaceSelectors', input.spec.namespaceSelectors)];
  errors.push(...listErrors);
  const priority: unknown = input.spec.priority ?? 0;
  const priorityOk = isPriority(priority);
  if (!priorityOk) errors.push(`priority ${JSON.stringify(priority)}: an integer from 0 to ${MAX_PRIORITY} (1 is tried first; 0 or none after every pool with a priority)`);
  const allowFirstLast = input.spec.allowFirstLastIPs ?? false;
  const total = errors.length ? 0 : ranges.reduce((n, [a, b]) => n + (b - a + 1) - (allowFirstLast ? 0 : edgeAddresses(a, b)), 0);
  return {
    name: input.name,
    created: input.created,
    ranges,
    ipv6Blocks,
    selector: input.spec.serviceSelector,
    // A malformed list makes the pool hand out nothing (errors); it selects nothing then.
    serviceSelectors: listErrors.length ? [] : (input.spec.serviceSelectors ?? []),
    namespaceSelector: input.spec.namespaceSelector,
    namespaceSelectors: listErrors.length ? [] : (input.spec.namespaceSelectors ?? []),
    allowFirstLast,
    autoAssign: input.spec.autoAssign ?? true,
    disabled: input.spec.disabled ?? false,
    priority: priorityOk ? priority : 0,
    errors,
    total,
  };
}

const older = (a: Pool, b: Pool) => (a.created < b.created ? -1 : a.created > b.created ? 1 : a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

/** Parse every pool and mark those that overlap an older one; oldest first. */
export function resolvePools(inputs: PoolInput[]): Pool[] {
  const pools = inputs.map(parsePool).sort(older);
  const kept: Pool[] = [];
  for (const p of pools) {
    if (p.errors.length === 0) {
      const clash = kept.find((k) => k.ranges.some(([a, b]) => p.ranges.some(([c, d]) => c <= b && a <= d)));
      if (clash) {
        p.conflictWith = clash.name;
        continue;
      }
    }
    kept.push(p);
  }
  return pools;
}

/** Does the pool hand out addresses at all (no errors, no conflict)? */
export const poolUsable = (p: Pool) => p.errors.length === 0 && !p.conflictWith;

export function poolContains(p: Pool, ip: number): boolean {
  if (!p.allowFirstLast && isEdge(ip)) return false;
  return p.ranges.some(([a, b]) => ip >= a && ip <= b);
}

/** The addresses of one pool in use, and the lowest free one, found in amortised O(1). */
export class PoolSpace {
  private readonly used = new Set<number>();
  private range = 0;
  private next: number;

  constructor(readonly pool: Pool) {
    this.next = pool.ranges[0]?.[0] ?? 0;
  }

  get inUse(): number {
    return this.used.size;
  }

  take(ip: number): void {
    this.used.add(ip);
  }

  has(ip: number): boolean {
    return this.used.has(ip);
  }

  /** The lowest free address from where the search stands, taken; undefined when none. */
  takeNext(): number | undefined {
    const ranges = this.pool.ranges;
    while (this.range < ranges.length) {
      const [, end] = ranges[this.range]!;
      while (this.next <= end) {
        const ip = this.next++;
        if ((this.pool.allowFirstLast || !isEdge(ip)) && !this.used.has(ip)) {
          this.used.add(ip);
          return ip;
        }
      }
      this.range++;
      this.next = ranges[this.range]?.[0] ?? 0;
    }
    return undefined;
  }
}
