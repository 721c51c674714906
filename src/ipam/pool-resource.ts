// The LoadBalancerIPPool custom resource (ferry.dev/v1alpha1, cluster-scoped): its API
// coordinates, and its spec read defensively. The CRD's schema makes a real API server
// reject malformed pools, but a pool may predate a schema change, or come from a server
// without one: nothing here trusts a field's type.
import { MAX_BLOCKS, MAX_SELECTORS, type PoolBlock, type PoolInput, type PoolSpec } from './pool.js';
import type { LabelSelector } from './selector.js';
import type { PoolStatus } from './status.js';

export const POOL_GROUP = 'ferry.dev';
export const POOL_VERSION = 'v1alpha1';
export const POOL_PLURAL = 'loadbalancerippools';
export const POOL_KIND = 'LoadBalancerIPPool';
export const POOL_API_VERSION = `${POOL_GROUP}/${POOL_VERSION}`;
export const POOL_PATH = `/apis/${POOL_GROUP}/${POOL_VERSION}/${POOL_PLURAL}`;

export interface PoolObject {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; creationTimestamp?: Date | string; resourceVersion?: string; uid?: string };
  spec?: PoolSpec;
  status?: Partial<PoolStatus>;
}

const text = (v: unknown) => (v === undefined ? undefined : typeof v === 'string' ? v : JSON.stringify(v));
/** A list of selectors cut to one more than a pool may hold (so that too many is still seen). */
const selectorList = (v: unknown) => (Array.isArray(v) ? v.slice(0, MAX_SELECTORS + 1) : v) as LabelSelector[];
const flag = (v: unknown) => (typeof v === 'boolean' ? v : undefined);

/** A pool object as the allocator's input; fields of the wrong type become errors there. */
export function poolInput(p: PoolObject): PoolInput {
  const spec = (typeof p.spec === 'object' && p.spec !== null ? p.spec : {}) as Record<string, unknown>;
  const raw = Array.isArray(spec.blocks) ? spec.blocks : [];
  const blocks: PoolBlock[] = raw.slice(0, MAX_BLOCKS + 1).map((b) => {
    const o = (typeof b === 'object' && b !== null ? b : {}) as Record<string, unknown>;
    return { ...(o.cidr !== undefined ? { cidr: text(o.cidr) } : {}), ...(o.start !== undefined ? { start: text(o.start) } : {}), ...(o.stop !== undefined ? { stop: text(o.stop) } : {}) };
  });
  const created = p.metadata?.creationTimestamp;
  return {
    name: p.metadata?.name ?? '',
    created: created instanceof Date ? created.toISOString() : (created ?? ''),
    spec: {
      blocks,
      ...(spec.serviceSelector !== undefined ? { serviceSelector: spec.serviceSelector as LabelSelector } : {}),
      ...(spec.namespaceSelector !== undefined ? { namespaceSelector: spec.namespaceSelector as LabelSelector } : {}),
      // Lists pass as they are (bounded): the pool judges their type and each selector.
      ...(spec.serviceSelectors !== undefined ? { serviceSelectors: selectorList(spec.serviceSelectors) } : {}),
      ...(spec.namespaceSelectors !== undefined ? { namespaceSelectors: selectorList(spec.namespaceSelectors) } : {}),
      ...(flag(spec.allowFirstLastIPs) !== undefined ? { allowFirstLastIPs: flag(spec.allowFirstLastIPs) } : {}),
      ...(flag(spec.autoAssign) !== undefined ? { autoAssign: flag(spec.autoAssign) } : {}),
      ...(flag(spec.disabled) !== undefined ? { disabled: flag(spec.disabled) } : {}),
      // Passed as it is: a priority of the wrong type makes the pool not Ready, with the reason.
      ...(spec.priority !== undefined ? { priority: spec.priority as number } : {}),
    },
  };
}
