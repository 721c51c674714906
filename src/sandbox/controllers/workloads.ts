// The sandbox's kubelet and Deployment controller: Pods become namespaces on their node
// running a built-in server chosen by image (whoami, udp-echo, tcp-echo), Deployments keep their
// replicas spread over the nodes. Both reconcile the whole (small) world on every change.
import { createHash, randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { KObject, Store } from '../apiserver/store.js';
import type { Proc } from '../netns/testbed.js';
import { startWorkloads, type Workload } from '../workloads/spawn.js';
import type { ClusterNetwork, PodInfo } from '../network.js';

type Container = { name?: string; image?: string; ports?: Array<{ name?: string; containerPort: number; protocol?: string }> };
type PodSpec = { nodeName?: string; containers?: Container[]; terminationGracePeriodSeconds?: number; topologySpreadConstraints?: unknown[] };
type Condition = { type: string; status: string };

export const NETNS_ANNOTATION = 'sandbox.ferry.dev/netns';
export const CGROUP_ANNOTATION = 'sandbox.ferry.dev/cgroup';
/** How long a terminating pod keeps serving before it goes (the sandbox's grace period). */
export const DEFAULT_GRACE_SECONDS = 5;

export interface WorkloadDeps {
  store: Store;
  net: ClusterNetwork;
  log: Logger;
}

interface RunningPod {
  pod: PodInfo;
  procs: Proc[];
  terminatingSince?: number;
}

const podKey = (o: KObject) => `${o.metadata.namespace}/${o.metadata.name}`;

/** A host name for a pod namespace: short, unique, [a-z0-9-]. */
function hostNameFor(ns: string, name: string): string {
  const clean = `${name}`.toLowerCase().replace(/[^a-z0-9-]/g, '-').slice(0, 22).replace(/-+$/, '');
  return `p-${clean}-${createHash('sha1').update(`${ns}/${name}`).digest('hex').slice(0, 4)}`;
}

export class Kubelet {
  private readonly running = new Map<string, RunningPod>();
  private busy: Promise<void> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly d: WorkloadDeps) {}

  /** Reconcile soon (coalescing bursts of events). */
  kick(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.busy = this.busy.then(() => this.reconcile()).catch((e: Error) => this.d.log.error({ err: e.message }, 'kubelet'));
    }, 10);
  }

  async idle(): Promise<void> {
    while (this.timer) await new Promise((r) => setTimeout(r, 5));
    await this.busy;
  }

  private schedule(pod: KObject): number {
    const spec = pod.spec as PodSpec;
    if (spec.nodeName) return this.d.net.nodes.find((n) => n.name === spec.nodeName)?.index ?? 1;
    // Spread over nodes (what both round-robin and a hostname topologySpreadConstraint
    // with maxSkew 1 amount to): the node with the fewest pods of the same owner.
    const owner = (pod.metadata.labels ?? {})['app'] ?? JSON.stringify(pod.metadata.labels ?? {});
    const counts = new Map(this.d.net.nodes.map((n) => [n.name, 0]));
    for (const p of this.d.store.list('pods')) {
      const nn = (p.spec as PodSpec)?.nodeName;
      const po = (p.metadata.labels ?? {})['app'] ?? JSON.stringify(p.metadata.labels ?? {});
      if (nn && po === owner) counts.set(nn, (counts.get(nn) ?? 0) + 1);
    }
    const best = [...counts.entries()].sort((a, b) => a[1] - b[1] || a[0].localeCompare(b[0]))[0]![0];
    return this.d.net.nodes.find((n) => n.name === best)!.index;
  }

  private async start(pod: KObject): Promise<void> {
    const key = podKey(pod);
    const nodeIndex = this.schedule(pod);
    const info = await this.d.net.addPod(hostNameFor(pod.metadata.namespace ?? 'default', pod.metadata.name!), nodeIndex);
    const workloads: Workload[] = [];
    for (const c of (pod.spec as PodSpec).containers ?? []) {
      const image = c.image ?? '';
      const ports = c.ports?.length ? c.ports : [{ containerPort: 80, protocol: image.includes('udp-echo') ? 'UDP' : 'TCP' }];
      for (const p of ports) {
        const udp = image.includes('udp-echo') || (p.protocol ?? 'TCP').toUpperCase() === 'UDP';
        workloads.push(udp ? { kind: 'udp-echo', port: p.containerPort } : image.includes('tcp-echo') ? { kind: 'tcp-echo', port: p.containerPort } : { kind: 'whoami', port: p.containerPort, name: pod.metadata.name! });
      }
    }
    const procs = await startWorkloads(info.host, workloads);
    this.running.set(key, { pod: info, procs });
    const cur = this.d.store.get('pods', pod.metadata.namespace, pod.metadata.name!);
    if (!cur) return;
    const now = new Date().toISOString();
    this.d.store.update('pods', {
      ...cur,
      metadata: { ...cur.metadata, annotations: { ...((cur.metadata.annotations as Record<string, string>) ?? {}), [NETNS_ANNOTATION]: info.host.netns, [CGROUP_ANNOTATION]: info.host.cgroup } },
      spec: { ...(cur.spec as object), nodeName: info.node.name },
    });
    const updated = this.d.store.get('pods', pod.metadata.namespace, pod.metadata.name!)!;
    this.d.store.update('pods', {
      ...updated,
      status: { phase: 'Running', hostIP: info.node.ip, podIP: info.ip, podIPs: [{ ip: info.ip }], startTime: now, conditions: [{ type: 'Ready', status: 'True', lastTransitionTime: now }, { type: 'ContainersReady', status: 'True' }] },
    }, { status: true });
    this.d.log.info({ pod: key, node: info.node.name, ip: info.ip }, 'pod running');
  }

  private async stop(key: string): Promise<void> {
    const r = this.running.get(key);
    if (!r) return;
    this.running.delete(key);
    await this.d.net.removePod(r.pod.name);
    this.d.log.info({ pod: key }, 'pod removed');
  }

  private async reconcile(): Promise<void> {
    const pods = new Map(this.d.store.list('pods').map((p) => [podKey(p), p]));
    for (const key of [...this.running.keys()]) if (!pods.has(key)) await this.stop(key);
    for (const [key, pod] of pods) {
      const r = this.running.get(key);
      if (!r) {
        if (!pod.metadata.deletionTimestamp) await this.start(pod);
        continue;
      }
      if (pod.metadata.deletionTimestamp) {
        r.terminatingSince ??= Date.now();
        const grace = ((pod.spec as PodSpec).terminationGracePeriodSeconds ?? DEFAULT_GRACE_SECONDS) * 1000;
        if (Date.now() - r.terminatingSince >= grace) {
          this.d.store.delete('pods', pod.metadata.namespace, pod.metadata.name!);
          await this.stop(key);
        } else {
          setTimeout(() => this.kick(), grace - (Date.now() - r.terminatingSince) + 10).unref();
        }
      }
    }
  }

  podInfo(namespace: string, name: string): PodInfo | undefined {
    return this.running.get(`${namespace}/${name}`)?.pod;
  }

  async close(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    await this.busy;
  }
}

