// The sandbox's network, on a testbed: a router, a client network, N nodes on the node
// network (one broadcast domain, as a switch makes it: ARP reaches every node), and pods
// on each node routed natively (as Flannel host-gw or Calico would) or over a VXLAN
// overlay made as Flannel's vxlan backend makes it (Talos's default CNI), with the address
// plan of design.md. The router has no default route; nothing here reaches the root
// namespace.
import { L2Switch, type SwitchKind } from './netns/switch.js';
import type { Host, Testbed } from './netns/testbed.js';

export const CLIENT_NET = { cidr: '10.0.10.0/24', router: '10.0.10.1', client: '10.0.10.2' } as const;
export const NODE_NET = { cidr: '10.0.30.0/24', router: '10.0.30.1', firstNode: 21 } as const;
export const LB_POOL = '10.0.100.0/24';
export const SERVICE_CIDR = '10.96.0.0/12';
/** Pods reach their node through this link-local next hop (answered by proxy ARP). */
const POD_GATEWAY = '169.254.1.1';

export interface NodeInfo {
  index: number; // 1-based
  name: string; // node-1
  host: Host;
  ip: string; // 10.0.30.21
  podCidr: string; // 10.244.1.0/24
  device: string; // eth0: the external device
}

/** How pods on different nodes reach each other: routed across the node network, or over VXLAN. */
export type PodNetwork = 'routed' | 'vxlan';
export const POD_NETWORKS: readonly PodNetwork[] = ['routed', 'vxlan'];

/**
 * The overlay as Flannel's vxlan backend makes it: a VXLAN device `flannel.1` (VNI 1, UDP
 * 8472) on each node with the pod network's first address (10.244.1.0/32) and a MAC of its
 * own; another node's pods are routed `via` that node's tunnel address `onlink` by the
 * tunnel, whose neighbour entry and forwarding entry (the other node's address) are
 * permanent, with no learning.
 */
export const TUNNEL = { device: 'flannel.1', vni: 1, port: 8472 } as const;
const TUNNEL_MTU = 1450;
const tunnelAddress = (podCidr: string) => podCidr.replace(/\/\d+$/, '');
const tunnelMac = (ip: string) => `0e:fe:${ip.split('.').map((x) => Number(x).toString(16).padStart(2, '0')).join(':')}`;

/** `ip route` arguments for a node's routes (the CLI restores them after `sandbox link up` too). */
export function nodeRouteArgs(self: { ip: string }, nodes: ReadonlyArray<{ ip: string; podCidr: string }>, podNetwork: PodNetwork = 'routed'): string[][] {
  const others = nodes.filter((o) => o.ip !== self.ip);
  const pods = podNetwork === 'vxlan'
    ? others.map((o) => ['route', 'replace', o.podCidr, 'via', tunnelAddress(o.podCidr), 'dev', TUNNEL.device, 'onlink'])
    : others.map((o) => ['route', 'replace', o.podCidr, 'via', o.ip]);
  return [['route', 'replace', 'default', 'via', NODE_NET.router], ...pods];
}

export interface PodInfo {
  name: string;
  node: NodeInfo;
  host: Host;
  ip: string;
}

export class ClusterNetwork {
  readonly nodes: NodeInfo[] = [];
  readonly pods = new Map<string, PodInfo>();
  private nextPodHost = new Map<number, number>();

  private constructor(
    readonly tb: Testbed,
    readonly router: Host,
    readonly client: Host,
    /** The node network's switch (router and nodes on it). */
    readonly nodeSwitch: L2Switch,
    readonly podNetwork: PodNetwork,
  ) {}

  static async create(tb: Testbed, opts: { nodes: number; switch?: SwitchKind; podNetwork?: PodNetwork }): Promise<ClusterNetwork> {
    const router = await tb.addHost('router', { router: true });
    const client = await tb.addHost('client');
    await tb.link({ host: client, ifname: 'eth0', address: `${CLIENT_NET.client}/24` }, { host: router, ifname: 'clients', address: `${CLIENT_NET.router}/24` });
    await tb.route(client, 'default', CLIENT_NET.router);
    const sw = await L2Switch.create(tb, 'switch', opts.switch);
    await sw.attach(router, 'nodes', { address: `${NODE_NET.router}/24` });
    const net = new ClusterNetwork(tb, router, client, sw, opts.podNetwork ?? 'routed');
    for (let i = 1; i <= opts.nodes; i++) await net.addNode(i);
    if (net.podNetwork === 'vxlan') for (const n of net.nodes) await net.addTunnel(n);
    for (const n of net.nodes) await net.nodeRoutes(n);
    return net;
  }

  /** A node's VXLAN tunnel, and its neighbour and forwarding entries for every other node's (Flannel's way). */
  private async addTunnel(n: NodeInfo): Promise<void> {
    const dev = TUNNEL.device;
    await n.host.ip('link', 'add', dev, 'address', tunnelMac(n.ip), 'type', 'vxlan', 'id', String(TUNNEL.vni), 'local', n.ip, 'dev', 'eth0', 'dstport', String(TUNNEL.port), 'nolearning');
    await n.host.ip('address', 'add', `${tunnelAddress(n.podCidr)}/32`, 'dev', dev);
    await n.host.ip('link', 'set', dev, 'up');
    for (const o of this.nodes.filter((x) => x !== n)) {
      await n.host.ip('neigh', 'replace', tunnelAddress(o.podCidr), 'lladdr', tunnelMac(o.ip), 'dev', dev, 'nud', 'permanent');
      await n.host.execOk(['bridge', 'fdb', 'append', tunnelMac(o.ip), 'dev', dev, 'dst', o.ip]);
    }
  }

