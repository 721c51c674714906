// `ferry lb list`, `ferry lb pools`: LB-IPAM as the API server has it. `ferry migrate`:
// MetalLB and Cilium pools and annotations to ferry's. The deciding is ipam/'s; this file
// reads, formats and prints.
import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { CoordinationV1Api, CoreV1Api, CustomObjectsApi, DiscoveryV1Api, type V1Service } from '@kubernetes/client-node';
import { parseAllDocuments, stringify } from 'yaml';
import { ErrorCode, FerryError } from '../errors.js';
import { addressRows, poolRows, type AnnouncerClaim } from '../ipam/lb-view.js';
import { bgpAnnouncers, parseBgpAdvertisement, parseBgpPeer, type CustomObject } from '../announce/bgp.js';
import { HEARTBEAT_KIND, HEARTBEAT_LABEL, readHeartbeat } from '../announce/heartbeats.js';
import { migrate } from '../ipam/migrate.js';
import { announcementMigrator } from '../announce/migrate.js';
import { POOL_GROUP, POOL_PLURAL, POOL_VERSION, type PoolObject } from '../ipam/pool-resource.js';
import { kubeConfig } from '../k8s/kubeconfig-client.js';
import { table } from './table.js';

/** The nodes' heartbeat Leases (L2 announcements) in `namespace`: who claims which address. */
async function readClaims(kc: ReturnType<typeof kubeConfig>, namespace: string): Promise<AnnouncerClaim[]> {
  try {
    const leases = await kc.makeApiClient(CoordinationV1Api).listNamespacedLease({ namespace, labelSelector: `${HEARTBEAT_LABEL}=${HEARTBEAT_KIND}` });
    const now = Date.now();
    return leases.items.flatMap((l) => {
      const hb = readHeartbeat(l);
      return hb ? [{ node: hb.node, addresses: hb.claims, ageSeconds: hb.renewedAt ? (now - hb.renewedAt) / 1000 : Infinity, durationSeconds: hb.durationMs / 1000 }] : [];
    });
  } catch {
    return []; // no access to the Leases: the column stays empty
  }
}

/**
 * Address → the nodes the BGPPeers and BGPAdvertisements make announce it. Empty when the
 * BGP CRDs are not installed or not readable: the column then shows L2 only.
 */
async function readBgpAnnouncers(kc: ReturnType<typeof kubeConfig>, services: V1Service[]): Promise<Map<string, string[]>> {
  const custom = kc.makeApiClient(CustomObjectsApi);
  const list = (plural: string) => custom.listClusterCustomObject({ group: 'ferry.dev', version: 'v1alpha1', plural }) as Promise<{ items: CustomObject[] }>;
  try {
    const [peers, advertisements, nodes, slices] = await Promise.all([
      list('bgppeers'), list('bgpadvertisements'),
      kc.makeApiClient(CoreV1Api).listNode(), kc.makeApiClient(DiscoveryV1Api).listEndpointSliceForAllNamespaces(),
    ]);
    if (peers.items.length === 0) return new Map();
    return bgpAnnouncers({ nodes: nodes.items, services, slices: slices.items, peers: peers.items.map(parseBgpPeer), advertisements: advertisements.items.map(parseBgpAdvertisement) });
  } catch {
    return new Map();
  }
}

async function readCluster(kubeconfig: string | undefined) {
  const kc = kubeConfig(kubeconfig ?? '', 'default');
  const op = 'read LoadBalancer Services and pools';
  try {
    const [services, pools] = await Promise.all([
      kc.makeApiClient(CoreV1Api).listServiceForAllNamespaces(),
      kc.makeApiClient(CustomObjectsApi).listClusterCustomObject({ group: POOL_GROUP, version: POOL_VERSION, plural: POOL_PLURAL }) as Promise<{ items: PoolObject[] }>,
    ]);
    return { kc, services: services.items, pools: pools.items };
  } catch (e) {
    const code = (e as { code?: number }).code;
    throw new FerryError({ code: ErrorCode.Config, op, cause: (e as Error).message, hint: code === 404 ? 'is the LoadBalancerIPPool CRD installed? kubectl apply -f deploy/crds/' : 'check --kubeconfig and that the API server is reachable' });
  }
}

