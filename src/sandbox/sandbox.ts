// A whole bare-metal cluster in network namespaces: router, client, N nodes with native
// pod routing, the test API server (reachable from the nodes inside the router's namespace
// and from this machine on loopback), the sandbox's controllers (allocator, kubelet,
// Deployments, EndpointSlices, routes to LoadBalancer addresses), one `ferry agent` per
// node and `ferry operator` (two replicas, on the first two nodes) with a default pool.
import type { Acceleration } from '../datapath/loader.js';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import { testKubeconfig } from './apiserver/kubeconfig.js';
import { TestApiServer } from './apiserver/server.js';
import { Store } from './apiserver/store.js';
import { SandboxApi } from './api-client.js';
import { serviceAllocator } from './controllers/allocator.js';
import { reconcileEndpointSlices } from './controllers/endpointslices.js';
import { parse as parseYaml } from 'yaml';
import { LoadBalancerRoutes } from './controllers/lb-routes.js';
import { RouteLog, type RouteChange } from './route-log.js';
import { startFrr, type FrrInstance } from './frr.js';
import { Kubelet, reconcileDeployments } from './controllers/workloads.js';
import { Testbed, destroyResources, type Proc } from './netns/testbed.js';
import { readRecords, pidAlive } from './netns/registry.js';
import { ClusterNetwork, NODE_NET, TUNNEL, type NodeInfo, type PodNetwork } from './network.js';
import { ContainerImage } from './container.js';
import { ClusterIdentity } from './cluster-identity.js';
import { FerryPods, type AgentStart } from './ferry-pods.js';

export const API_PORT = 6443;
export const SANDBOX_STATE_ROOT = process.env.FERRY_SANDBOX_STATE ?? '/run/ferry/sandboxes';
const PACKAGE_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const FERRY_BIN = join(PACKAGE_ROOT, 'bin', 'ferry.js');
export const POOL_CRD = join(PACKAGE_ROOT, 'deploy', 'crds', 'loadbalancerippools.yaml');
export const L2_POLICY_CRD = join(PACKAGE_ROOT, 'deploy', 'crds', 'l2announcementpolicies.yaml');
const CRDS = ['loadbalancerippools', 'l2announcementpolicies', 'bgppeers', 'bgpadvertisements'].map((n) => join(PACKAGE_ROOT, 'deploy', 'crds', `${n}.yaml`));
/**
 * The sandbox's default pool: routed to the nodes by the router, or (--announce l2) in the
 * node subnet, reached by ARP alone.
 */
export const DEFAULT_POOL = { name: 'default', cidr: '10.0.100.0/24' };
export const L2_POOL = { name: 'default', start: '10.0.30.200', stop: '10.0.30.250' };

/**
 * How LoadBalancer addresses reach the nodes: BGP (the router runs FRR and learns them from
 * every node's FRR, driven by the agents), ARP answered by ferry (a pool in the node
 * subnet), or static routes the sandbox itself keeps on the router.
 */
export type AnnounceMode = 'bgp' | 'l2' | 'routes';
export const ROUTER_ASN = 64513;
export const NODE_ASN = 64512;
/** BFD on the sandbox's sessions: 100 ms × 3. */
export const SANDBOX_BFD = { receiveIntervalMs: 100, transmitIntervalMs: 100, detectMultiplier: 3 };

/**
 * The router's FRR: one dynamic peer group for the node subnet, ECMP over every node that
 * announces an address (on each packet's 5-tuple, as the testbed's routers hash), BFD,
 * nothing sent to the nodes.
 * `no zebra nexthop kernel enable`: with kernel nexthop groups, FRR 8.4 left an ECMP route
 * short of a nexthop after a link flap.
 */
export const ROUTER_FRR = `no zebra nexthop kernel enable
route-map ferry-sandbox-nothing deny 10
exit
bfd
 profile sandbox
  receive-interval ${SANDBOX_BFD.receiveIntervalMs}
  transmit-interval ${SANDBOX_BFD.transmitIntervalMs}
  detect-multiplier ${SANDBOX_BFD.detectMultiplier}
 exit
exit
router bgp ${ROUTER_ASN}
 bgp router-id 10.0.30.1
 no bgp ebgp-requires-policy
 neighbor NODES peer-group
 neighbor NODES remote-as ${NODE_ASN}
 neighbor NODES timers 1 3
 neighbor NODES timers connect 2
 neighbor NODES bfd profile sandbox
 bgp listen range ${'10.0.30.0/24'} peer-group NODES
 address-family ipv4 unicast
  maximum-paths 16
  neighbor NODES route-map ferry-sandbox-nothing out
 exit-address-family
exit
`;
export const OPERATOR_NAMESPACE = 'kube-system';

