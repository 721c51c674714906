// A node whose address lives on a bridge with its NIC as a port (a bare-metal host that
// bridges its NIC for VMs): the agent chooses the bridge, not its port, takes the programs a
// previous agent left on the port off (its frames are the bridge's), runs generic XDP on
// the bridge (no driver XDP; named in xdpDevices), and serves NodePorts through it: to a pod
// on the node, to one on another node in SNAT (replies back through the bridge) and in DSR,
// over TCP and UDP, and a 4 MB transfer each way; and it answers ARP for a LoadBalancer
// address on the bridge (an L2 policy naming br0).
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { SandboxApi } from '../../src/sandbox/api-client.js';
import { Sandbox } from '../../src/sandbox/sandbox.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { createObject, datapathPackets } from '../harness/sandbox-calls.js';
import { eventually } from '../harness/wait.js';
import { TC_KIND } from '../harness/tc-programs.js';

let sb: Sandbox;
let api: SandboxApi;
let startLog = '';
const WORKLOADS = join(REPO_ROOT, 'dist/sandbox/workloads/main.js');
const NODE1 = '10.0.30.21';

const put = (kind: string, obj: Record<string, unknown>) => createObject(sb, api, kind, obj);
const get = (url: string, maxTime = 3) => sb.net.client.exec(['curl', '-sS', '--max-time', String(maxTime), url], { timeoutMs: (maxTime + 5) * 1000 });
const service = (name: string, app: string, nodePort: number, extra: Record<string, unknown> = {}, annotations: Record<string, string> = {}) => ({
  metadata: { name, namespace: 'default', annotations },
  spec: { type: 'NodePort', selector: { app }, ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort }, { name: 'dns', port: 53, protocol: 'UDP', targetPort: 5353, nodePort: nodePort + 1 }], ...extra },
});
const pod = (name: string, node: string) => ({ metadata: { name, namespace: 'default', labels: { app: name } }, spec: { nodeName: node, containers: [{ name: 'w', image: 'whoami', ports: [{ containerPort: 8080 }, { containerPort: 5353, protocol: 'UDP' }] }] } });

