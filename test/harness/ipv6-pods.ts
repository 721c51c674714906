// IPv6 for the sandbox's pods and links in the dual-stack tests: the sandbox's network is
// IPv4; these give pods an IPv6 address routed by their node (as a dual-stack CNI would),
// an HTTP server on it, IPv6 EndpointSlices, and IPv6 on the client and node links.
import type { V1EndpointSlice } from '@kubernetes/client-node';
import type { Host } from '../../src/sandbox/netns/testbed.js';
import type { PodInfo } from '../../src/sandbox/network.js';
import { sliceFor } from './agent-cluster.js';

/** A pod's IPv6 address: fd00:10:244:N::X for its IPv4 10.244.N.X. */
export const ip6 = (pod: PodInfo): string => {
  const [, , n, x] = pod.ip.split('.');
  return `fd00:10:244:${n}::${x}`;
};
const gateway6 = (pod: PodInfo): string => `fd00:10:244:${pod.ip.split('.')[2]}::1`;

/** An HTTP server on the pod's IPv6 address that says who it is and who asked. */
export const WHOAMI6 = `
const [addr, name, port] = JSON.parse(process.argv[1]);
require('node:http').createServer((q, s) => s.end('Hostname: ' + name + '\\nRemoteAddr: ' + q.socket.remoteAddress + '\\n')).listen(port ?? 8080, addr);`;

/** An IPv6 address for a pod, routed by its node. */
export async function addIPv6(pod: PodInfo): Promise<void> {
  const node = pod.node.host;
  const nodeSide = `v${pod.name}`.slice(0, 15);
  await node.ip('-6', 'addr', 'replace', `${gateway6(pod)}/128`, 'dev', nodeSide, 'nodad');
  await node.ip('-6', 'route', 'replace', `${ip6(pod)}/128`, 'dev', nodeSide);
  await pod.host.ip('-6', 'addr', 'add', `${ip6(pod)}/128`, 'dev', 'eth0', 'nodad');
  await pod.host.ip('-6', 'route', 'replace', gateway6(pod), 'dev', 'eth0');
  await pod.host.ip('-6', 'route', 'replace', 'default', 'via', gateway6(pod), 'dev', 'eth0');
}

export function slice6(service: string, pods: PodInfo[], port = 8080): V1EndpointSlice {
  const s = sliceFor(service, pods.map((pod) => ({ pod })), [{ name: 'http', port }], `${service}-v6`);
  return { ...s, addressType: 'IPv6', endpoints: s.endpoints.map((e, i) => ({ ...e, addresses: [ip6(pods[i]!)] })) };
}

export const macOf = async (h: Host, dev: string): Promise<string> => (JSON.parse(await h.ip('-j', 'link', 'show', dev)) as Array<{ address: string }>)[0]!.address;

/** The node link's IPv6 address of node N (fd00:31::/64 on the sandbox's node network). */
export const nodeLink6 = (index: number): string => `fd00:31::${20 + index}`;

/** IPv6 on the client network (fd00:10::/64: the client fd00:10::2, the router ::1) and the
 * node network (fd00:31::/64: the router ::1, node N ::2N), with permanent neighbours (no
 * waiting for discovery), the client's default route through the router and each node's
 * route back to the clients. */
export async function linkIPv6(net: { router: Host; client: Host; nodes: Host[] }): Promise<void> {
  const { router, client } = net;
  await router.execOk(['sysctl', '-qw', 'net.ipv6.conf.all.forwarding=1']);
  await client.ip('-6', 'addr', 'add', 'fd00:10::2/64', 'dev', 'eth0', 'nodad');
  await router.ip('-6', 'addr', 'add', 'fd00:10::1/64', 'dev', 'clients', 'nodad');
  await router.ip('-6', 'addr', 'add', 'fd00:31::1/64', 'dev', 'nodes', 'nodad');
  await client.ip('-6', 'neigh', 'replace', 'fd00:10::1', 'lladdr', await macOf(router, 'clients'), 'dev', 'eth0', 'nud', 'permanent');
  await router.ip('-6', 'neigh', 'replace', 'fd00:10::2', 'lladdr', await macOf(client, 'eth0'), 'dev', 'clients', 'nud', 'permanent');
  await client.ip('-6', 'route', 'replace', 'default', 'via', 'fd00:10::1');
  for (const [i, node] of net.nodes.entries()) {
    await node.ip('-6', 'addr', 'add', `${nodeLink6(i + 1)}/64`, 'dev', 'eth0', 'nodad');
    await router.ip('-6', 'neigh', 'replace', nodeLink6(i + 1), 'lladdr', await macOf(node, 'eth0'), 'dev', 'nodes', 'nud', 'permanent');
    await node.ip('-6', 'neigh', 'replace', 'fd00:31::1', 'lladdr', await macOf(router, 'nodes'), 'dev', 'eth0', 'nud', 'permanent');
    await node.ip('-6', 'route', 'replace', 'fd00:10::/64', 'via', 'fd00:31::1');
    for (const [j, other] of net.nodes.entries()) {
      if (j !== i) await node.ip('-6', 'neigh', 'replace', nodeLink6(j + 1), 'lladdr', await macOf(other, 'eth0'), 'dev', 'eth0', 'nud', 'permanent');
    }
  }
}