export type ForwardingMode = 'snat' | 'dsr' | 'hybrid';

export interface SandboxOptions {
  name: string;
  nodes: number;
  mode: ForwardingMode;
  log: Logger;
  /** Extra environment for the agents (tests shorten intervals). */
  agentEnv?: Record<string, string>;
  /** The ferry command the agents start from (default: this build's): a previous release's, for upgrade tests. */
  agentBin?: string;
  /** Run the agents from ferry's OCI image (runc; `make image`) instead of this build's files. */
  agentImage?: { layout: string; tag: string };
  /** Extra environment for the operator replicas. */
  operatorEnv?: Record<string, string>;
  /** bgp (default): the router learns the pool by BGP; l2: the pool is in the node subnet and ferry answers ARP; routes: the sandbox routes it. */
  announce?: AnnounceMode;
  /** The agents' XDP acceleration (default none); with XDP the switch is made to carry it (switch.ts). */
  acceleration?: Acceleration;
  /** Pods of other nodes routed across the node network (default) or over VXLAN (network.ts). */
  podNetwork?: PodNetwork;
}

export interface SandboxState {
  name: string;
  prefix: string;
  pid: number;
  mode: ForwardingMode;
  announce: AnnounceMode;
  acceleration: Acceleration;
  podNetwork?: PodNetwork;
  kubeconfig: string;
  apiUrl: string;
  nodes: Array<{ name: string; ip: string; podCidr: string; netns: string; cgroup: string; pinDir: string }>;
  hosts: Record<string, { netns: string; cgroup: string }>;
  /** The node network's switch: its kind and each node's port on it (for `ferry sandbox link`). */
  nodeSwitch: { kind: 'bridge' | 'macvlan'; netns: string; ports: Record<string, string> };
  ready: boolean;
}

export function stateDir(name: string): string {
  return join(SANDBOX_STATE_ROOT, name);
}

export function prefixFor(name: string): string {
  return `fys-${name}`;
}

export function validateSandboxName(name: string): void {
  if (!/^[a-z][a-z0-9]{0,11}$/.test(name)) throw new Error(`sandbox name "${name}": 1–12 characters, [a-z0-9], starting with a letter`);
}

export class Sandbox {
  readonly agents = new Map<string, Proc>();
  /** Operator replicas by identity. */
  readonly operators = new Map<string, Proc>();
  /** FRR on this machine (with --announce bgp): the router's and, unless from the image, each node's. */
  readonly frr = new Map<string, FrrInstance>();
  /** With the image and BGP: each node's DaemonSet frr container. */
  readonly frrContainers = new Map<string, Proc>();
  readonly kubelet: Kubelet;
  private readonly lbRoutes: LoadBalancerRoutes;
  /** The router's route changes, whoever makes them (FRR in BGP mode, lbRoutes otherwise). */
  private routeLog?: RouteLog;
  private unsubscribe: (() => void) | undefined;
  private controllerTimer: NodeJS.Timeout | undefined;
  private controllerRun: Promise<void> = Promise.resolve();
  readonly dir: string;
  readonly kubeconfig: string;
  private pods: FerryPods;

  private constructor(
    readonly opts: SandboxOptions,
    readonly tb: Testbed,
    readonly net: ClusterNetwork,
    readonly store: Store,
    readonly api: TestApiServer,
    /** CA, tokens and the enforced RBAC (identity.policy may be swapped by a test). */
    readonly identity: ClusterIdentity,
  ) {
    this.dir = stateDir(opts.name);
    this.kubeconfig = join(this.dir, 'kubeconfig');
    this.pods = new FerryPods(identity, this.dir, PACKAGE_ROOT, undefined);
    this.kubelet = new Kubelet({ store, net, log: opts.log.child({ controller: 'kubelet' }) });
    this.lbRoutes = new LoadBalancerRoutes(store, net);
  }

