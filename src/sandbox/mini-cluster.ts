// A cluster for end-to-end datapath tests, without the agent: the sandbox network (router,
// client, nodes, pods) with the datapath loaded for every node by this process, attached
// to the node's external device and cgroup, and Services written through ServiceWriter.
// The per-node translation of a Service below is deliberately small (no policies): the
// real one is the model's job.
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Datapath, defaultObjectsDir, type MapSizes } from '../datapath/loader.js';
import type { FrontendSpec } from '../model/frontend.js';
import { ServiceWriter } from '../datapath/writer.js';
import { NodeAddressWriter } from '../datapath/node-addresses.js';
import type { ProtoName } from '../model/frontend.js';
import { Testbed } from './netns/testbed.js';
import { startWorkloads, type Workload } from './workloads/spawn.js';
import { ClusterNetwork, type NodeInfo, type PodInfo } from './network.js';
import { inNetns } from '../sys/netns.js';
import { netnsCookie } from '../sys/socket.js';

export interface TestService {
  clusterIP: string;
  ports: Array<{ port: number; proto: ProtoName; targetPort: number; nodePort?: number }>;
  loadBalancerIPs?: string[];
  externalIPs?: string[];
  endpoints: PodInfo[];
  forwarding?: 'snat' | 'dsr';
  /** loadBalancerSourceRanges of its LoadBalancer IPs. */
  sourceRanges?: string[];
}

export interface ClusterNode extends NodeInfo {
  dp: Datapath;
  writer: ServiceWriter;
  pinDir: string;
}

export { WORKLOADS_BIN as WORKLOADS } from './workloads/spawn.js';

export class MiniCluster {
  readonly nodes: ClusterNode[] = [];

  private constructor(
    readonly tb: Testbed,
    readonly net: ClusterNetwork,
  ) {}

  /** `xdp`: the switch made to carry XDP (switch.ts), so that nodes can run it (Datapath.setXdp). */
  static async create(opts: { nodes: number; mapSizes?: Partial<MapSizes>; xdp?: boolean }): Promise<MiniCluster> {
    const tb = await Testbed.create();
    try {
      const net = await ClusterNetwork.create(tb, opts);
      if (opts.xdp) await net.nodeSwitch.prepareForXdp();
      const c = new MiniCluster(tb, net);
      for (const n of net.nodes) {
        const pinDir = join('/sys/fs/bpf', `${tb.prefix}-${n.name}`);
        mkdirSync(pinDir);
        const dp = Datapath.load({ objectsDir: defaultObjectsDir(), pinDir, snatIPv4: n.ip, hashSeed: 7, hostNetnsCookie: netnsCookie(n.host.netns), ...(opts.mapSizes ? { mapSizes: opts.mapSizes } : {}) });
        c.nodes.push({ ...n, dp, writer: new ServiceWriter(dp.maps), pinDir });
        inNetns(n.host.netns, () => dp.attachDevice(n.device));
        dp.attachCgroup({ path: n.host.cgroup, expect: 'subtree' }, { hostNetns: n.host.netns });
      }
      // Every node knows every node's address (the agent learns them from the Nodes).
      for (const n of c.nodes) new NodeAddressWriter(n.dp.maps.node4_addrs).apply(c.nodes.map((x) => x.ip));
      return c;
    } catch (e) {
      await tb.destroy();
      throw e;
    }
  }

  get client() {
    return this.net.client;
  }

  async pod(name: string, nodeIndex: number, serve: { whoami?: number; udpEcho?: number } = {}): Promise<PodInfo> {
    const pod = await this.net.addPod(name, nodeIndex);
    const w: Workload[] = [];
    if (serve.whoami) w.push({ kind: 'whoami', port: serve.whoami, name });
    if (serve.udpEcho) w.push({ kind: 'udp-echo', port: serve.udpEcho });
    await startWorkloads(pod.host, w);
    return pod;
  }

  /** Write the Services into every node's maps, each node marking its own pods local. */
  apply(services: TestService[]): void {
    for (const n of this.nodes) n.writer.apply(services.flatMap((s) => frontendsFor(s, n)));
  }

  async close(): Promise<void> {
    for (const n of this.nodes) {
      n.dp.close();
      rmSync(n.pinDir, { recursive: true, force: true });
    }
    await this.tb.destroy();
  }
}

function frontendsFor(s: TestService, node: NodeInfo): FrontendSpec[] {
  const out: FrontendSpec[] = [];
  for (const p of s.ports) {
    const backends = s.endpoints.map((e) => ({ address: e.ip, port: p.targetPort, local: e.node.name === node.name }));
    const extra = s.forwarding ? { forwarding: s.forwarding } : {};
    out.push({ address: s.clusterIP, port: p.port, proto: p.proto, kind: 'ClusterIP', backends });
    if (p.nodePort) {
      out.push({ address: node.ip, port: p.nodePort, proto: p.proto, kind: 'NodePort', backends, ...extra });
      out.push({ address: '0.0.0.0', port: p.nodePort, proto: p.proto, kind: 'NodePort', nodePortAny: true, backends, ...extra });
    }
    for (const ip of s.loadBalancerIPs ?? []) out.push({ address: ip, port: p.port, proto: p.proto, kind: 'LoadBalancer', backends, ...extra, ...(s.sourceRanges ? { sourceRanges: s.sourceRanges } : {}) });
    for (const ip of s.externalIPs ?? []) out.push({ address: ip, port: p.port, proto: p.proto, kind: 'ExternalIP', backends });
  }
  return out;
}
