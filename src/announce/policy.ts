// L2AnnouncementPolicy objects (ferry.dev/v1alpha1, cluster-scoped), read defensively: the
// CRD's schema makes a real API server reject most mistakes, but nothing here trusts a
// field's type. A policy with an error announces nothing and says why (in the agent's log).
import { selectorError, selectorMatches, type LabelSelector } from '../ipam/selector.js';

export const L2_POLICY_PATH = '/apis/ferry.dev/v1alpha1/l2announcementpolicies';
const MAX_INTERFACE_PATTERNS = 32;
const MAX_PATTERN = 128;

export interface L2PolicyObject {
  metadata?: { name?: string };
  spec?: Record<string, unknown>;
}

export interface L2Policy {
  name: string;
  serviceSelector: LabelSelector | undefined;
  nodeSelector: LabelSelector | undefined;
  /** Each matched against the whole interface name; none: every device. */
  interfaces: RegExp[];
  loadBalancerIPs: boolean;
  externalIPs: boolean;
  errors: string[];
}

export function parseL2Policy(o: L2PolicyObject): L2Policy {
  const spec = typeof o.spec === 'object' && o.spec !== null ? o.spec : {};
  const errors: string[] = [];
  const selector = (key: 'serviceSelector' | 'nodeSelector'): LabelSelector | undefined => {
    const v = spec[key] as LabelSelector | undefined;
    const err = selectorError(v);
    if (err) errors.push(`${key}: ${err}`);
    return v ?? undefined;
  };
  const interfaces: RegExp[] = [];
  const raw = spec.interfaces ?? [];
  if (!Array.isArray(raw) || raw.length > MAX_INTERFACE_PATTERNS) errors.push(`interfaces: a list of at most ${MAX_INTERFACE_PATTERNS} patterns`);
  else {
    for (const p of raw) {
      if (typeof p !== 'string' || p.length > MAX_PATTERN) {
        errors.push(`interfaces: ${JSON.stringify(p).slice(0, 40)} is not a pattern of at most ${MAX_PATTERN} characters`);
        continue;
      }
      try {
        interfaces.push(new RegExp(`^(?:${p})$`));
      } catch (e) {
        errors.push(`interfaces: ${JSON.stringify(p)}: ${(e as Error).message}`);
      }
    }
  }
  const flag = (key: string, dflt: boolean) => (typeof spec[key] === 'boolean' ? (spec[key] as boolean) : dflt);
  return {
    name: o.metadata?.name ?? '',
    serviceSelector: selector('serviceSelector'),
    nodeSelector: selector('nodeSelector'),
    interfaces,
    loadBalancerIPs: flag('loadBalancerIPs', true),
    externalIPs: flag('externalIPs', false),
    errors,
  };
}

/** The node's devices a policy announces on (none: it does not select the node). */
export function policyDevices(p: L2Policy, nodeLabels: Readonly<Record<string, string>>, devices: readonly string[]): string[] {
  if (p.errors.length || !selectorMatches(p.nodeSelector, nodeLabels)) return [];
  return p.interfaces.length === 0 ? [...devices] : devices.filter((d) => p.interfaces.some((re) => re.test(d)));
}

/**
 * Why a valid policy that selects the node announces nothing on it: its interface patterns
 * match none of the node's devices (undefined: it announces, or it does not select the node).
 */
export function policyMissesDevices(p: L2Policy, o: L2PolicyObject, nodeLabels: Readonly<Record<string, string>>, devices: readonly string[]): string | undefined {
  if (p.errors.length || p.interfaces.length === 0 || devices.length === 0 || !selectorMatches(p.nodeSelector, nodeLabels) || policyDevices(p, nodeLabels, devices).length) return undefined;
  return `none of this node's devices (${devices.join(', ')}) matches interfaces ${JSON.stringify(o.spec?.interfaces)}: it announces nothing here`;
}

export const policySelectsService = (p: L2Policy, serviceLabels: Readonly<Record<string, string>>) => p.errors.length === 0 && selectorMatches(p.serviceSelector, serviceLabels);
