// `ferry bgp peers`, `ferry bgp routes`: BGP on this node, from the FRR beside the agent
// (vtysh; --pathspace for one of several instances, as in the sandbox).
import { Command } from 'commander';
import { Vtysh } from '../sys/vtysh.js';
import { table } from './table.js';

interface Summary {
  ipv4Unicast?: { routerId?: string; as?: number; peers?: Record<string, { remoteAs?: number; state?: string; peerUptime?: string; pfxRcd?: number; pfxSnt?: number; desc?: string }> };
}
interface Bfd {
  peer?: string;
  status?: string;
  uptime?: number;
  'detect-multiplier'?: number;
  'receive-interval'?: number;
  'transmit-interval'?: number;
}
interface Routes {
  routes?: Record<string, Array<{ valid?: boolean; bestpath?: boolean; nexthops?: Array<{ ip?: string }>; path?: string; locPrf?: number }>>;
}

function vtyshFrom(o: { pathspace?: string; vtysh: string }): Vtysh {
  return new Vtysh({ path: o.vtysh, pathspace: o.pathspace ?? '' });
}

export function registerBgp(program: Command): void {
  const bgp = program.command('bgp').description('BGP on this node, from FRR: sessions and announced routes');
  const common = (c: Command) => c.option('--pathspace <name>', 'FRR pathspace (vtysh -N), for one of several FRR instances').option('--vtysh <path>', 'vtysh', '/usr/bin/vtysh').option('-o, --output <format>', 'table or json', 'table');

  common(bgp.command('peers').description('BGP sessions (state, uptime, prefixes) and their BFD state')).action(async (o: { pathspace?: string; vtysh: string; output: string }) => {
    const v = vtyshFrom(o);
    const s = await v.showJson<Summary>('show bgp summary json');
    const bfd = await v.showJson<Bfd[]>('show bfd peers json').catch(() => [] as Bfd[]);
    const rows = Object.entries(s.ipv4Unicast?.peers ?? {}).map(([address, p]) => {
      const b = bfd.find((x) => x.peer === address);
      return { peer: address, asn: String(p.remoteAs ?? ''), state: p.state ?? '', uptime: p.peerUptime ?? '', received: String(p.pfxRcd ?? 0), sent: String(p.pfxSnt ?? 0), bfd: b ? `${b.status} (${b['transmit-interval']}/${b['receive-interval']} ms × ${b['detect-multiplier']})` : '-', description: p.desc ?? '' };
    });
    if (o.output === 'json') process.stdout.write(`${JSON.stringify({ routerId: s.ipv4Unicast?.routerId, asn: s.ipv4Unicast?.as, peers: rows }, null, 2)}\n`);
    else process.stdout.write(rows.length ? table(Object.keys(rows[0]!).map((k) => k.toUpperCase()), rows.map((r) => Object.values(r))) : '(no BGP sessions)\n');
  });

  common(bgp.command('routes').description('the routes in FRR\'s BGP table: what this node announces (and, on a router, learns)')).action(async (o: { pathspace?: string; vtysh: string; output: string }) => {
    const r = await vtyshFrom(o).showJson<Routes>('show ip bgp json');
    const rows = Object.entries(r.routes ?? {}).flatMap(([prefix, paths]) => paths.map((p) => ({ prefix, best: p.bestpath ? '*' : '', nexthop: (p.nexthops ?? []).map((n) => n.ip).join(',') || '0.0.0.0', path: p.path || '(local)', 'local-pref': p.locPrf === undefined ? '' : String(p.locPrf) })));
    if (o.output === 'json') process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
    else process.stdout.write(rows.length ? table(Object.keys(rows[0]!).map((k) => k.toUpperCase()), rows.map((x) => Object.values(x))) : '(no BGP routes)\n');
  });
}
