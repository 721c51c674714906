// `ferry migrate`, pure: MetalLB IPAddressPools and Cilium LoadBalancerIPPools become ferry
// pools with the same addresses (announcement objects through an AnnouncementMigrator, as
// ipam knows nothing of announcements), and the Service annotations of both become ferry's, so a
// cluster switches without an address changing (the operator keeps an address a Service
// holds while a pool holds it and selects the Service). What ferry cannot express is a
// warning, never a silent change.
import { isIPv4 } from 'node:net';
import { intToIp, ipToInt, parseCidr4 } from './ipv4.js';
import { MAX_PRIORITY, isPriority, type PoolBlock, type PoolSpec } from './pool.js';
import { POOL_API_VERSION, POOL_KIND } from './pool-resource.js';
import type { LabelSelector, LabelSelectorRequirement } from './selector.js';
import { ANNOTATION_IPS, ANNOTATION_POOL, ANNOTATION_SHARING_KEY, LABEL_SERVICE_NAME, LABEL_SERVICE_NAMESPACE } from './service-request.js';

/** The label the API server gives every namespace: its name. */
const LABEL_NAMESPACE_NAME = 'kubernetes.io/metadata.name';

type Doc = Record<string, unknown>;
type Meta = { name?: string; namespace?: string; annotations?: Record<string, string>; labels?: Record<string, string> } & Record<string, unknown>;

export interface Migration {
  docs: Doc[];
  warnings: string[];
}

/** Foreign Service annotations and the ferry annotation each becomes. */
export const ANNOTATION_MAP: Record<string, string> = {
  'metallb.io/loadBalancerIPs': ANNOTATION_IPS,
  'metallb.universe.tf/loadBalancerIPs': ANNOTATION_IPS,
  'metallb.io/address-pool': ANNOTATION_POOL,
  'metallb.universe.tf/address-pool': ANNOTATION_POOL,
  'metallb.io/allow-shared-ip': ANNOTATION_SHARING_KEY,
  'metallb.universe.tf/allow-shared-ip': ANNOTATION_SHARING_KEY,
  'lbipam.cilium.io/ips': ANNOTATION_IPS,
  'io.cilium/lb-ipam-ips': ANNOTATION_IPS,
  'lbipam.cilium.io/sharing-key': ANNOTATION_SHARING_KEY,
  'io.cilium/lb-ipam-sharing-key': ANNOTATION_SHARING_KEY,
};

/** Cilium's pseudo-labels for a Service's namespace and name, and ferry's. */
export const CILIUM_LABELS: Readonly<Record<string, string>> = {
  'io.kubernetes.service.namespace': LABEL_SERVICE_NAMESPACE,
  'io.kubernetes.service.name': LABEL_SERVICE_NAME,
};

/** MetalLB's and Cilium's announcement kinds (group/kind). Without a translator (the CLI
 * passes src/announce/migrate.ts's) they are named, not translated. */
const ANNOUNCEMENT_KINDS = new Set(['L2Advertisement', 'BGPAdvertisement', 'BGPPeer', 'BFDProfile', 'Community'].map((k) => `metallb.io/${k}`)
  .concat(['CiliumL2AnnouncementPolicy', 'CiliumBGPAdvertisement', 'CiliumBGPPeerConfig', 'CiliumBGPClusterConfig', 'CiliumBGPPeeringPolicy', 'CiliumBGPNodeConfigOverride'].map((k) => `cilium.io/${k}`)));

/** Announcement objects as ferry's: `kinds` (group/kind) are handed to `migrate` together, the
 * rest of the announcement kinds are named as not migrated. */
export interface AnnouncementMigrator {
  kinds: ReadonlySet<string>;
  migrate(docs: Doc[], warn: (m: string) => void): Doc[];
}

/** Server-side fields an apply must not carry. */
const SERVER_FIELDS = ['resourceVersion', 'uid', 'creationTimestamp', 'managedFields', 'generation', 'selfLink'];
const LAST_APPLIED = 'kubectl.kubernetes.io/last-applied-configuration';

const isObj = (v: unknown): v is Doc => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Every object of the input, List kinds opened. */
function flatten(docs: unknown[]): Doc[] {
  return docs.flatMap((d) => (isObj(d) && Array.isArray(d.items) && String(d.kind ?? '').endsWith('List') ? flatten(d.items) : isObj(d) ? [d] : []));
}

function poolDoc(name: string, spec: PoolSpec, from: string): Doc {
  return { apiVersion: POOL_API_VERSION, kind: POOL_KIND, metadata: { name, annotations: { 'ferry.dev/migrated-from': from } }, spec };
}