  static async up(opts: SandboxOptions): Promise<Sandbox> {
    validateSandboxName(opts.name);
    if (!['snat', 'dsr', 'hybrid'].includes(opts.mode)) throw new Error(`--mode ${opts.mode}: use snat, dsr or hybrid`);
    const prefix = prefixFor(opts.name);
    // Leftovers of a sandbox of this name whose owner died: remove them first.
    for (const r of readRecords()) if (r.prefix === prefix && !pidAlive(r.ownerPid)) await destroyResources(r);
    const tb = await Testbed.create({ prefix });
    try {
      const dir = stateDir(opts.name);
      rmSync(dir, { recursive: true, force: true });
      mkdirSync(dir, { recursive: true });
      tb.ownPath(dir);
      const net = await ClusterNetwork.create(tb, { nodes: opts.nodes, podNetwork: opts.podNetwork ?? 'routed' });
      if ((opts.acceleration ?? 'none') !== 'none') await net.nodeSwitch.prepareForXdp();
      const store = new Store();
      // Agents and operators: TLS, their ServiceAccount's token, the manifests' RBAC enforced.
      const identity = await ClusterIdentity.create(dir, NODE_NET.router, API_PORT, { mode: opts.mode, ...(opts.acceleration && opts.acceleration !== 'none' ? { acceleration: opts.acceleration } : {}) });
      const api = new TestApiServer({
        store,
        netns: net.router.netns,
        host: NODE_NET.router,
        port: API_PORT,
        alsoListen: { host: '127.0.0.1', port: 0 },
        admit: serviceAllocator(store),
        secure: { key: identity.key, cert: identity.cert, userOf: (t) => identity.userOf(t), policy: () => identity.policy },
      });
      await api.start();
      const s = new Sandbox(opts, tb, net, store, api, identity);
      s.routeLog = RouteLog.start(net.router);
      if (opts.agentImage) {
        s.pods = new FerryPods(identity, s.dir, PACKAGE_ROOT, await ContainerImage.unpack(tb, opts.agentImage.layout, opts.agentImage.tag));
      }
      writeFileSync(s.kubeconfig, testKubeconfig(api.alsoUrl!));
      for (const ns of ['default', 'kube-system']) store.create('namespaces', { metadata: { name: ns } });
      for (const n of net.nodes) {
        store.create('nodes', {
          metadata: { name: n.name, labels: { 'kubernetes.io/hostname': n.name, 'kubernetes.io/os': 'linux' } },
          spec: { podCIDR: n.podCidr, podCIDRs: [n.podCidr] },
          status: { addresses: [{ type: 'InternalIP', address: n.ip }, { type: 'Hostname', address: n.name }], conditions: [{ type: 'Ready', status: 'True' }] },
        });
      }
      s.unsubscribe = store.subscribe(() => s.kickControllers());
      if (s.announce === 'bgp') await s.startFrr();
      await s.installLbIpam();
      await Promise.all([...net.nodes.map((n) => s.startAgent(n)), ...net.nodes.slice(0, 2).map((n) => s.startOperator(n))]);
      await s.waitForPoolStatus(DEFAULT_POOL.name);
      s.writeState(true);
      return s;
    } catch (e) {
      await tb.destroy();
      throw e;
    }
  }

  pinDir(node: NodeInfo): string {
    return join('/sys/fs/bpf', `${this.tb.prefix}-${node.name}`);
  }

  /**
   * Start (or restart) a node's agent from the manifests' DaemonSet (ferry-pods.ts);
   * resolves after its first sync (30 s at most unless told). `bin`: another build's ferry
   * command (an upgrade test); `env`: extra settings; `devices`: --devices; `capabilities`:
   * the only ones it has (as a container's securityContext gives them; e.g. ['bpf', 'net_admin']).
   */
  async startAgent(node: NodeInfo, timeoutMs = 30_000, opts: AgentStart = {}): Promise<Proc> {
    const pinDir = this.pinDir(node);
    mkdirSync(pinDir, { recursive: true });
    this.tb.ownPath(pinDir);
    // One kernel for every node: its own pins and cgroup; its FRR on this machine (or its pod's frr container).
    // Over VXLAN the tunnel is one of ferry's devices (SNAT flows through it leave from its address, DSR options arrive on it); a macvlan switch's member has no driver XDP: named, best-effort runs generic XDP on it.
    const overlay: Record<string, string> = { ...(this.net.podNetwork === 'vxlan' ? { FERRY_DEVICES: `${node.device},${TUNNEL.device}` } : {}), ...(this.net.nodeSwitch.kind === 'macvlan' ? { FERRY_XDP_DEVICES: node.device } : {}) };
    const settings = { FERRY_PIN_DIR: pinDir, FERRY_CGROUP_ROOT: node.host.cgroup, FERRY_CGROUP_MUST_BE_ROOT: 'false', ...overlay, ...(this.frr.has(node.name) ? { FERRY_FRR_PATHSPACE: node.host.netns } : {}), ...this.opts.agentEnv };
    const bin = opts.bin ?? this.opts.agentBin;
    // A previous release chose no devices by itself: its DaemonSet named them.
    const p = await this.pods.agent(node.host, node.name, settings, { ...opts, bin, devices: opts.devices ?? (bin && bin !== FERRY_BIN ? node.device : undefined) });
    this.agents.set(node.name, p);
    for (const end = Date.now() + timeoutMs; Date.now() < end; ) {
      if (p.output().includes('initial sync done')) return p;
      if (p.child.exitCode !== null || p.child.signalCode !== null) break; // exited, or killed
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`agent on ${node.name} did not start:\n${p.output().slice(-4000)}`);
  }

