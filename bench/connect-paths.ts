// The paths connect-gap.ts and connect-trace.ts compare, on a 1-node testbed with the
// backend on the node; each differs from another in one thing:
//   direct         the pod's address (the node forwards; ferry's programs pass the packets)
//   node socket    a listener on the node's own address (local delivery, nothing forwarded)
//   ferry          the NodePort through ferry (tc DNAT to the pod, reverse NAT on the reply)
//   iptables DNAT  the NodePort through one PREROUTING DNAT rule (no masquerade)
//   kube-proxy     the NodePort through kube-proxy-shaped rules (DNAT and masquerade)
import type { MiniCluster } from '../src/sandbox/mini-cluster.js';
import { WORKLOADS } from '../src/sandbox/mini-cluster.js';
import { startWorkloads } from '../src/sandbox/workloads/spawn.js';
import { TARGET_IP, iptablesRules } from './kube-proxy-rules.js';

export interface ConnectPath {
  path: string;
  to: string;
}

/** A pod behind a NodePort on the testbed's one node, and every path to it (`nodeSocket`: with the node's own listener). */
export async function setUpConnectPaths(c: MiniCluster, o: { nodeSocket: boolean }): Promise<ConnectPath[]> {
  const web = await c.pod('web-1', 1, { whoami: 8080 });
  const node = c.nodes[0]!;
  if (o.nodeSocket) await startWorkloads(node.host, [{ kind: 'whoami', port: 9090, name: 'node' }]);
  c.apply([{ clusterIP: TARGET_IP, ports: [{ port: 80, proto: 'TCP', targetPort: 8080, nodePort: 30080 }], endpoints: [web] }]);
  await node.host.execOk(['iptables', '-t', 'nat', '-A', 'PREROUTING', '-d', `${node.ip}/32`, '-p', 'tcp', '--dport', '30081', '-j', 'DNAT', '--to-destination', `${web.ip}:8080`]);
  await node.host.execOk(['iptables-restore', '--noflush'], { input: iptablesRules(0, web.ip, 30082) });
  return [
    { path: 'direct', to: `${web.ip}:8080` },
    ...(o.nodeSocket ? [{ path: 'node socket', to: `${node.ip}:9090` }] : []),
    { path: 'ferry NodePort', to: `${node.ip}:30080` },
    { path: 'iptables DNAT', to: `${node.ip}:30081` },
    { path: 'kube-proxy NodePort', to: `${node.ip}:30082` },
  ];
}

/** `count` connects from the client, each closed with a reset; the workload's JSON report. */
export function connectRun(c: MiniCluster, to: string, count: number): Promise<string> {
  return c.client.execOk([process.execPath, WORKLOADS, 'connect-latency', '--to', to, '--count', String(count), '--reset'], { timeoutMs: 600_000 });
}