function print(format: string, rows: Array<Record<string, string>>, empty: string): void {
  if (format === 'json') process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
  else if (rows.length === 0) process.stdout.write(`${empty}\n`);
  else process.stdout.write(table(Object.keys(rows[0]!).map((c) => c.toUpperCase()), rows.map((r) => Object.values(r))));
}

export function registerLb(program: Command): void {
  const lb = program.command('lb').description('LoadBalancer addresses and pools (from the API server)');
  lb.command('list')
    .description('every LoadBalancer address: its pool, the Services sharing it, their ports, the nodes announcing it (L2: the heartbeat owner; BGP: the nodes the resources select; sessions: ferry bgp peers); then Services still waiting and why')
    .option('--kubeconfig <file>', 'kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)')
    .option('--namespace <ns>', 'the agents\' namespace (their heartbeat Leases)', 'kube-system')
    .option('-o, --output <format>', 'table or json', 'table')
    .action(async (o: { kubeconfig?: string; namespace: string; output: string }) => {
      const { kc, services, pools } = await readCluster(o.kubeconfig);
      const [claims, bgp] = await Promise.all([readClaims(kc, o.namespace), readBgpAnnouncers(kc, services)]);
      const { addresses, waiting } = addressRows(services, pools, claims, bgp);
      if (o.output === 'json') {
        process.stdout.write(`${JSON.stringify({ addresses, waiting }, null, 2)}\n`);
        return;
      }
      print('table', addresses.map((a) => ({ address: a.address, pool: a.pool, services: a.services.join(','), ports: a.ports.join(','), 'traffic-policy': a.trafficPolicy, 'announced-by': a.announcedBy })), '(no LoadBalancer address given)');
      if (waiting.length) {
        process.stdout.write('\nwaiting:\n');
        print('table', waiting.map((w) => ({ service: w.service, reason: w.reason, message: w.message })), '');
      }
    });
  lb.command('pools')
    .description('every LoadBalancerIPPool: blocks, selector, usage and readiness')
    .option('--kubeconfig <file>', 'kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)')
    .option('-o, --output <format>', 'table or json', 'table')
    .action(async (o: { kubeconfig?: string; output: string }) => {
      const { pools } = await readCluster(o.kubeconfig);
      print(o.output, poolRows(pools) as unknown as Array<Record<string, string>>, '(no pools: create a LoadBalancerIPPool)');
    });

}

export function registerMigrate(program: Command): void {
  program.command('migrate')
    .description('MetalLB IPAddressPools, L2Advertisements, BGPPeers and BGPAdvertisements, Cilium LoadBalancerIPPools, L2 policies and BGP objects, and their Service annotations → ferry (YAML in, YAML out for kubectl apply)')
    .option('-f, --filename <file...>', 'YAML files (- or none: stdin); kubectl get -o yaml lists work')
    .action((o: { filename?: string[] }) => {
      const files = o.filename?.length ? o.filename : ['-'];
      const docs: unknown[] = [];
      for (const f of files) {
        let text: string;
        try {
          text = readFileSync(f === '-' ? 0 : f, 'utf8');
        } catch (e) {
          throw new FerryError({ code: ErrorCode.Config, op: `migrate: read ${f}`, cause: (e as Error).message });
        }
        for (const d of parseAllDocuments(text)) {
          if (d.errors.length) throw new FerryError({ code: ErrorCode.Config, op: `migrate: parse ${f}`, cause: d.errors[0]!.message, hint: 'YAML documents separated by ---' });
          docs.push(d.toJSON());
        }
      }
      const m = migrate(docs, announcementMigrator);
      for (const w of m.warnings) process.stderr.write(`ferry migrate: warning: ${w}\n`);
      process.stdout.write(m.docs.map((d) => stringify(d)).join('---\n'));
    });
}
