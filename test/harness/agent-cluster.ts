// A cluster with real agents: the sandbox network, the test API server inside the router's
// namespace (so nodes reach it and nothing crosses the root namespace), one `ferry agent`
// process per node, and helpers to change Services and EndpointSlices in the API's store.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { testKubeconfig } from '../../src/sandbox/apiserver/kubeconfig.js';
import { TestApiServer } from '../../src/sandbox/apiserver/server.js';
import type { KObject } from '../../src/sandbox/apiserver/store.js';
import { Testbed, type Proc } from '../../src/sandbox/netns/testbed.js';
import { ClusterNetwork, NODE_NET, type NodeInfo, type PodInfo } from '../../src/sandbox/network.js';
import { REPO_ROOT } from './paths.js';
import { WORKLOADS } from './mini-cluster.js';

export const API_PORT = 6443;
const FERRY = join(REPO_ROOT, 'bin', 'ferry.js');

export class AgentCluster {
  readonly agents = new Map<string, Proc>();
  private readonly dir: string;
  readonly kubeconfig: string;

  private constructor(
    readonly tb: Testbed,
    readonly net: ClusterNetwork,
    readonly api: TestApiServer,
  ) {
    this.dir = mkdtempSync(join(tmpdir(), 'ferry-agents-'));
    this.kubeconfig = join(this.dir, 'kubeconfig');
    writeFileSync(this.kubeconfig, testKubeconfig(api.url));
  }

  static async create(opts: { nodes: number }): Promise<AgentCluster> {
    const tb = await Testbed.create();
    try {
      const net = await ClusterNetwork.create(tb, opts);
      const api = new TestApiServer({ netns: net.router.netns, host: NODE_NET.router, port: API_PORT });
      await api.start();
      for (const n of net.nodes) {
        api.store.create('nodes', { metadata: { name: n.name, labels: { 'kubernetes.io/hostname': n.name } }, status: { addresses: [{ type: 'InternalIP', address: n.ip }, { type: 'Hostname', address: n.name }] } });
      }
      return new AgentCluster(tb, net, api);
    } catch (e) {
      await tb.destroy();
      throw e;
    }
  }

  pinDir(node: NodeInfo): string {
    return join('/sys/fs/bpf', `${this.tb.prefix}-${node.name}`);
  }

  /** Start (or restart) the agent of a node; resolves once its first sync is done. */
  async startAgent(node: NodeInfo, extraEnv: Record<string, string> = {}): Promise<Proc> {
    mkdirSync(this.pinDir(node), { recursive: true });
    const p = node.host.spawn(
      [process.execPath, FERRY, 'agent', '--node-name', node.name, '--kubeconfig', this.kubeconfig, '--devices', node.device, '--pin-dir', this.pinDir(node), '--cgroup-root', node.host.cgroup, '--log-level', 'info'],
      { ...process.env, FERRY_CGROUP_MUST_BE_ROOT: 'false', FERRY_MIN_SYNC_PERIOD_MS: '50', FERRY_CT_GC_INTERVAL_SECONDS: '5', ...extraEnv },
    );
    this.agents.set(node.name, p);
    for (let i = 0; i < 600; i++) {
      if (p.output().includes('initial sync done')) return p;
      if (p.child.exitCode !== null) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`agent on ${node.name} did not sync:\n${p.output()}`);
  }

  async stopAgent(node: NodeInfo): Promise<void> {
    await this.agents.get(node.name)?.stop(5000);
    this.agents.delete(node.name);
  }

  async pod(name: string, nodeIndex: number, serve: { whoami?: number; udpEcho?: number } = {}): Promise<PodInfo> {
    const pod = await this.net.addPod(name, nodeIndex);
    const start = async (args: string[], ready: string) => {
      const p = pod.host.spawn([process.execPath, WORKLOADS, ...args]);
      for (let i = 0; i < 200 && !p.output().includes(ready); i++) await new Promise((r) => setTimeout(r, 25));
      if (!p.output().includes(ready)) throw new Error(`${args[0]} in ${name} did not start: ${p.output()}`);
    };
    if (serve.whoami) await start(['whoami', '--port', String(serve.whoami), '--name', name], 'whoami listening');
    if (serve.udpEcho) await start(['udp-echo', '--port', String(serve.udpEcho)], 'udp-echo listening');
    return pod;
  }

  apply(resource: 'services' | 'endpointslices', obj: V1Service | V1EndpointSlice): void {
    const o = structuredClone(obj) as unknown as KObject;
    const have = this.api.store.get(resource, o.metadata.namespace, o.metadata.name!);
    if (have) this.api.store.update(resource, { ...o, metadata: { ...o.metadata, resourceVersion: undefined } });
    else this.api.store.create(resource, o);
  }

  remove(resource: 'services' | 'endpointslices', namespace: string, name: string): void {
    this.api.store.delete(resource, namespace, name);
  }

  async close(): Promise<void> {
    await Promise.all([...this.net.nodes].map((n) => this.stopAgent(n)));
    await this.api.stop();
    await this.tb.destroy();
    for (const n of this.net.nodes) rmSync(this.pinDir(n), { recursive: true, force: true });
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** An EndpointSlice for pods, as the EndpointSlice controller writes it. */
export function sliceFor(service: string, pods: Array<{ pod: PodInfo; ready?: boolean; terminating?: boolean }>, ports: Array<{ name: string; port: number; protocol?: string }>, name = `${service}-abc`): V1EndpointSlice {
  return {
    metadata: {
      name,
      namespace: 'default',
      labels: { 'kubernetes.io/service-name': service },
      annotations: { 'endpoints.kubernetes.io/last-change-trigger-time': new Date().toISOString() },
    },
    addressType: 'IPv4',
    ports: ports.map((p) => ({ name: p.name, port: p.port, protocol: p.protocol ?? 'TCP' })),
    endpoints: pods.map(({ pod, ready, terminating }) => ({
      addresses: [pod.ip],
      nodeName: pod.node.name,
      conditions: { ready: ready ?? true, serving: true, terminating: terminating ?? false },
    })),
  };
}
