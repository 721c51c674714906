// LoadBalancer IPs for the sandbox until LB-IPAM exists: the next free address of
// 10.0.100.0/24 into status.loadBalancer.ingress, and a route on the router to the nodes
// that should receive it (every node for ETP=Cluster; for ETP=Local the nodes with a
// ready local endpoint), ECMP when several.
import type { KObject, Store } from '../apiserver/store.js';
import type { ClusterNetwork } from '../network.js';

type Spec = { type?: string; externalTrafficPolicy?: string; loadBalancerIP?: string };
type Status = { loadBalancer?: { ingress?: Array<{ ip?: string }> } };
type Slice = { endpoints?: Array<{ nodeName?: string; conditions?: { ready?: boolean } }> };

export class LoadBalancerIPAM {
  private readonly routes = new Map<string, string>(); // ip → nodes routed, for change detection

  constructor(
    private readonly store: Store,
    private readonly net: ClusterNetwork,
    private readonly pool = { prefix: '10.0.100.', first: 1, last: 254 },
  ) {}

  private ingressOf(s: KObject): string | undefined {
    return (s.status as Status)?.loadBalancer?.ingress?.[0]?.ip;
  }

  async reconcile(): Promise<void> {
    const lbs = this.store.list('services').filter((s) => (s.spec as Spec)?.type === 'LoadBalancer');
    const used = new Set(lbs.map((s) => this.ingressOf(s)).filter(Boolean));
    for (const s of lbs) {
      if (this.ingressOf(s)) continue;
      const wanted = (s.spec as Spec).loadBalancerIP;
      let ip = wanted && wanted.startsWith(this.pool.prefix) && !used.has(wanted) ? wanted : undefined;
      for (let i = this.pool.first; !ip && i <= this.pool.last; i++) if (!used.has(`${this.pool.prefix}${i}`)) ip = `${this.pool.prefix}${i}`;
      if (!ip) continue; // pool exhausted: the Service stays pending, as with a real IPAM
      used.add(ip);
      this.store.update('services', { ...s, status: { loadBalancer: { ingress: [{ ip, ipMode: 'VIP' }] } } }, { status: true });
    }
    const want = new Map<string, string[]>();
    for (const s of this.store.list('services').filter((x) => (x.spec as Spec)?.type === 'LoadBalancer')) {
      const ip = this.ingressOf(s);
      if (!ip) continue;
      let nodes = this.net.nodes.map((n) => n.name);
      if ((s.spec as Spec).externalTrafficPolicy === 'Local') {
        const slices = this.store.list('endpointslices', s.metadata.namespace).filter((e) => e.metadata.labels?.['kubernetes.io/service-name'] === s.metadata.name);
        const withLocal = new Set(slices.flatMap((e) => ((e as unknown as Slice).endpoints ?? []).filter((ep) => ep.conditions?.ready !== false && ep.nodeName).map((ep) => ep.nodeName!)));
        nodes = nodes.filter((n) => withLocal.has(n));
      }
      want.set(ip, nodes);
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
}
