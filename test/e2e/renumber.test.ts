// A node renumbered while its agent runs (a new DHCP lease, a re-addressed NIC): the agent
// follows its Node's InternalIP (snat4_address, src/datapath/snat-address.ts), so flows
// through its NodePort to a backend on another node leave from the new address without a
// restart, as kube-proxy's MASQUERADE takes the address the node has now.
import type { V1Service } from '@kubernetes/client-node';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Sandbox } from '../../src/sandbox/sandbox.js';
import { agentCluster, applyObject, podWith, sliceFor } from '../harness/agent-cluster.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { eventually } from '../harness/wait.js';

const NODE_PORT = 30091;
const RENUMBERED = '10.0.30.121';
let c: Sandbox;

const ferry = (...args: string[]) => spawnSync(process.execPath, [join(REPO_ROOT, 'bin/ferry.js'), ...args], { encoding: 'utf8' });

const web: V1Service = {
  metadata: { name: 'web', namespace: 'default' },
  spec: { type: 'NodePort', clusterIP: '10.96.0.91', clusterIPs: ['10.96.0.91'], ipFamilies: ['IPv4'], externalTrafficPolicy: 'Cluster', ports: [{ name: 'http', port: 80, targetPort: 8080 as never, nodePort: NODE_PORT, protocol: 'TCP' }] },
};

beforeAll(async () => {
  c = await agentCluster({ nodes: 2, name: 'renumber' });
  const pod = await podWith(c, 'web-2', 2, { whoami: 8080 });
  applyObject(c, 'services', web);
  applyObject(c, 'endpointslices', sliceFor('web', [{ pod }], [{ name: 'http', port: 8080 }]));
});
afterAll(async () => {
  await c?.down();
});

async function ask(url: string): Promise<string> {
  const r = await c.net.client.exec(['curl', '-sS', '--max-time', '3', url], { timeoutMs: 8000 });
  return r.code === 0 ? r.stdout : `error ${r.code}: ${r.stderr}`;
}

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'a node renumbered while its agent runs', () => {
  it("flows to a backend on another node leave from the node's new address, with no restart", async () => {
    const n1 = c.net.node(1);
    const pins = c.pinDir(n1);
    const before = await eventually(() => ask(`http://${n1.ip}:${NODE_PORT}/`), (o) => o.includes('Hostname: web-2'));
    expect(before).toContain(`RemoteAddr: ${n1.ip}:`);
    expect(ferry('status', '--pin-dir', pins).stdout).toContain(`snat4:     flows to other nodes' backends leave from ${n1.ip}\n`);

    // The node gets its new address, and its Node object says so (as the kubelet would).
    await n1.host.ip('address', 'add', `${RENUMBERED}/24`, 'dev', 'eth0');
    const obj = c.store.get('nodes', undefined, n1.name)!;
    const status = obj.status as { addresses: Array<{ type: string; address: string }> };
    c.store.update('nodes', { ...obj, status: { ...status, addresses: status.addresses.map((a) => (a.type === 'InternalIP' ? { ...a, address: RENUMBERED } : a)) } }, { status: true });

    const after = await eventually(() => ask(`http://${RENUMBERED}:${NODE_PORT}/`), (o) => o.includes(`RemoteAddr: ${RENUMBERED}:`));
    expect(after).toContain('Hostname: web-2');
    expect(after).toContain(`RemoteAddr: ${RENUMBERED}:`);
    expect(JSON.parse(ferry('map', 'dump', 'snat4_address', '--pin-dir', pins, '-o', 'json').stdout)).toEqual([{ id: 0, address: RENUMBERED }]);
    expect(ferry('status', '--pin-dir', pins).stdout).toContain(`snat4:     flows to other nodes' backends leave from ${RENUMBERED}\n`);
    // Many connections, each its own flow and SNAT binding: none lost.
    const results = await Promise.all(Array.from({ length: 20 }, () => ask(`http://${RENUMBERED}:${NODE_PORT}/`)));
    expect(results.filter((r) => !r.includes(`RemoteAddr: ${RENUMBERED}:`))).toEqual([]);
  });
});