  get announce(): AnnounceMode {
    return this.opts.announce ?? 'bgp';
  }

  /** FRR on the router (ECMP over the 5-tuple: the testbed's routers hash so) and beside each node's agent (with the image: its frr container). */
  private async startFrr(): Promise<void> {
    this.frr.set('router', await startFrr(this.tb, this.net.router, ROUTER_FRR));
    await Promise.all(this.net.nodes.map(async (n) => (this.opts.agentImage ? this.frrContainers.set(n.name, await this.pods.frr(n.host, n.name)) : this.frr.set(n.name, await startFrr(this.tb, n.host, '')))));
  }

  /** The CRDs (as deploy/ has them, through the API as kubectl would), the default pool and, with L2, its policy. */
  private async installLbIpam(): Promise<void> {
    const api = new SandboxApi(this.api.alsoUrl!);
    const post = async (what: string, kind: string, body: unknown) => {
      const r = await api.call('POST', api.url(kind, ''), body);
      if (r.status >= 300) throw new Error(`${what}: ${String(r.json.message)}`);
    };
    for (const crd of CRDS) await post(`install ${crd}`, 'CustomResourceDefinition', parseYaml(readFileSync(crd, 'utf8')));
    const l2 = this.opts.announce === 'l2';
    await post('create the default pool', 'LoadBalancerIPPool', {
      apiVersion: 'ferry.dev/v1alpha1', kind: 'LoadBalancerIPPool', metadata: { name: DEFAULT_POOL.name },
      spec: { blocks: [l2 ? { start: L2_POOL.start, stop: L2_POOL.stop } : { cidr: DEFAULT_POOL.cidr }] },
    });
    if (l2) await post('create the L2 policy', 'L2AnnouncementPolicy', { apiVersion: 'ferry.dev/v1alpha1', kind: 'L2AnnouncementPolicy', metadata: { name: 'default' }, spec: { interfaces: ['eth0'] } });
    if (this.announce === 'bgp') {
      await post('create the BGP peer', 'BGPPeer', { apiVersion: 'ferry.dev/v1alpha1', kind: 'BGPPeer', metadata: { name: 'router' }, spec: { peerAddress: NODE_NET.router, peerASN: ROUTER_ASN, myASN: NODE_ASN, bfd: SANDBOX_BFD } });
      // Services labelled announce=l2 are left to ARP (demo/l2.yaml).
      await post('create the BGP advertisement', 'BGPAdvertisement', { apiVersion: 'ferry.dev/v1alpha1', kind: 'BGPAdvertisement', metadata: { name: 'default' }, spec: { serviceSelector: { matchExpressions: [{ key: 'announce', operator: 'NotIn', values: ['l2'] }] } } });
    }
  }

  /** Start a `ferry operator` replica in a node's host namespace, as a Deployment's pod would run. */
  startOperator(node: NodeInfo): Proc {
    const identity = `ferry-operator-${node.name}`;
    const p = this.pods.operator(node.host, node.name, identity, this.opts.operatorEnv ?? {});
    this.operators.set(identity, p);
    return p;
  }

  /** The router's route changes so far (epoch ms, the last 200). */
  routeChanges(): RouteChange[] {
    return this.routeLog?.changes() ?? [];
  }

  /** The replica holding the leader Lease now, if any. */
  async operatorLeader(): Promise<string | undefined> {
    const lease = this.store.get('leases', OPERATOR_NAMESPACE, 'ferry-operator') as { spec?: { holderIdentity?: string } } | undefined;
    return lease?.spec?.holderIdentity || undefined;
  }

