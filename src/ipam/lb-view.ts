// What `ferry lb list` and `ferry lb pools` show, pure: LoadBalancer addresses with their
// pool and the Services on them, Services still waiting and why, and each pool's blocks
// and usage as its status reports it.
import type { V1Service } from '@kubernetes/client-node';
import { ipToInt } from './ipv4.js';
import { poolContains, resolvePools } from './pool.js';
import { poolInput, type PoolObject } from './pool-resource.js';
import type { LabelSelector } from './selector.js';
import { serviceKey } from './service-request.js';
import { CONDITION_IP_ALLOCATED } from './status.js';
import { isIPv4 } from 'node:net';

export interface AddressRow {
  address: string;
  pool: string;
  services: string[];
  ports: string[];
  trafficPolicy: string;
  /**
   * Who announces it: the node answering ARP for it (L2), as the nodes' heartbeats claim,
   * and the nodes the BGP resources make announce it.
   */
  announcedBy: string;
}

/** A node's claims, from its heartbeat: what it answers ARP for, and how fresh that is. */
export interface AnnouncerClaim {
  node: string;
  addresses: readonly string[];
  /** Seconds since the heartbeat was renewed, and the heartbeat's duration. */
  ageSeconds: number;
  durationSeconds: number;
}

export interface WaitingRow {
  service: string;
  reason: string;
  message: string;
}

export interface PoolRow {
  name: string;
  blocks: string;
  selector: string;
  /** '-': none (tried after every pool with a priority). */
  priority: string;
  total: string;
  used: string;
  available: string;
  ready: string;
  message: string;
}

/** `bgp`: address → the nodes announcing it by BGP (announce/bgp.ts `bgpAnnouncers`). */
export function addressRows(services: readonly V1Service[], pools: readonly PoolObject[], claims: readonly AnnouncerClaim[] = [], bgp: ReadonlyMap<string, readonly string[]> = new Map()): { addresses: AddressRow[]; waiting: WaitingRow[] } {
  const resolved = resolvePools(pools.map(poolInput));
  const byIp = new Map<string, AddressRow>();
  const waiting: WaitingRow[] = [];
  for (const s of services) {
    if (s.spec?.type !== 'LoadBalancer') continue;
    const key = serviceKey(s);
    const ips = (s.status?.loadBalancer?.ingress ?? []).map((i) => i.ip ?? '').filter(Boolean);
    const cond = (s.status?.conditions ?? []).find((c) => c.type === CONDITION_IP_ALLOCATED);
    if (ips.length === 0) {
      waiting.push({ service: key, reason: cond?.reason ?? (s.spec.loadBalancerClass && s.spec.loadBalancerClass !== 'ferry.dev/lb' ? `class ${s.spec.loadBalancerClass}` : 'Pending'), message: cond?.message ?? '' });
      continue;
    }
    for (const ip of ips) {
      const row = byIp.get(ip) ?? { address: ip, pool: (isIPv4(ip) && resolved.find((p) => !p.conflictWith && poolContains(p, ipToInt(ip)))?.name) || '-', services: [], ports: [], trafficPolicy: '', announcedBy: announcedBy(ip, claims, bgp.get(ip) ?? []) };
      row.services.push(key);
      row.ports.push(...(s.spec.ports ?? []).map((p) => `${p.port}/${p.protocol ?? 'TCP'}`));
      const etp = s.spec.externalTrafficPolicy ?? 'Cluster';
      row.trafficPolicy = row.trafficPolicy && row.trafficPolicy !== etp ? 'mixed' : etp;
      byIp.set(ip, row);
    }
  }
  const addresses = [...byIp.values()].sort((a, b) => (isIPv4(a.address) && isIPv4(b.address) ? ipToInt(a.address) - ipToInt(b.address) : a.address < b.address ? -1 : 1));
  return { addresses, waiting };
}

/**
 * `node-2 (l2)`: the node whose fresh heartbeat claims the address; only when no fresh one
 * does, the stale claimers, `node-3 (l2, stale 12s)`. Then `node-1, node-2 (bgp)`; `-` when
 * nobody announces it.
 */
function announcedBy(ip: string, claims: readonly AnnouncerClaim[], bgpNodes: readonly string[]): string {
  const by = claims.filter((c) => c.addresses.includes(ip));
  const fresh = by.filter((c) => c.ageSeconds <= c.durationSeconds);
  const l2 = fresh.length ? fresh.map((c) => `${c.node} (l2)`) : by.map((c) => `${c.node} (l2, stale ${Math.round(c.ageSeconds)}s)`);
  const parts = bgpNodes.length ? [...l2, `${bgpNodes.join(', ')} (bgp)`] : l2;
  return parts.length ? parts.join(', ') : '-';
}

export function poolRows(pools: readonly PoolObject[]): PoolRow[] {
  return pools.map((p) => {
    const spec = poolInput(p).spec;
    const ready = p.status?.conditions?.find((c) => c.type === 'Ready');
    const num = (n: number | undefined) => (n === undefined ? '?' : String(n));
    const terms = (sel: LabelSelector | undefined, prefix = '') => [
      // Read as the pool reader does: nothing in an object is trusted to have its type.
      ...Object.entries(typeof sel?.matchLabels === 'object' && sel.matchLabels !== null ? sel.matchLabels : {}).map(([k, v]) => `${prefix}${k}=${v}`),
      ...(Array.isArray(sel?.matchExpressions) ? sel.matchExpressions : []).map((e) => `${prefix}${e?.key} ${e?.operator}${Array.isArray(e?.values) ? ` (${e.values.join(',')})` : ''}`),
    ];
    // A list (any of its selectors) reads "one of {a=1} {b=2}"; an empty one in it, {any}.
    const anyOf = (list: LabelSelector[] | undefined, prefix = '') => (Array.isArray(list) && list.length ? [`${prefix}one of ${list.map((sel) => `{${terms(sel).join(', ') || 'any'}}`).join(' ')}`] : []);
    const selector = [...terms(spec.serviceSelector), ...anyOf(spec.serviceSelectors), ...terms(spec.namespaceSelector, 'namespace '), ...anyOf(spec.namespaceSelectors, 'namespace ')].join(', ');
    return {
      name: p.metadata?.name ?? '',
      blocks: (spec.blocks ?? []).map((b) => b.cidr ?? `${b.start}-${b.stop}`).join(', '),
      selector: selector || '(every Service)',
      priority: typeof spec.priority === 'number' && spec.priority > 0 ? String(spec.priority) : '-',
      total: num(p.status?.total),
      used: num(p.status?.used),
      available: num(p.status?.available),
      ready: `${ready?.status ?? 'Unknown'}${spec.disabled ? ' (disabled)' : ''}`,
      message: ready?.message ?? 'no status yet (is the operator running?)',
    };
  });
}