/** MetalLB's `10.0.0.0/24` or `10.0.0.1-10.0.0.9` (either family). */
function metallbBlock(a: string): PoolBlock {
  const s = a.trim();
  if (s.includes('-')) {
    const [start = '', stop = ''] = s.split('-').map((x) => x.trim());
    return { start, stop };
  }
  return { cidr: s };
}

/** A selector with its label keys renamed (another project's pseudo-labels as ferry's). */
export function rename(sel: LabelSelector | undefined, keys: Readonly<Record<string, string>>): LabelSelector | undefined {
  if (!sel) return undefined;
  const out: LabelSelector = {};
  if (sel.matchLabels) out.matchLabels = Object.fromEntries(Object.entries(sel.matchLabels).map(([k, v]) => [keys[k] ?? k, v]));
  if (sel.matchExpressions) out.matchExpressions = sel.matchExpressions.map((e) => ({ ...e, key: keys[e.key] ?? e.key }));
  return out;
}

function fromMetalLB(d: Doc, warn: (m: string) => void): Doc {
  const name = String((d.metadata as Meta)?.name ?? '');
  const spec = (isObj(d.spec) ? d.spec : {}) as { addresses?: string[]; autoAssign?: boolean; avoidBuggyIPs?: boolean; serviceAllocation?: { priority?: number; namespaces?: string[]; namespaceSelectors?: LabelSelector[]; serviceSelectors?: LabelSelector[] } };
  const out: PoolSpec = {
    blocks: (spec.addresses ?? []).map(metallbBlock),
    // MetalLB hands out .0 and .255 unless avoidBuggyIPs: keep what it did.
    allowFirstLastIPs: !spec.avoidBuggyIPs,
  };
  if (spec.autoAssign === false) out.autoAssign = false;
  const alloc = spec.serviceAllocation;
  if (alloc) {
    const exprs: LabelSelectorRequirement[] = [];
    let labels: Record<string, string> | undefined;
    const namespaces = alloc.namespaces ?? [];
    const nsSelectors = alloc.namespaceSelectors ?? [];
    // MetalLB takes a Service whose namespace is listed *or* matches a namespaceSelector:
    // with both, the list becomes one more of ferry's namespaceSelectors (any of them), by
    // the name label every namespace has; alone, it is the Service's namespace pseudo-label.
    if (namespaces.length && nsSelectors.length) out.namespaceSelectors = [...nsSelectors, { matchExpressions: [{ key: LABEL_NAMESPACE_NAME, operator: 'In', values: [...namespaces] }] }];
    else if (nsSelectors.length > 1) out.namespaceSelectors = [...nsSelectors];
    else if (nsSelectors[0]?.matchLabels || nsSelectors[0]?.matchExpressions) out.namespaceSelector = nsSelectors[0];
    if (namespaces.length && !nsSelectors.length) exprs.push({ key: LABEL_SERVICE_NAMESPACE, operator: 'In', values: [...namespaces] });
    // Several serviceSelectors (any of them) are ferry's serviceSelectors; one joins the
    // namespaces' expression in the serviceSelector (both must match).
    const selectors = alloc.serviceSelectors ?? [];
    if (selectors.length > 1) out.serviceSelectors = [...selectors];
    else if (selectors[0]) {
      labels = selectors[0].matchLabels;
      exprs.push(...(selectors[0].matchExpressions ?? []));
    }
    // MetalLB's 0 is its "none" (after every pool with a priority), as it is ferry's.
    const priority: unknown = alloc.priority;
    if (isPriority(priority) && priority > 0) out.priority = priority;
    else if (priority !== undefined && priority !== 0) warn(`IPAddressPool ${name}: priority ${JSON.stringify(priority)} is not an integer from 0 to ${MAX_PRIORITY}; not kept`);
    if (labels || exprs.length) out.serviceSelector = { ...(labels ? { matchLabels: labels } : {}), ...(exprs.length ? { matchExpressions: exprs } : {}) };
  }
  return poolDoc(name, out, `metallb.io IPAddressPool ${name}`);
}