/** Set or clear a pod's Ready condition (what a failing readiness probe does). */
export function setPodReady(store: Store, namespace: string, name: string, ready: boolean): void {
  const p = store.get('pods', namespace, name);
  if (!p) throw new Error(`pod ${namespace}/${name} not found`);
  const status = (p.status ?? {}) as { conditions?: Condition[] };
  const conditions = (status.conditions ?? []).filter((c) => c.type !== 'Ready');
  conditions.push({ type: 'Ready', status: ready ? 'True' : 'False' });
  store.update('pods', { ...p, status: { ...status, conditions } }, { status: true });
}

/** Start graceful termination: the pod keeps serving, marked terminating, then goes. */
export function terminatePod(store: Store, namespace: string, name: string): void {
  const p = store.get('pods', namespace, name);
  if (!p) throw new Error(`pod ${namespace}/${name} not found`);
  store.update('pods', { ...p, metadata: { ...p.metadata, deletionTimestamp: new Date().toISOString(), resourceVersion: undefined } });
}

type DeploymentSpec = { replicas?: number; selector?: { matchLabels?: Record<string, string> }; template?: { metadata?: { labels?: Record<string, string> }; spec?: PodSpec } };

/** Keep each Deployment's pod count at its replicas. */
export function reconcileDeployments(store: Store): void {
  for (const d of store.list('deployments')) {
    const spec = d.spec as DeploymentSpec;
    const want = spec.replicas ?? 1;
    const template = spec.template ?? {};
    const hash = createHash('sha1').update(JSON.stringify(template)).digest('hex').slice(0, 8);
    const mine = store.list('pods', d.metadata.namespace).filter((p) => (p.metadata as { ownerReferences?: { name: string }[] }).ownerReferences?.some((o) => o.name === d.metadata.name));
    const live = mine.filter((p) => !p.metadata.deletionTimestamp);
    // A changed template replaces old pods (all at once: the sandbox has no surge policy).
    for (const p of live) if (p.metadata.labels?.['pod-template-hash'] !== hash) terminatePod(store, p.metadata.namespace!, p.metadata.name!);
    const current = live.filter((p) => p.metadata.labels?.['pod-template-hash'] === hash);
    for (let i = current.length; i < want; i++) {
      store.create('pods', {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: {
          name: `${d.metadata.name}-${hash.slice(0, 5)}-${randomBytes(3).toString('hex').slice(0, 5)}`,
          namespace: d.metadata.namespace,
          labels: { ...(template.metadata?.labels ?? {}), 'pod-template-hash': hash },
          ownerReferences: [{ apiVersion: 'apps/v1', kind: 'Deployment', name: d.metadata.name, uid: d.metadata.uid }],
        },
        spec: structuredClone(template.spec ?? {}),
      });
    }
    for (const p of current.slice(want)) terminatePod(store, p.metadata.namespace!, p.metadata.name!);
  }
  // Pods of deleted Deployments go too.
  const deployments = new Set(store.list('deployments').map((d) => `${d.metadata.namespace}/${d.metadata.name}`));
  for (const p of store.list('pods')) {
    const owner = (p.metadata as { ownerReferences?: { kind: string; name: string }[] }).ownerReferences?.find((o) => o.kind === 'Deployment');
    if (owner && !deployments.has(`${p.metadata.namespace}/${owner.name}`) && !p.metadata.deletionTimestamp) terminatePod(store, p.metadata.namespace!, p.metadata.name!);
  }
}
