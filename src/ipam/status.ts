// What the allocator's decision makes of a Service's and a pool's status, and whether that
// is a change at all (the operator writes only changes). Pure.
import type { V1Condition, V1ServiceStatus } from '@kubernetes/client-node';
import type { Outcome, PoolUsage } from './allocator.js';

/** The Service condition LB-IPAM owns. */
export const CONDITION_IP_ALLOCATED = 'ferry.dev/IPAllocated';

export interface PoolStatus {
  total: number;
  used: number;
  available: number;
  conditions: Array<{ type: string; status: 'True' | 'False'; reason: string; message: string; lastTransitionTime: string }>;
}

/** Condition messages stay short, whatever a hostile object put into them. */
const MAX_MESSAGE = 1024;
export const clipMessage = (m: string) => (m.length > MAX_MESSAGE ? `${m.slice(0, MAX_MESSAGE - 1)}…` : m);

const sameIps = (a: string[], b: string[]) => a.length === b.length && a.every((x, i) => x === b[i]);

/** Keep a condition's transition time while its status stays the same. */
export function conditionSince(prev: { status?: string; lastTransitionTime?: Date | string } | undefined, status: string, now: Date): string {
  if (prev && prev.status === status && prev.lastTransitionTime) return new Date(prev.lastTransitionTime).toISOString().replace(/\.\d+Z$/, 'Z');
  return now.toISOString().replace(/\.\d+Z$/, 'Z');
}

/** The status a Service should have for this outcome; undefined when it has it already. */
export function serviceStatusFor(current: V1ServiceStatus | undefined, o: Outcome, now: Date): V1ServiceStatus | undefined {
  const ips = (current?.loadBalancer?.ingress ?? []).map((i) => i.ip ?? '');
  const modes = (current?.loadBalancer?.ingress ?? []).every((i) => i.ipMode === 'VIP');
  const others = (current?.conditions ?? []).filter((c) => c.type !== CONDITION_IP_ALLOCATED);
  const prev = (current?.conditions ?? []).find((c) => c.type === CONDITION_IP_ALLOCATED);
  const status = o.reason === 'Allocated' ? 'True' : 'False';
  const message = clipMessage(o.message);
  if (sameIps(ips, o.ips) && modes && prev && prev.status === status && prev.reason === o.reason && prev.message === message) return undefined;
  const condition = { type: CONDITION_IP_ALLOCATED, status, reason: o.reason, message, lastTransitionTime: conditionSince(prev, status, now) } as unknown as V1Condition;
  return { ...current, loadBalancer: { ingress: o.ips.map((ip) => ({ ip, ipMode: 'VIP' })) }, conditions: [...others, condition] };
}

/** A Service LB-IPAM no longer serves (type, class changed): its addresses and condition go. */
export function clearedServiceStatus(current: V1ServiceStatus | undefined): V1ServiceStatus | undefined {
  const ours = (current?.conditions ?? []).some((c) => c.type === CONDITION_IP_ALLOCATED);
  if (!ours) return undefined;
  return { ...current, loadBalancer: {}, conditions: (current?.conditions ?? []).filter((c) => c.type !== CONDITION_IP_ALLOCATED) };
}

/** A pool's status for its usage; undefined when it has it already. */
export function poolStatusFor(current: Partial<PoolStatus> | undefined, u: PoolUsage, now: Date): PoolStatus | undefined {
  const prev = (type: string) => current?.conditions?.find((c) => c.type === type);
  const ready = u.errors.length === 0 && !u.conflictWith;
  const readyMessage = u.errors.length ? clipMessage(u.errors.join('; ')) : u.conflictWith ? `overlaps the older pool ${u.conflictWith}` : `${u.available} of ${u.total} addresses free${u.ipv6Blocks ? `; ${u.ipv6Blocks} IPv6 block(s) kept for later, no address taken from them` : ''}`;
  const conditions: PoolStatus['conditions'] = [
    { type: 'Ready', status: ready ? 'True' : 'False', reason: u.errors.length ? 'InvalidBlocks' : u.conflictWith ? 'Conflict' : 'Ready', message: readyMessage, lastTransitionTime: conditionSince(prev('Ready'), ready ? 'True' : 'False', now) },
    { type: 'Conflict', status: u.conflictWith ? 'True' : 'False', reason: u.conflictWith ? 'Overlaps' : 'NoOverlap', message: u.conflictWith ? `overlaps the older pool ${u.conflictWith}, which keeps the addresses` : 'no other pool overlaps it', lastTransitionTime: conditionSince(prev('Conflict'), u.conflictWith ? 'True' : 'False', now) },
  ];
  const next: PoolStatus = { total: u.total, used: u.used, available: u.available, conditions };
  const same = current && current.total === next.total && current.used === next.used && current.available === next.available &&
    next.conditions.every((c) => {
      const p = prev(c.type);
      return p && p.status === c.status && p.reason === c.reason && p.message === c.message;
    });
  return same ? undefined : next;
}
