// Whether this node's routes may depend on a flow's protocol, ports or TOS: policy rules that
// select by them (`ip rule ... ipproto/sport/dport/tos`), or multipath routes hashed by ports
// (net.ipv4.fib_multipath_hash_policy 1, or 3 with ports among fib_multipath_hash_fields),
// in either family (IPv6's forwarded packets keep hops too: bpf/lib/fib6.h).
// Then the datapath must not give a new flow the hop another flow to the same backend
// found: each is looked up with its own protocol and ports, as the kernel would route it.
import { readFile } from 'node:fs/promises';
import { exec } from './exec.js';

export interface RoutingPolicy {
  perFlow: boolean;
  /** Why routes are per flow (the first reason found), or why not. */
  why: string;
}

/** Rule selectors a shared hop (keyed by addresses and the input device) cannot honour. */
const FLOW_SELECTOR = /\b(ipproto|sport|dport|tos|dsfield)\b/;
/** fib_multipath_hash_fields: outer source port (0x10) and destination port (0x20). */
const HASH_FIELD_PORTS = 0x30;
/** The kernel's default fields (source, destination, protocol). */
const DEFAULT_HASH_FIELDS = 0x07;

/** Judge one family's `ip rule show` output and its two multipath sysctls. */
export function judgeRoutingPolicy(rules: string, hashPolicy: number, hashFields = DEFAULT_HASH_FIELDS): RoutingPolicy {
  const rule = rules.split('\n').find((l) => FLOW_SELECTOR.test(l));
  if (rule) return { perFlow: true, why: `policy rule selects by protocol, port or TOS: ${rule.trim().replace(/\s+/g, ' ')}` };
  if (hashPolicy === 1) return { perFlow: true, why: 'multipath routes are hashed by ports (fib_multipath_hash_policy 1)' };
  if (hashPolicy === 3 && (hashFields & HASH_FIELD_PORTS) !== 0) {
    return { perFlow: true, why: `multipath routes are hashed by ports (fib_multipath_hash_policy 3, fields 0x${hashFields.toString(16)})` };
  }
  return { perFlow: false, why: 'routes depend on addresses only (no rule by protocol or port, multipath hashed without ports)' };
}

async function sysctl(name: string, netns: string | undefined, family: '4' | '6' = '4'): Promise<number | undefined> {
  const path = `/proc/sys/net/ipv${family}/${name}`;
  const text = netns ? (await exec('ip', ['netns', 'exec', netns, 'cat', path], { timeoutMs: 10_000 })).stdout : await readFile(path, 'utf8').catch(() => '');
  const n = Number.parseInt(text.trim(), 0);
  return Number.isFinite(n) ? n : undefined;
}

/** One family's rules and multipath hashing. */
async function readFamily(family: '4' | '6', netns: string | undefined): Promise<RoutingPolicy> {
  const rules = await exec('ip', [...(netns ? ['-n', netns] : []), `-${family}`, 'rule', 'show'], { timeoutMs: 10_000 });
  if (rules.code !== 0) throw new Error(`ip -${family} rule show: exit ${rules.code}: ${rules.stderr.trim()}`);
  return judgeRoutingPolicy(rules.stdout, (await sysctl('fib_multipath_hash_policy', netns, family)) ?? 0, await sysctl('fib_multipath_hash_fields', netns, family));
}

/** Read this node's rules and multipath hashing, IPv4's then IPv6's (in `netns`, or the
 * agent's own namespace). A node without IPv6 has IPv4's alone. */
export async function readRoutingPolicy(netns?: string): Promise<RoutingPolicy> {
  const v4 = await readFamily('4', netns);
  if (v4.perFlow) return v4;
  const v6 = await readFamily('6', netns).catch(() => undefined);
  return v6?.perFlow ? { perFlow: true, why: `IPv6: ${v6.why}` } : v4;
}
