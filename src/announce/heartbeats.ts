// Every agent's heartbeat, as the others see it: one Lease per node (ferry-l2-<node>),
// renewed every renew interval, carrying the node's devices and the addresses it answers
// for. A node is alive while its Lease keeps changing: each change is timed on the
// observer's own clock (as client-go's leader election does), so clock skew between nodes
// does not matter. The API writes are one per node per renew, whatever the number of
// addresses. Pure (time passed in).
import type { V1Lease } from '@kubernetes/client-node';

export const HEARTBEAT_LABEL = 'ferry.dev/heartbeat';
export const HEARTBEAT_KIND = 'l2';
export const ANNOTATION_DEVICES = 'ferry.dev/l2-devices';
export const ANNOTATION_CLAIMS = 'ferry.dev/l2-claims';
/** Set for a lease duration after the node was cut off (see election.ts). */
export const ANNOTATION_RECOVERING = 'ferry.dev/l2-recovering';
const MAX_NAME = 253;

/** The node's heartbeat Lease name (node names may be long: those are cut and hashed). */
export function heartbeatName(node: string): string {
  const name = `ferry-l2-${node}`;
  if (name.length <= MAX_NAME) return name;
  let h = 0x811c9dc5;
  for (let i = 0; i < node.length; i++) h = Math.imul(h ^ node.charCodeAt(i), 0x01000193) >>> 0;
  return `${name.slice(0, MAX_NAME - 9)}-${h.toString(16).padStart(8, '0')}`;
}

export interface Heartbeat {
  node: string;
  devices: string[];
  claims: string[];
  durationMs: number;
  /** The writer's renewTime (its own clock), ms since the epoch. */
  renewedAt?: number;
  recovering?: boolean;
}

/** A MicroTime as the API server parses it: RFC 3339 with exactly six fractional digits. */
export const microTime = (d: Date) => d.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');

const list = (s: string | undefined) => (s ? s.split(',').map((x) => x.trim()).filter(Boolean) : []);

/** A heartbeat Lease as ferry wrote it (undefined: not one). */
export function readHeartbeat(lease: V1Lease): Heartbeat | undefined {
  const node = lease.spec?.holderIdentity;
  if (!node || lease.metadata?.labels?.[HEARTBEAT_LABEL] !== HEARTBEAT_KIND) return undefined;
  const a = lease.metadata?.annotations ?? {};
  const renew = lease.spec?.renewTime;
  const renewedAt = renew ? new Date(renew).getTime() : undefined;
  return { node, devices: list(a[ANNOTATION_DEVICES]), claims: list(a[ANNOTATION_CLAIMS]), durationMs: (lease.spec?.leaseDurationSeconds ?? 0) * 1000, recovering: a[ANNOTATION_RECOVERING] === 'true', ...(renewedAt !== undefined && !Number.isNaN(renewedAt) ? { renewedAt } : {}) };
}

/** The Lease body for a heartbeat (renewTime now). */
export function heartbeatLease(namespace: string, hb: Heartbeat, now: Date, previous?: V1Lease): V1Lease {
  return {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: {
      ...(previous?.metadata ?? {}),
      name: heartbeatName(hb.node),
      namespace,
      labels: { ...(previous?.metadata?.labels ?? {}), [HEARTBEAT_LABEL]: HEARTBEAT_KIND },
      annotations: { ...(previous?.metadata?.annotations ?? {}), [ANNOTATION_DEVICES]: hb.devices.join(','), [ANNOTATION_CLAIMS]: hb.claims.join(','), [ANNOTATION_RECOVERING]: hb.recovering ? 'true' : 'false' },
    },
    spec: { holderIdentity: hb.node, leaseDurationSeconds: Math.ceil(hb.durationMs / 1000), renewTime: microTime(now) as never, acquireTime: (previous?.spec?.acquireTime ?? microTime(now)) as never },
  };
}

/** Every node's last heartbeat and when this agent saw it change. */
export class HeartbeatView {
  private readonly seen = new Map<string, { hb: Heartbeat; record: string; at: number }>();

  /** A Lease was added or changed (call for deletes with `gone`). */
  observe(lease: V1Lease, now: number, gone = false): void {
    const hb = readHeartbeat(lease);
    if (!hb) return;
    if (gone) {
      this.seen.delete(hb.node);
      return;
    }
    const record = `${hb.renewedAt}|${hb.durationMs}|${hb.claims.join(',')}|${hb.recovering}`;
    const prev = this.seen.get(hb.node);
    this.seen.set(hb.node, { hb, record, at: prev && prev.record === record ? prev.at : now });
  }

  /** Nodes whose heartbeat changed within its own duration. */
  live(now: number): Set<string> {
    return new Set([...this.seen].filter(([, s]) => now < s.at + s.hb.durationMs).map(([n]) => n));
  }

  heartbeats(): Heartbeat[] {
    return [...this.seen.values()].map((s) => s.hb);
  }

  /** When the next live node would expire, if it does not renew (ms since the epoch). */
  nextExpiry(now: number): number | undefined {
    const times = [...this.seen.values()].map((s) => s.at + s.hb.durationMs).filter((t) => t > now);
    return times.length ? Math.min(...times) : undefined;
  }
}
