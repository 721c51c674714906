// What kube-proxy leaves on a node once its DaemonSet is gone (`ferry cleanup-kube-proxy`),
// as `kube-proxy --cleanup` would remove it: its iptables chains in every table, for IPv4
// and IPv6 and for both iptables backends (legacy and nf_tables; a node may hold either),
// with the rules in other chains that jump to them; its nftables tables (`ip kube-proxy`,
// `ip6 kube-proxy`); IPVS mode's kube-ipvs0 device. kubelet's chains (KUBE-FIREWALL,
// KUBE-KUBELET-CANARY, KUBE-MARK-DROP) and everything else stay.
import { exec, execOk } from './exec.js';

/** Chains kube-proxy creates (iptables and ipvs modes), by name. */
const KUBE_PROXY_CHAINS = new Set([
  'KUBE-SERVICES', 'KUBE-EXTERNAL-SERVICES', 'KUBE-NODEPORTS', 'KUBE-POSTROUTING', 'KUBE-MARK-MASQ',
  'KUBE-FORWARD', 'KUBE-PROXY-FIREWALL', 'KUBE-PROXY-CANARY',
  // ipvs mode
  'KUBE-LOAD-BALANCER', 'KUBE-NODE-PORT', 'KUBE-IPVS-FILTER', 'KUBE-IPVS-OUT-FILTER', 'KUBE-SOURCE-RANGES-FIREWALL',
]);
/** …and per Service, endpoint and external entry, by prefix. */
const KUBE_PROXY_PREFIXES = ['KUBE-SVC-', 'KUBE-SVL-', 'KUBE-EXT-', 'KUBE-FW-', 'KUBE-SEP-', 'KUBE-XLB-'];

export const isKubeProxyChain = (name: string) => KUBE_PROXY_CHAINS.has(name) || KUBE_PROXY_PREFIXES.some((p) => name.startsWith(p));

export interface TablePlan {
  table: string;
  /** Rules in chains that stay, which jump to a chain that goes (iptables-save form). */
  jumps: string[];
  chains: string[];
}

/**
 * From `iptables-save` output, the kube-proxy leftovers per table and the
 * `iptables-restore --noflush` input that removes them (each table in one commit).
 */
export function planIptablesCleanup(save: string): { tables: TablePlan[]; restore: string } {
  const tables: TablePlan[] = [];
  let current: TablePlan | undefined;
  const rules: Array<{ chain: string; text: string; target?: string }> = [];
  const flush = () => {
    if (current && current.chains.length > 0) {
      const gone = new Set(current.chains);
      current.jumps = rules.filter((r) => !gone.has(r.chain) && r.target && gone.has(r.target)).map((r) => r.text);
      tables.push(current);
    }
    rules.length = 0;
  };
  for (const line of save.split('\n')) {
    if (line.startsWith('*')) {
      flush();
      current = { table: line.slice(1).trim(), jumps: [], chains: [] };
    } else if (line.startsWith(':') && current) {
      const name = line.slice(1).split(' ')[0]!;
      if (isKubeProxyChain(name)) current.chains.push(name);
    } else if (line.startsWith('-A ') && current) {
      const chain = line.split(' ')[1]!;
      const target = / -[jg] (\S+)/.exec(line)?.[1];
      rules.push({ chain, text: line, ...(target ? { target } : {}) });
    } else if (line.trim() === 'COMMIT') {
      flush();
      current = undefined;
    }
  }
  const restore = tables.flatMap((t) => [
    `*${t.table}`,
    ...t.jumps.map((j) => `-D ${j.slice(3)}`),
    ...t.chains.map((c) => `-F ${c}`),
    ...t.chains.map((c) => `-X ${c}`),
    'COMMIT',
  ]);
  return { tables, restore: restore.length ? `${restore.join('\n')}\n` : '' };
}

/** One iptables variant on this node: a family and a backend. */
export interface IptablesVariant {
  name: string;
  save: string;
  restore: string;
}

export const IPTABLES_VARIANTS: IptablesVariant[] = [
  { name: 'iptables (nf_tables)', save: 'iptables-nft-save', restore: 'iptables-nft-restore' },
  { name: 'ip6tables (nf_tables)', save: 'ip6tables-nft-save', restore: 'ip6tables-nft-restore' },
  { name: 'iptables (legacy)', save: 'iptables-legacy-save', restore: 'iptables-legacy-restore' },
  { name: 'ip6tables (legacy)', save: 'ip6tables-legacy-save', restore: 'ip6tables-legacy-restore' },
];

export interface Leftovers {
  iptables: Array<{ variant: IptablesVariant; tables: TablePlan[]; restore: string }>;
  /** nftables tables, as `family name`. */
  nftTables: string[];
  /** IPVS mode's dummy device, if present. */
  ipvsDevice: boolean;
  /** Tools not on this node (their rules cannot be read, so are not removed). */
  missing: string[];
}

export async function findLeftovers(): Promise<Leftovers> {
  const out: Leftovers = { iptables: [], nftTables: [], ipvsDevice: false, missing: [] };
  for (const variant of IPTABLES_VARIANTS) {
    const r = await exec(variant.save, []);
    if (r.code === 127) {
      out.missing.push(variant.save);
      continue;
    }
    if (r.code !== 0) continue; // the family or backend is not there (no module, no table)
    const plan = planIptablesCleanup(r.stdout);
    if (plan.tables.length) out.iptables.push({ variant, ...plan });
  }
  const nft = await exec('nft', ['list', 'tables']);
  if (nft.code === 127) out.missing.push('nft');
  for (const line of nft.code === 0 ? nft.stdout.split('\n') : []) {
    const m = /^table (ip|ip6|inet) (kube-proxy)$/.exec(line.trim());
    if (m) out.nftTables.push(`${m[1]} ${m[2]}`);
  }
  out.ipvsDevice = (await exec('ip', ['link', 'show', 'dev', 'kube-ipvs0'])).code === 0;
  return out;
}

export async function removeLeftovers(l: Leftovers): Promise<void> {
  for (const { variant, restore } of l.iptables) await execOk(variant.restore, ['--noflush'], { input: restore });
  for (const t of l.nftTables) await execOk('nft', ['delete', 'table', ...t.split(' ')]);
  if (l.ipvsDevice) await execOk('ip', ['link', 'del', 'dev', 'kube-ipvs0']);
}