  private async addNode(i: number): Promise<void> {
    const name = `node-${i}`;
    const host = await this.tb.addHost(name, { forwarding: true });
    const ip = `10.0.30.${NODE_NET.firstNode + i - 1}`;
    await this.nodeSwitch.attach(host, 'eth0', { address: `${ip}/24` });
    const podCidr = `10.244.${i}.0/24`;
    await this.tb.route(this.router, podCidr, ip);
    this.nodes.push({ index: i, name, host, ip, podCidr, device: 'eth0' });
  }

  /** A node's routes: the router by default, the other nodes' pods across the switch or through the tunnel. */
  private async nodeRoutes(n: NodeInfo): Promise<void> {
    for (const args of nodeRouteArgs(n, this.nodes, this.podNetwork)) await n.host.ip(...args);
  }

  /**
   * A node made a bridging host (as one that bridges its NIC for VMs): its address moves
   * from eth0 to a bridge `br0` with eth0's MAC (the router's neighbour entry holds), whose
   * port eth0 becomes; its routes are made again. The agent's automatic choice then takes
   * br0 (a port's frames are its bridge's).
   */
  async bridgeNode(n: NodeInfo): Promise<void> {
    const [eth0] = JSON.parse(await n.host.execOk(['ip', '-j', 'link', 'show', 'eth0'])) as Array<{ address: string }>;
    await n.host.ip('link', 'add', 'br0', 'address', eth0!.address, 'type', 'bridge', 'forward_delay', '0');
    await n.host.ip('address', 'flush', 'dev', 'eth0');
    await n.host.ip('link', 'set', 'eth0', 'master', 'br0');
    await n.host.ip('address', 'add', `${n.ip}/24`, 'dev', 'br0');
    await n.host.ip('link', 'set', 'br0', 'up');
    await this.nodeRoutes(n);
  }

  /** Cut a node off the node network (its link goes dark), or put it back. */
  async setNodeConnected(node: NodeInfo, connected: boolean): Promise<void> {
    await this.nodeSwitch.setConnected(node.host, connected);
    // A macvlan member's own link went down and took its routes along.
    if (connected && this.nodeSwitch.kind === 'macvlan') await this.nodeRoutes(node);
  }

  node(i: number): NodeInfo {
    const n = this.nodes[i - 1];
    if (!n) throw new Error(`no node-${i}`);
    return n;
  }

  /** A pod: a namespace on its node with a veth, a /32 route on the node and a cgroup under the node's. */
  async addPod(name: string, nodeIndex: number): Promise<PodInfo> {
    const node = this.node(nodeIndex);
    const n = (this.nextPodHost.get(nodeIndex) ?? 10) + 1;
    if (n > 254) throw new Error(`node-${nodeIndex}: pod addresses exhausted`);
    this.nextPodHost.set(nodeIndex, n);
    const ip = `10.244.${nodeIndex}.${n}`;
    const host = await this.tb.addHost(name, { cgroupParent: node.host });
    const nodeSide = `v${name}`.slice(0, 15);
    await this.tb.link({ host, ifname: 'eth0', address: `${ip}/32` }, { host: node.host, ifname: nodeSide });
    await node.host.execOk(['sysctl', '-qw', `net.ipv4.conf.${nodeSide}.proxy_arp=1`]);
    // As Flannel gives its pods the tunnel's MTU (the node network's less the VXLAN headers).
    if (this.podNetwork === 'vxlan') for (const [h, dev] of [[host, 'eth0'], [node.host, nodeSide]] as const) await h.ip('link', 'set', dev, 'mtu', String(TUNNEL_MTU));
    await node.host.ip('route', 'replace', `${ip}/32`, 'dev', nodeSide);
    await host.ip('route', 'replace', POD_GATEWAY, 'dev', 'eth0', 'scope', 'link');
    await host.ip('route', 'replace', 'default', 'via', POD_GATEWAY, 'dev', 'eth0');
    const pod = { name, node, host, ip };
    this.pods.set(name, pod);
    return pod;
  }

  /** Remove a pod: its processes, namespace, cgroup and the node's route to it. */
  async removePod(name: string): Promise<void> {
    const pod = this.pods.get(name);
    if (!pod) return;
    this.pods.delete(name);
    await pod.node.host.exec(['ip', 'route', 'del', `${pod.ip}/32`]);
    await this.tb.removeHost(pod.host.name);
  }

  /** Route a LoadBalancer IP from the router to the nodes that should receive it (ECMP);
   * with no node, the route goes and the IP is unreachable. */
  async routeLoadBalancerIP(ip: string, nodes: NodeInfo[]): Promise<void> {
    if (nodes.length === 0) {
      await this.router.exec(['ip', 'route', 'del', `${ip}/32`]);
      return;
    }
    await this.tb.multipathRoute(this.router, `${ip}/32`, nodes.map((n) => n.ip));
  }
}
