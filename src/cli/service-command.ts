// `ferry service list`: the frontends the datapath holds, decoded from the pinned maps
// (works without the agent running).
import { join } from 'node:path';
import { Command } from 'commander';
import { BackendFlags, LbFlags, LbScope, lb4BackendCodec, lb4FrontendNameCodec, lb4KeyCodec, lb4ServiceCodec, protoName, type Lb4Backend, type Lb4Key, type Lb4Service } from '../datapath/layouts.js';
import { openPinnedMap } from '../ebpf/pinned.js';
import { u32Codec } from '../ebpf/codec.js';
import { table } from './table.js';

export interface FrontendRow {
  id: number; // reverse-NAT id
  service: string; // namespace/name:port, as the agent published it
  frontend: string;
  type: string;
  flags: string[];
  backends: Array<{ id: number; address: string; state: string; local: boolean }>;
}

function kind(flags: number): string {
  if (flags & LbFlags.LB_F_NODE_PORT) return 'NodePort';
  if (flags & LbFlags.LB_F_LOAD_BALANCER) return 'LoadBalancer';
  if (flags & LbFlags.LB_F_EXTERNAL_IP) return 'ExternalIP';
  if (flags & LbFlags.LB_F_CLUSTER_IP) return 'ClusterIP';
  return '?';
}

export function readFrontends(pinDir: string): FrontendRow[] {
  const services = openPinnedMap(join(pinDir, 'lb4_services'), lb4KeyCodec, lb4ServiceCodec);
  const backends = openPinnedMap(join(pinDir, 'lb4_backends'), u32Codec, lb4BackendCodec);
  const namesMap = openPinnedMap(join(pinDir, 'lb4_names'), u32Codec, lb4FrontendNameCodec);
  try {
    const names = new Map(namesMap.entries().map(([id, v]) => [id, v.name.toString('utf8').replace(/\0.*$/s, '')]));
    const all = services.entries();
    const bmap = new Map<number, Lb4Backend>(backends.entries());
    const slots = new Map<string, Map<number, number>>();
    const keyOf = (k: Lb4Key) => `${k.address}|${k.port}|${k.proto}|${k.scope}`;
    for (const [k, v] of all) if (k.slot > 0) (slots.get(keyOf(k)) ?? slots.set(keyOf(k), new Map()).get(keyOf(k))!).set(k.slot, v.backendId);
    const rows: FrontendRow[] = [];
    for (const [k, v] of all as Array<[Lb4Key, Lb4Service]>) {
      if (k.slot !== 0 || v.flags & LbFlags.LB_F_WILDCARD) continue;
      const s = slots.get(keyOf(k)) ?? new Map<number, number>();
      const flags: string[] = [];
      if (k.scope === LbScope.LB_SCOPE_INTERNAL) flags.push('internal');
      if (v.affinityTimeout) flags.push(`affinity=${v.affinityTimeout}s`);
      if (v.flags & LbFlags.LB_F_NODE_PORT_ANY) flags.push('any-address');
      if (v.flags & LbFlags.LB_F_DROP_WHEN_EMPTY) flags.push('local-policy');
      if (v.flags & LbFlags.LB_F_SOURCE_RANGES) flags.push('source-ranges');
      if (v.flags & LbFlags.LB_F_FWD_DSR) flags.push('dsr');
      if (v.flags & LbFlags.LB_F_FWD_SNAT) flags.push('snat');
      if (v.backendId) flags.push(`maglev=${v.backendId}`);
      rows.push({
        id: v.revNatId,
        service: names.get(v.revNatId) ?? '-',
        frontend: `${k.address}:${k.port}/${protoName(k.proto)}`,
        type: kind(v.flags),
        flags,
        backends: Array.from({ length: v.count }, (_, i) => {
          const id = s.get(i + 1) ?? 0;
          const b = bmap.get(id);
          return { id, address: b ? `${b.address}:${b.port}` : '(missing)', state: b && b.flags & BackendFlags.LB_BACKEND_F_TERMINATING ? 'terminating' : 'active', local: Boolean(b && b.flags & BackendFlags.LB_BACKEND_F_LOCAL) };
        }),
      });
    }
    return rows.sort((a, b) => a.id - b.id);
  } finally {
    services.close();
    backends.close();
    namesMap.close();
  }
}

export function registerService(program: Command): void {
  const svc = program.command('service').description('Services as the datapath holds them');
  svc.command('list')
    .description('one row per frontend, with its backends')
    .option('--pin-dir <dir>', 'the agent\'s pin directory', '/sys/fs/bpf/ferry')
    .option('-o, --output <format>', 'table or json', 'table')
    .action((o: { pinDir: string; output: string }) => {
      const rows = readFrontends(o.pinDir);
      if (o.output === 'json') {
        process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
        return;
      }
      process.stdout.write(table(
        ['ID', 'SERVICE', 'FRONTEND', 'TYPE', 'FLAGS', 'BACKENDS'],
        rows.map((r) => [r.id, r.service, r.frontend, r.type, r.flags.join(',') || '-', r.backends.map((b) => `${b.id} ${b.address} (${b.state}${b.local ? ', local' : ''})`).join('\n') || (r.flags.includes('local-policy') ? '(none: dropped)' : '(none: rejected)')]),
      ));
    });
}