function fromCilium(d: Doc, warn: (m: string) => void): Doc {
  const name = String((d.metadata as Meta)?.name ?? '');
  const spec = (isObj(d.spec) ? d.spec : {}) as { blocks?: PoolBlock[]; cidrs?: PoolBlock[]; allowFirstLastIPs?: string; disabled?: boolean; serviceSelector?: LabelSelector };
  // Cilium hands out a CIDR's first and last addresses unless allowFirstLastIPs is "No";
  // with "No" it keeps back exactly those two (not every .0 and .255): say so as a range.
  const reserveEnds = spec.allowFirstLastIPs === 'No';
  const blocks = (spec.blocks ?? spec.cidrs ?? []).map((b): PoolBlock => {
    if (b.cidr === undefined) return { start: b.start, stop: b.stop ?? b.start };
    const p = parseCidr4(b.cidr);
    if (!reserveEnds || 'error' in p || p.range[1] - p.range[0] < 2) return { cidr: b.cidr };
    if (!isIPv4(b.cidr.split('/')[0] ?? '')) return { cidr: b.cidr };
    return { start: intToIp(p.range[0] + 1), stop: intToIp(p.range[1] - 1) };
  });
  if (reserveEnds && blocks.some((b) => b.cidr && !isIPv4(b.cidr.split('/')[0] ?? ''))) warn(`CiliumLoadBalancerIPPool ${name}: allowFirstLastIPs "No" on an IPv6 block is not kept (IPv6 blocks give no address yet)`);
  const out: PoolSpec = { blocks, allowFirstLastIPs: true };
  if (spec.disabled) out.disabled = true;
  const sel = rename(spec.serviceSelector, CILIUM_LABELS);
  if (sel && (sel.matchLabels || sel.matchExpressions)) out.serviceSelector = sel;
  return poolDoc(name, out, `cilium.io CiliumLoadBalancerIPPool ${name}`);
}

/** A Service with ferry's annotations beside the foreign ones; undefined when nothing changes. */
function fromService(d: Doc, warn: (m: string) => void): Doc | undefined {
  const meta = (isObj(d.metadata) ? d.metadata : {}) as Meta;
  const key = `${meta.namespace ?? 'default'}/${meta.name ?? ''}`;
  const annotations = { ...(meta.annotations ?? {}) };
  let changed = false;
  for (const [foreign, ours] of Object.entries(ANNOTATION_MAP)) {
    const v = annotations[foreign];
    if (v === undefined) continue;
    if (annotations[ours] !== undefined && annotations[ours] !== v) {
      warn(`Service ${key}: ${foreign}=${v} differs from ${ours}=${annotations[ours]}; kept ferry's`);
      continue;
    }
    if (annotations[ours] === undefined) {
      annotations[ours] = v;
      changed = true;
    }
  }
  if (annotations['lbipam.cilium.io/sharing-cross-namespace'] !== undefined) warn(`Service ${key}: lbipam.cilium.io/sharing-cross-namespace is not supported; ferry shares an address within one namespace only`);
  const cls = (d.spec as { loadBalancerClass?: string } | undefined)?.loadBalancerClass;
  if (cls && cls !== 'ferry.dev/lb') warn(`Service ${key}: loadBalancerClass ${cls} is immutable and not ferry's; ferry will leave this Service alone (recreate it without a class, or with ferry.dev/lb)`);
  if (!changed) return undefined;
  delete annotations[LAST_APPLIED];
  const cleanMeta: Meta = { ...meta, annotations };
  for (const f of SERVER_FIELDS) delete cleanMeta[f];
  const { status: _status, ...rest } = d;
  return { ...rest, metadata: cleanMeta };
}

export function migrate(input: unknown[], announcements?: AnnouncementMigrator): Migration {
  const warnings: string[] = [];
  const warn = (m: string) => warnings.push(m);
  const docs: Doc[] = [];
  const announcing: Doc[] = [];
  for (const d of flatten(input)) {
    const kind = String(d.kind ?? '');
    const group = String(d.apiVersion ?? '').split('/')[0];
    if (kind === 'IPAddressPool' && group === 'metallb.io') docs.push(fromMetalLB(d, warn));
    else if (kind === 'CiliumLoadBalancerIPPool' && group === 'cilium.io') docs.push(fromCilium(d, warn));
    else if (kind === 'Service' && d.apiVersion === 'v1') {
      const s = fromService(d, warn);
      if (s) docs.push(s);
    } else if (announcements?.kinds.has(`${group}/${kind}`)) announcing.push(d);
    else if (ANNOUNCEMENT_KINDS.has(`${group}/${kind}`)) {
      warn(`${kind} ${String((d.metadata as Meta)?.name ?? '')}: not migrated; write ferry's own (L2AnnouncementPolicy, or BGPPeer and BGPAdvertisement of ferry.dev: README "L2 announcements" and "BGP")`);
    } else warn(`${kind || 'an object without a kind'} ${String((d.metadata as Meta)?.name ?? '')}: not something ferry migrates; skipped`);
  }
  if (announcements && announcing.length) docs.push(...announcements.migrate(announcing, warn));
  return { docs, warnings };
}
