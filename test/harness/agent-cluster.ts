// A cluster with real agents for the agent tests: a sandbox (network, test API server,
// one `ferry agent` per node) with pods placed by hand and Services and EndpointSlices
// written straight into the API's store (no selectors, so the sandbox's EndpointSlice
// controller leaves them alone).
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { pino } from 'pino';
import type { KObject } from '../../src/sandbox/apiserver/store.js';
import type { PodInfo } from '../../src/sandbox/network.js';
import { Sandbox } from '../../src/sandbox/sandbox.js';
import { startWorkloads, type Workload } from '../../src/sandbox/workloads/spawn.js';

export async function agentCluster(opts: { nodes: number; name?: string }): Promise<Sandbox> {
  return Sandbox.up({
    name: opts.name ?? 'agents',
    nodes: opts.nodes,
    mode: 'snat',
    log: pino({ level: 'silent' }),
    agentEnv: { FERRY_MIN_SYNC_PERIOD_MS: '50', FERRY_CT_GC_INTERVAL_SECONDS: '5' },
  });
}

export async function podWith(sb: Sandbox, name: string, nodeIndex: number, serve: { whoami?: number; udpEcho?: number } = {}): Promise<PodInfo> {
  const pod = await sb.net.addPod(name, nodeIndex);
  const w: Workload[] = [];
  if (serve.whoami) w.push({ kind: 'whoami', port: serve.whoami, name });
  if (serve.udpEcho) w.push({ kind: 'udp-echo', port: serve.udpEcho });
  await startWorkloads(pod.host, w);
  return pod;
}

/** Create or replace an object in the store, as a controller writing through the API would. */
export function applyObject(sb: Sandbox, resource: 'services' | 'endpointslices', obj: V1Service | V1EndpointSlice): void {
  const o = structuredClone(obj) as unknown as KObject;
  const have = sb.store.get(resource, o.metadata.namespace, o.metadata.name!);
  if (have) sb.store.update(resource, { ...o, metadata: { ...o.metadata, resourceVersion: undefined } });
  else sb.store.create(resource, o);
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
