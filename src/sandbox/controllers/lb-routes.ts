// How traffic for LoadBalancer addresses reaches the sandbox's nodes where ferry does not
// announce them: a route on the router for each address in a Service's status (written by
// `ferry operator`), to the nodes that should receive it: every node for ETP=Cluster, for
// ETP=Local the nodes with a ready local endpoint; ECMP when several. Addresses in the
// node subnet get no route: they are on the router's own link, reached by ARP alone (and
// answered by ferry's L2 announcements).
import type { KObject, Store } from '../apiserver/store.js';
import { NODE_NET, type ClusterNetwork } from '../network.js';

type Spec = { type?: string; externalTrafficPolicy?: string };
type Status = { loadBalancer?: { ingress?: Array<{ ip?: string }> } };
type Slice = { endpoints?: Array<{ nodeName?: string; conditions?: { ready?: boolean } }> };

const IPV4 = /^\d{1,3}(\.\d{1,3}){3}$/;

export class LoadBalancerRoutes {
  private readonly routes = new Map<string, string>(); // ip → nodes routed, for change detection

  constructor(
    private readonly store: Store,
    private readonly net: ClusterNetwork,
  ) {}

  private arpReached(ip: string): boolean {
    const [base = '', bits = '32'] = NODE_NET.cidr.split('/');
    const n = (a: string) => a.split('.').reduce((x, o) => x * 256 + Number(o), 0);
    const size = 2 ** (32 - Number(bits));
    return Math.floor(n(ip) / size) === Math.floor(n(base) / size);
  }

  async reconcile(): Promise<void> {
    const want = new Map<string, string[]>();
    for (const s of this.store.list('services').filter((x) => (x.spec as Spec)?.type === 'LoadBalancer')) {
      let nodes = this.net.nodes.map((n) => n.name);
      if ((s.spec as Spec).externalTrafficPolicy === 'Local') nodes = nodes.filter((n) => this.localEndpointNodes(s).has(n));
      for (const i of (s.status as Status)?.loadBalancer?.ingress ?? []) {
        // Shared addresses: the union of the nodes each Service on it wants.
        if (i.ip && IPV4.test(i.ip) && !this.arpReached(i.ip)) want.set(i.ip, [...new Set([...(want.get(i.ip) ?? []), ...nodes])].sort());
      }
    }
    for (const [ip, nodes] of want) {
      const sig = nodes.join(',');
      if (this.routes.get(ip) === sig) continue;
      await this.net.routeLoadBalancerIP(ip, this.net.nodes.filter((n) => nodes.includes(n.name)));
      this.routes.set(ip, sig);
    }
    for (const ip of [...this.routes.keys()]) {
      if (want.has(ip)) continue;
      await this.net.routeLoadBalancerIP(ip, []);
      this.routes.delete(ip);
    }
  }

  private localEndpointNodes(s: KObject): Set<string> {
    const slices = this.store.list('endpointslices', s.metadata.namespace).filter((e) => e.metadata.labels?.['kubernetes.io/service-name'] === s.metadata.name);
    return new Set(slices.flatMap((e) => ((e as unknown as Slice).endpoints ?? []).filter((ep) => ep.conditions?.ready !== false && ep.nodeName).map((ep) => ep.nodeName!)));
  }
}
