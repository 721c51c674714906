// Service-count scaling against kube-proxy-shaped rules: connect latency from an external
// client to a NodePort whose backend is on the node, with N Services loaded as ferry maps,
// as kube-proxy's iptables rules (iptables-restore) and as kube-proxy's nftables rules
// (nft -f), plus the time each needs to load them. The rule structure is stated in
// bench/README.md; the generators are below.
// Run as root: npx tsx bench/rules-scaling.ts [--services 1,1000,10000] [--count 1000] [--repeat 3]
import { parseArgs } from 'node:util';
import { MiniCluster, WORKLOADS, type TestService } from '../test/harness/mini-cluster.js';
import { machine as machineName, median, writeResult } from './report.js';

const { values } = parseArgs({ options: { services: { type: 'string' }, count: { type: 'string' }, repeat: { type: 'string' } } });
const COUNTS = (values.services ?? '1,1000,10000').split(',').map(Number);
const COUNT = Number(values.count ?? 1000);
const REPEAT = Number(values.repeat ?? 3);

const NODE_PORT = 30080; // the first cell's; each cell uses the next one
const NODE_IP = '10.0.30.21';

/** The filler Services' ClusterIPs (ClusterIP-only, one port), then the measured one last. */
const clusterIP = (i: number) => `10.97.${i >> 8}.${i & 255}`;

/**
 * kube-proxy's iptables mode (nat table): PREROUTING/OUTPUT → KUBE-SERVICES, one rule per
 * Service port matching ClusterIP:port → KUBE-SVC-*, then the KUBE-NODEPORTS jump for local
 * destinations at the end; KUBE-EXT-* marks for masquerade; KUBE-SEP-* DNATs.
 */
function iptablesRules(fillers: number, podIP: string, nodePort: number): string {
  const out = ['*nat', ':KUBE-SERVICES - [0:0]', ':KUBE-NODEPORTS - [0:0]', ':KUBE-POSTROUTING - [0:0]', ':KUBE-MARK-MASQ - [0:0]'];
  const rules: string[] = [];
  const service = (id: string, ip: string, nodePort?: number) => {
    out.push(`:KUBE-SVC-${id} - [0:0]`, `:KUBE-SEP-${id} - [0:0]`);
    rules.push(`-A KUBE-SERVICES -d ${ip}/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-${id}`);
    rules.push(`-A KUBE-SVC-${id} -j KUBE-SEP-${id}`);
    rules.push(`-A KUBE-SEP-${id} -s ${podIP}/32 -j KUBE-MARK-MASQ`);
    rules.push(`-A KUBE-SEP-${id} -p tcp -m tcp -j DNAT --to-destination ${podIP}:8080`);
    if (nodePort) {
      out.push(`:KUBE-EXT-${id} - [0:0]`);
      rules.push(`-A KUBE-NODEPORTS -p tcp -m tcp --dport ${nodePort} -j KUBE-EXT-${id}`);
      rules.push(`-A KUBE-EXT-${id} -j KUBE-MARK-MASQ`, `-A KUBE-EXT-${id} -j KUBE-SVC-${id}`);
    }
  };
  for (let i = 0; i < fillers; i++) service(`F${i}`, clusterIP(i));
  service('TARGET', '10.96.0.10', nodePort);
  out.push(
    ...rules,
    '-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS',
    '-A PREROUTING -j KUBE-SERVICES',
    '-A OUTPUT -j KUBE-SERVICES',
    '-A POSTROUTING -j KUBE-POSTROUTING',
    '-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000',
    '-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN',
    '-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000',
    '-A KUBE-POSTROUTING -j MASQUERADE --random-fully',
    'COMMIT',
    '',
  );
  return out.join('\n');
}

/**
 * kube-proxy's nftables mode (table ip kube-proxy): one verdict map keyed by
 * address . protocol . port for ClusterIPs and one keyed by protocol . port for NodePorts,
 * a chain per Service, per external entry and per endpoint.
 */
function nftRules(fillers: number, podIP: string, nodePort: number): string {
  const chain = (name: string, ...rules: string[]) => [`  chain ${name} {`, ...rules.map((r) => `    ${r}`), '  }'];
  const chains: string[] = [];
  const serviceIPs: string[] = [];
  const nodePorts: string[] = [];
  const service = (id: string, ip: string, nodePort?: number) => {
    chains.push(...chain(`endpoint-${id}`, `ip saddr ${podIP} jump mark-for-masquerade`, `meta l4proto tcp dnat to ${podIP}:8080`));
    chains.push(...chain(`service-${id}`, `numgen random mod 1 vmap { 0 : goto endpoint-${id} }`));
    serviceIPs.push(`${ip} . tcp . 80 : goto service-${id}`);
    if (nodePort) {
      chains.push(...chain(`external-${id}`, 'jump mark-for-masquerade', `goto service-${id}`));
      nodePorts.push(`tcp . ${nodePort} : goto external-${id}`);
    }
  };
  for (let i = 0; i < fillers; i++) service(`f${i}`, clusterIP(i));
  service('target', '10.96.0.10', nodePort);
  const map = (name: string, type: string, elements: string[]) => [`  map ${name} {`, `    type ${type}`, `    elements = { ${elements.join(',\n      ')} }`, '  }'];
  return [
    'table ip kube-proxy {',
    ...chain('mark-for-masquerade', 'meta mark set meta mark or 0x4000'),
    ...chain('masquerading', 'meta mark & 0x4000 == 0 return', 'meta mark set meta mark xor 0x4000', 'masquerade fully-random'),
    ...chains,
    ...map('service-ips', 'ipv4_addr . inet_proto . inet_service : verdict', serviceIPs),
    ...map('service-nodeports', 'inet_proto . inet_service : verdict', nodePorts),
    ...chain('services', 'ip daddr . meta l4proto . th dport vmap @service-ips', 'fib daddr type local meta l4proto . th dport vmap @service-nodeports'),
    ...chain('nat-prerouting', 'type nat hook prerouting priority dstnat; policy accept;', 'jump services'),
    ...chain('nat-output', 'type nat hook output priority -100; policy accept;', 'jump services'),
    ...chain('nat-postrouting', 'type nat hook postrouting priority srcnat; policy accept;', 'jump masquerading'),
    '}',
    '',
  ].join('\n');
}