beforeAll(async () => {
  sb = await Sandbox.up({ name: 'brn', nodes: 2, mode: 'snat', announce: 'l2', acceleration: 'best-effort', log: pino({ level: 'silent' }), agentEnv: { FERRY_MIN_SYNC_PERIOD_MS: '20' } });
  api = new SandboxApi(sb.api.alsoUrl!);
  await put('Pod', pod('local', 'node-1'));
  await put('Pod', pod('remote', 'node-2'));
  await put('Service', service('local', 'local', 30600, { externalTrafficPolicy: 'Local' }));
  await put('Service', service('remote', 'remote', 30610));
  await put('Service', service('remote-dsr', 'remote', 30620, {}, { 'ferry.dev/forwarding': 'dsr' }));
  // Announced by ARP from node-1 alone (its only endpoint is there), on br0 by a policy of its own.
  await put('Service', { ...service('local-lb', 'local', 30630, { type: 'LoadBalancer', externalTrafficPolicy: 'Local' }) });
  const policy = await api.call('POST', api.url('L2AnnouncementPolicy', ''), { apiVersion: 'ferry.dev/v1alpha1', kind: 'L2AnnouncementPolicy', metadata: { name: 'bridge' }, spec: { interfaces: ['br0'] } });
  if (policy.status >= 300) throw new Error(String(policy.json.message));
  // node-1 as a bridging host (its address on br0 over eth0), then its agent started again.
  const node1 = sb.net.node(1);
  await sb.stopAgent(node1);
  await sb.net.bridgeNode(node1);
  // br0 has no driver XDP: named in xdpDevices, best-effort runs generic XDP on it (unnamed, none).
  startLog = (await sb.startAgent(node1, 60_000, { env: { FERRY_XDP_DEVICES: 'br0' } })).output();
  await eventually(() => get(`http://${NODE1}:30610/`), (r) => r.code === 0, 30_000);
}, 180_000);
afterAll(async () => {
  await sb?.down();
}, 60_000);

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'a node whose address is on a bridge over its NIC', () => {
  it('the agent serves the bridge, not its port: the previous agent\'s programs on the port are taken off, XDP is generic on the bridge', async () => {
    expect(startLog).toMatch(/"devices":\["br0"\]/);
    const portXdp = sb.net.nodeSwitch.kind === 'bridge' ? 'native' : 'generic'; // a macvlan switch's member has no driver XDP
    expect(startLog).toContain(`"detachedElsewhere":["${TC_KIND} ingress eth0","${TC_KIND} egress eth0","xdp/${portXdp} eth0"]`);
    const h = sb.net.node(1).host;
    const { xdp } = JSON.parse(await h.execOk(['curl', '-sS', 'http://127.0.0.1:10249/status'])) as { xdp: Record<string, { mode: string; redirectTarget: boolean }> };
    expect(Object.fromEntries(Object.entries(xdp).map(([d, x]) => [d, [x.mode, x.redirectTarget]]))).toEqual({ br0: ['generic', false] });
    expect(await h.execOk(['ip', '-d', 'link', 'show', 'eth0'])).not.toMatch(/prog\/xdp/);
  });

  it('TCP: a NodePort to the node\'s own pod, and to another node\'s pod in SNAT (replies back through the bridge) and in DSR', async () => {
    const h = sb.net.node(1).host;
    const count = () => Promise.all(['fwd_local', 'fwd_remote', 'reply_remote', 'fwd_dsr'].map((path) => datapathPackets(h, path)));
    const before = await count();
    const l = await get(`http://${NODE1}:30600/`);
    expect(l.stdout).toMatch(/Hostname: local/);
    expect(l.stdout).toMatch(/RemoteAddr: 10\.0\.10\.2:/); // ETP=Local keeps the client's address
    expect((await get(`http://${NODE1}:30610/`)).stdout).toMatch(new RegExp(`Hostname: remote[\\s\\S]*RemoteAddr: ${NODE1.replace(/\./g, '\\.')}:`));
    const d = await eventually(() => get(`http://${NODE1}:30620/`), (x) => x.code === 0);
    expect(d.stdout).toMatch(/Hostname: remote[\s\S]*RemoteAddr: 10\.0\.10\.2:/);
    const after = await count();
    expect(after.map((n, i) => n > before[i]!)).toEqual([true, true, true, true]);
  });

  it('UDP: answers come from the NodePort, for the node\'s pod and another node\'s', async () => {
    for (const port of [30601, 30611]) {
      const out = JSON.parse(await sb.net.client.execOk([process.execPath, WORKLOADS, 'udp', '--to', `${NODE1}:${port}`, '--size', '200', '--count', '2'], { timeoutMs: 15_000 })) as { replies: Array<{ ok: boolean; from: string; bytes: number }> };
      expect(out.replies.map((x) => [x.ok, x.from, x.bytes])).toEqual([[true, `${NODE1}:${port}`, 200], [true, `${NODE1}:${port}`, 200]]);
    }
  });

  it('carries 4 MB each way through the bridge to another node\'s pod (generic XDP on the bridge)', async () => {
    const down = await sb.net.client.execOk(['curl', '-sS', '--max-time', '20', '-o', '/dev/null', '-w', '%{size_download}', `http://${NODE1}:30610/bytes?n=4194304`], { timeoutMs: 30_000 });
    expect(Number(down)).toBe(4194304);
    const up = await sb.net.client.execOk(['sh', '-c', `head -c 4194304 /dev/zero | curl -sS --max-time 20 --data-binary @- http://${NODE1}:30610/`], { timeoutMs: 30_000 });
    expect(up).toMatch(/Received: 4194304/);
  });

  it('L2: the bridge answers ARP for a LoadBalancer address (a policy naming br0), and the address serves', async () => {
    const ip = await eventually(async () => {
      const r = await api.call('GET', api.url('Service', 'default', 'local-lb'));
      return ((r.json.status as { loadBalancer?: { ingress?: Array<{ ip?: string }> } })?.loadBalancer?.ingress ?? [])[0]?.ip ?? '';
    }, (x) => x !== '', 30_000);
    const h = sb.net.node(1).host;
    const [br0] = JSON.parse(await h.execOk(['ip', '-j', 'link', 'show', 'br0'])) as Array<{ address: string }>;
    const replies = await datapathPackets(h, 'arp_reply');
    const answers = await eventually(async () => {
      const r = await sb.net.router.exec(['arping', '-c', '2', '-w', '3', '-I', 'nodes', ip], { timeoutMs: 10_000 });
      return [...new Set([...r.stdout.matchAll(/reply from \S+ \[([0-9A-F:]+)\]/gi)].map((m) => m[1]!.toLowerCase()))];
    }, (macs) => macs.length > 0, 30_000);
    expect(answers).toEqual([br0!.address]);
    expect(await datapathPackets(h, 'arp_reply')).toBeGreaterThan(replies); // ferry's responder, not the kernel's (the address is on no device)
    const r = await eventually(() => get(`http://${ip}/`), (x) => x.code === 0);
    expect(r.stdout).toMatch(/Hostname: local[\s\S]*RemoteAddr: 10\.0\.10\.2:/);
  });
});