  /** Wait until the operator has written a pool's status (it runs and leads). */
  async waitForPoolStatus(name: string, timeoutMs = 30_000): Promise<void> {
    for (const end = Date.now() + timeoutMs; Date.now() < end; ) {
      const pool = this.store.get('loadbalancerippools', undefined, name) as { status?: { total?: number } } | undefined;
      if (pool?.status?.total !== undefined) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    const logs = [...this.operators].map(([id, p]) => `${id}:\n${p.output().slice(-2000)}`).join('\n');
    throw new Error(`the operator did not report pool ${name} within ${timeoutMs} ms:\n${logs}`);
  }

  async stopAgent(node: NodeInfo): Promise<void> {
    await this.agents.get(node.name)?.stop(5000);
    this.agents.delete(node.name);
  }

  private kickControllers(): void {
    if (this.controllerTimer) return;
    this.controllerTimer = setTimeout(() => {
      this.controllerTimer = undefined;
      this.controllerRun = this.controllerRun
        .then(async () => {
          reconcileDeployments(this.store);
          this.kubelet.kick();
          reconcileEndpointSlices(this.store);
          if (this.announce === 'routes') await this.lbRoutes.reconcile();
        })
        .catch((e: Error) => this.opts.log.error({ err: e.message }, 'sandbox controllers'));
    }, 10);
  }

  /** Wait until the controllers and the kubelet have nothing left to do. */
  /** Create (or replace) an object through the API, as kubectl apply would, then settle. */
  async put(kind: string, obj: Record<string, unknown>): Promise<Record<string, unknown>> {
    const api = new SandboxApi(this.api.alsoUrl!);
    const meta = obj.metadata as { name: string; namespace?: string };
    const ns = meta.namespace ?? 'default';
    let r = await api.call('POST', api.url(kind, ns), obj);
    if (r.status === 409) {
      const cur = await api.call('GET', api.url(kind, ns, meta.name));
      r = await api.call('PUT', api.url(kind, ns, meta.name), { ...obj, metadata: { ...meta, namespace: ns, resourceVersion: (cur.json.metadata as { resourceVersion: string }).resourceVersion } });
    }
    if (r.status >= 300) throw new Error(`${kind} ${meta.name}: ${String(r.json.message)}`);
    await this.settle();
    return r.json;
  }

  async settle(): Promise<void> {
    for (let i = 0; i < 3; i++) {
      while (this.controllerTimer) await new Promise((r) => setTimeout(r, 5));
      await this.controllerRun;
      await this.kubelet.idle();
    }
  }

  state(ready: boolean): SandboxState {
    const hosts: SandboxState['hosts'] = {};
    for (const h of this.tb.allHosts()) hosts[h.name] = { netns: h.netns, cgroup: h.cgroup };
    return {
      name: this.opts.name,
      prefix: this.tb.prefix,
      pid: process.pid,
      mode: this.opts.mode,
      announce: this.announce,
      acceleration: this.opts.acceleration ?? 'none',
      podNetwork: this.net.podNetwork,
      nodeSwitch: { kind: this.net.nodeSwitch.kind, netns: this.net.nodeSwitch.host.netns, ports: this.net.nodeSwitch.portsByHost() },
      kubeconfig: this.kubeconfig,
      apiUrl: this.api.alsoUrl!,
      nodes: this.net.nodes.map((n) => ({ name: n.name, ip: n.ip, podCidr: n.podCidr, netns: n.host.netns, cgroup: n.host.cgroup, pinDir: this.pinDir(n) })),
      hosts,
      ready,
    };
  }

  writeState(ready: boolean): void {
    writeFileSync(join(this.dir, 'state.json'), JSON.stringify(this.state(ready), null, 2));
  }

  async down(): Promise<void> {
    this.unsubscribe?.();
    if (this.controllerTimer) clearTimeout(this.controllerTimer);
    await this.controllerRun;
    await this.kubelet.close();
    await Promise.all([...this.net.nodes.map((n) => this.stopAgent(n)), ...[...this.operators.values()].map((p) => p.stop(5000))]);
    await Promise.all([...[...this.frr.values()].map((f) => f.stop()), ...[...this.frrContainers.values()].map((p) => p.stop(5000))]);
    await this.api.stop();
    await this.tb.destroy();
    this.identity.checkSufficient(this.api.access);
  }
}