interface Sample { p50: number; p90: number; p99: number; failures: number }
interface Row { dataplane: string; services: number; loadMs: number; p50: number; p90: number; p99: number; failures: number }

async function main(): Promise<void> {
  const c = await MiniCluster.create({ nodes: 1 });
  try {
    const web = await c.pod('web-1', 1, { whoami: 8080 });
    const node = c.nodes[0]!;
    // Every cell gets its own NodePort: thousands of connects to one address:port leave as
    // many TIME_WAIT sockets, and once they fill the port range the port search (not the
    // dataplane) would set the latency.
    let nodePort = NODE_PORT;
    const connect = async (to: string): Promise<Sample> => {
      const runs: Sample[] = [];
      for (let r = 0; r < REPEAT; r++) {
        runs.push(JSON.parse(await c.client.execOk([process.execPath, WORKLOADS, 'connect-latency', '--to', to, '--count', String(COUNT)], { timeoutMs: 300_000 })) as Sample);
        process.stderr.write('.');
      }
      return { p50: median(runs.map((s) => s.p50)), p90: median(runs.map((s) => s.p90)), p99: median(runs.map((s) => s.p99)), failures: runs.reduce((a, s) => a + s.failures, 0) };
    };
    const timed = async (load: () => Promise<unknown> | void): Promise<number> => {
      const t0 = process.hrtime.bigint();
      await load();
      return Number(process.hrtime.bigint() - t0) / 1e6;
    };
    const target = (port: number): TestService => ({ clusterIP: '10.96.0.10', ports: [{ port: 80, proto: 'TCP', targetPort: 8080, nodePort: port }], endpoints: [web] });
    const fillerServices = (n: number): TestService[] =>
      Array.from({ length: n }, (_, i) => ({ clusterIP: clusterIP(i), ports: [{ port: 80, proto: 'TCP' as const, targetPort: 8080 }], endpoints: [web] }));

    const rows: Row[] = [];
    const direct = await connect(`${web.ip}:8080`);
    rows.push({ dataplane: 'direct to pod', services: 0, loadMs: 0, ...direct });
    for (const n of COUNTS) {
      process.stderr.write(`\n${n} Services: ferry `);
      nodePort++;
      const ferryMs = await timed(() => c.apply([...fillerServices(n - 1), target(nodePort)]));
      rows.push({ dataplane: 'ferry', services: n, loadMs: ferryMs, ...(await connect(`${NODE_IP}:${nodePort}`)) });
      c.apply([]); // ferry passes what it does not know to the host's stack

      process.stderr.write(' iptables ');
      nodePort++;
      const iptMs = await timed(() => node.host.execOk(['iptables-restore'], { input: iptablesRules(n - 1, web.ip, nodePort), timeoutMs: 600_000 }));
      rows.push({ dataplane: 'iptables (kube-proxy rules)', services: n, loadMs: iptMs, ...(await connect(`${NODE_IP}:${nodePort}`)) });
      await node.host.execOk(['nft', 'flush', 'ruleset']);

      process.stderr.write(' nftables ');
      nodePort++;
      const nftMs = await timed(() => node.host.execOk(['nft', '-f', '-'], { input: nftRules(n - 1, web.ip, nodePort), timeoutMs: 600_000 }));
      rows.push({ dataplane: 'nftables (kube-proxy rules)', services: n, loadMs: nftMs, ...(await connect(`${NODE_IP}:${nodePort}`)) });
      await node.host.execOk(['nft', 'flush', 'ruleset']);
    }
    process.stderr.write('\n');

    const f = (x: number) => x.toFixed(1);
    const ferryAt = (n: number) => rows.find((r) => r.dataplane === 'ferry' && r.services === n)!;
    const table = [
      '| dataplane | Services | load ms | p50 µs | p90 µs | p99 µs | p50 / direct | p50 / ferry | failed |',
      '|---|---|---|---|---|---|---|---|---|',
      ...rows.map((r) => `| ${r.dataplane} | ${r.services} | ${r.loadMs.toFixed(0)} | ${f(r.p50)} | ${f(r.p90)} | ${f(r.p99)} | ${(r.p50 / direct.p50).toFixed(2)} | ${r.services ? (r.p50 / ferryAt(r.services).p50).toFixed(2) : '-'} | ${r.failures} |`),
    ].join('\n');
    const machine = machineName();
    process.stdout.write(`${table}\n\nmachine: ${machine}; client → NodePort on the backend's node; ${COUNT} connects × ${REPEAT} runs per cell, median of runs\ncommand: npx tsx bench/rules-scaling.ts --services ${COUNTS.join(',')} --count ${COUNT} --repeat ${REPEAT}\n`);
    writeResult('rules-scaling', { machine, count: COUNT, repeat: REPEAT, rows });
  } finally {
    await c.close();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
