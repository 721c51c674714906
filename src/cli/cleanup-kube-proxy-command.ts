// `ferry cleanup-kube-proxy`: after kube-proxy's DaemonSet is deleted, take its rules off
// this node (iptables and nftables, IPv4 and IPv6, legacy and nf_tables backends), as
// `kube-proxy --cleanup` would. Without --yes, only what it would remove.
import { Command } from 'commander';
import { findLeftovers, removeLeftovers, type Leftovers } from '../sys/kube-proxy-leftovers.js';

function describe(l: Leftovers): string[] {
  const lines: string[] = [];
  for (const { variant, tables } of l.iptables) {
    for (const t of tables) lines.push(`${variant.name} ${t.table}: ${t.chains.length} chains (${t.chains.filter((c) => !/^KUBE-(SVC|SVL|EXT|FW|SEP|XLB)-/.test(c)).join(', ') || 'per-Service only'}), ${t.jumps.length} jumps to them`);
  }
  for (const t of l.nftTables) lines.push(`nftables: table ${t}`);
  if (l.ipvsDevice) lines.push('device kube-ipvs0 (IPVS mode; its virtual servers are not removed: ipvsadm --clear)');
  return lines;
}

export function registerCleanupKubeProxy(program: Command): void {
  program.command('cleanup-kube-proxy')
    .description('remove kube-proxy\'s iptables chains and nftables tables from this node once kube-proxy is gone (without --yes: what it would remove)')
    .option('--yes', 'really remove them')
    .option('-o, --output <format>', 'text or json', 'text')
    .action(async (o: { yes?: boolean; output: string }) => {
      const found = await findLeftovers();
      const what = describe(found);
      if (o.output === 'json') process.stdout.write(`${JSON.stringify({ found: what, removed: Boolean(o.yes) && what.length > 0, missingTools: found.missing }, null, 2)}\n`);
      if (what.length === 0) {
        if (o.output !== 'json') process.stdout.write('no kube-proxy rules on this node\n');
        return;
      }
      if (!o.yes) {
        if (o.output !== 'json') process.stdout.write(`would remove:\n${what.map((l) => `  ${l}`).join('\n')}\ndelete kube-proxy's DaemonSet first (it would write them again), then add --yes\n`);
        return;
      }
      await removeLeftovers(found);
      const left = describe(await findLeftovers());
      if (o.output !== 'json') process.stdout.write(`removed:\n${what.map((l) => `  ${l}`).join('\n')}\n`);
      if (left.length) throw new Error(`cleanup-kube-proxy: back already (is kube-proxy still running?): ${left.join('; ')}`);
    });
}
