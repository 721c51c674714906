// Service traffic over a VXLAN overlay made as Flannel's vxlan backend makes it (Talos's
// default CNI; src/sandbox/network.ts): pods of another node are routed through the tunnel
// `flannel.1`, whose MTU is 50 bytes smaller than the node network's. The agents serve
// `eth0` and the tunnel (`devices`, as the sandbox sets them over VXLAN), so that an SNAT flow routed through the tunnel leaves
// from the tunnel's address and its replies come back through it, and a DSR flow's option
// is read where the tunnel hands the packet to the backend's node. Left out of `devices`,
// the tunnel lends no address: the flow leaves from the node's, which a backend node with
// strict reverse-path filtering drops (as the README says). The agents run XDP best-effort:
// native on the NIC, none on the tunnel (src/agent/xdp-choice.ts: XDP cannot send by it,
// and generic XDP there copies packets short of headroom); named in xdpDevices, the tunnel runs generic
// XDP, and an agent's restart attaches XDP beneath the tunnel, which carries the previous
// agent's (the kernel refuses that while a device over it has XDP: src/ebpf/link-xdp.ts).
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { SandboxApi } from '../../src/sandbox/api-client.js';
import { TUNNEL } from '../../src/sandbox/network.js';
import { Sandbox } from '../../src/sandbox/sandbox.js';
import type { Host } from '../../src/sandbox/netns/testbed.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { createObject, datapathPackets } from '../harness/sandbox-calls.js';
import { eventually } from '../harness/wait.js';
import { TC_KIND } from '../harness/tc-programs.js';

let sb: Sandbox;
let api: SandboxApi;
const WORKLOADS = join(REPO_ROOT, 'dist/sandbox/workloads/main.js');
const DEVICES = `eth0,${TUNNEL.device}`;

const put = (kind: string, obj: Record<string, unknown>) => createObject(sb, api, kind, obj);
const stat = datapathPackets;
const get = (url: string, maxTime = 3) => sb.net.client.exec(['curl', '-sS', '--max-time', String(maxTime), url], { timeoutMs: (maxTime + 5) * 1000 });
/** A node's XDP per device as its agent's /status says: mode, redirect target, reason. */
const xdpStates = async (node: Host): Promise<Record<string, [string, boolean, string | undefined]>> => {
  const { xdp } = JSON.parse(await node.execOk(['curl', '-sS', 'http://127.0.0.1:10249/status'])) as { xdp: Record<string, { mode: string; redirectTarget: boolean; reason?: string }> };
  return Object.fromEntries(Object.entries(xdp).map(([d, x]) => [d, [x.mode, x.redirectTarget, x.reason]]));
};
/** A bridge switch's members are veths (driver XDP); a macvlan switch's have none. */
const bridged = () => sb.net.nodeSwitch.kind === 'bridge';
/** eth0's XDP state as /status gives it: native and a redirect target on a bridge switch, generic on macvlan. */
const nic = () => (bridged() ? ['native', true, undefined] : ['generic', false, 'generic XDP']);
/** Strict reverse-path filtering on a node (every device: the kernel takes the highest of `all` and the device's); returns the undo. */
const strictRpFilter = async (node: Host): Promise<() => Promise<void>> => {
  const keys = ['all', TUNNEL.device, 'eth0'].map((dev) => `net.ipv4.conf.${dev.replace('.', '/')}.rp_filter`);
  const before = await Promise.all(keys.map((k) => node.execOk(['sysctl', '-n', k])));
  for (const k of keys) await node.execOk(['sysctl', '-qw', `${k}=1`]);
  return async () => {
    for (const [i, k] of keys.entries()) await node.execOk(['sysctl', '-qw', `${k}=${before[i]!.trim()}`]);
  };
};

beforeAll(async () => {
  sb = await Sandbox.up({ name: 'ovl', nodes: 2, mode: 'snat', announce: 'routes', podNetwork: 'vxlan', acceleration: 'best-effort', log: pino({ level: 'silent' }), agentEnv: { FERRY_MIN_SYNC_PERIOD_MS: '20' } });
  api = new SandboxApi(sb.api.alsoUrl!);
  await put('Pod', { metadata: { name: 'web', namespace: 'default', labels: { app: 'web' } }, spec: { nodeName: 'node-2', containers: [{ name: 'w', image: 'whoami', ports: [{ name: 'http', containerPort: 8080 }, { name: 'dns', containerPort: 5353, protocol: 'UDP' }] }] } });
  await put('Service', { metadata: { name: 'web', namespace: 'default' }, spec: { type: 'NodePort', selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort: 30500 }, { name: 'dns', port: 53, protocol: 'UDP', targetPort: 5353, nodePort: 30501 }] } });
  await put('Service', { metadata: { name: 'web-dsr', namespace: 'default', annotations: { 'ferry.dev/forwarding': 'dsr' } }, spec: { type: 'NodePort', selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort: 30502 }] } });
  await eventually(() => get('http://10.0.30.21:30500/'), (r) => r.code === 0, 30_000);
}, 180_000);
afterAll(async () => {
  await sb?.down();
}, 60_000);

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'Services over a VXLAN overlay (Flannel\'s way)', () => {
  it('the overlay is Flannel\'s: the route to another node\'s pods leaves by the tunnel, whose MTU is the node network\'s less 50; XDP on the NIC only', async () => {
    const node1 = sb.net.node(1).host;
    expect(await node1.execOk(['ip', 'route', 'get', '10.244.2.11'])).toMatch(new RegExp(`via 10\\.244\\.2\\.0 dev ${TUNNEL.device.replace('.', '\\.')}`));
    const [tunnel] = JSON.parse(await node1.execOk(['ip', '-j', 'link', 'show', TUNNEL.device])) as Array<{ mtu: number }>;
    expect(tunnel!.mtu).toBe(1450);
    // best-effort: XDP native on the NIC; the tunnel (no driver XDP) is left to tc.
    // (On a macvlan switch the sandbox names eth0, which has no driver XDP, in xdpDevices: the tunnel is then off as not named.)
    const tunnelOff = bridged() ? /^a vxlan tunnel: XDP cannot send frames out of it/ : /^not named in xdpDevices$/;
    expect(await xdpStates(node1)).toEqual({ eth0: nic(), [TUNNEL.device]: ['off', false, expect.stringMatching(tunnelOff)] });
    expect(await node1.execOk(['ip', '-d', 'link', 'show', TUNNEL.device])).not.toMatch(/prog\/xdp/);
  });

  it('named in xdpDevices, the tunnel runs generic XDP; a restart attaches beneath it, and the default takes it off again', async () => {
    const node1 = sb.net.node(1);
    const restart = async (env: Record<string, string>) => {
      await sb.stopAgent(node1);
      return sb.startAgent(node1, 60_000, { env });
    };
    try {
      await restart({ FERRY_XDP_DEVICES: DEVICES });
      expect(await xdpStates(node1.host)).toEqual({ eth0: nic(), [TUNNEL.device]: ['generic', false, 'generic XDP'] });
      // Again: the tunnel carries the previous agent's XDP while eth0 gets the new one's.
      await restart({ FERRY_XDP_DEVICES: DEVICES });
      expect(await xdpStates(node1.host)).toEqual({ eth0: nic(), [TUNNEL.device]: ['generic', false, 'generic XDP'] });
      expect((await get('http://10.0.30.21:30500/')).stdout).toMatch(/RemoteAddr: 10\.244\.1\.0:/);
      // An entry that takes none of the agent's devices is refused at the start.
      await sb.stopAgent(node1);
      await expect(sb.startAgent(node1, 10_000, { env: { FERRY_XDP_DEVICES: 'eth9' } })).rejects.toThrow(/xdpDevices entry "eth9" takes none of ferry's devices \(eth0, flannel\.1\)/);
    } finally {
      await restart({});
    }
    expect((await xdpStates(node1.host))[TUNNEL.device]![0]).toBe('off');
    expect(await node1.host.execOk(['ip', '-d', 'link', 'show', TUNNEL.device])).not.toMatch(/prog\/xdp/);
  });

  it('SNAT: a NodePort flow to a pod of another node leaves through the tunnel from its address, and its replies come back through it', async () => {
    const node1 = sb.net.node(1).host;
    const replies = await stat(node1, 'reply_remote');
    const r = await get('http://10.0.30.21:30500/');
    expect(r.stdout).toMatch(/Hostname: web/);
    expect(r.stdout).toMatch(/RemoteAddr: 10\.244\.1\.0:/); // the tunnel's address, not the node's
    expect(await stat(node1, 'reply_remote')).toBeGreaterThan(replies);
    // The backend's node may filter by reverse path strictly: the tunnel's address routes back through the tunnel.
    const undo = await strictRpFilter(sb.net.node(2).host);
    try {
      expect((await get('http://10.0.30.21:30500/')).stdout).toMatch(/RemoteAddr: 10\.244\.1\.0:/);
    } finally {
      await undo();
    }
  });

  it('UDP through the tunnel: answers come from the NodePort; a datagram too big for the tunnel gets fragmentation-needed, and then goes as fragments', async () => {
    const send = async (size: number) =>
      (JSON.parse(await sb.net.client.execOk([process.execPath, WORKLOADS, 'udp', '--to', '10.0.30.21:30501', '--size', String(size), '--count', '2'], { timeoutMs: 15_000 })) as { replies: Array<{ ok: boolean; from: string; bytes: number }> }).replies.map((x) => [x.ok, x.from, x.bytes]);
    const ok = (size: number) => [true, '10.0.30.21:30501', size];
    expect(await send(200)).toEqual([ok(200), ok(200)]);
    const tooBig = await stat(sb.net.node(1).host, 'icmp_frag_needed');
    // 1500 bytes on the node network, 1450 in the tunnel: the first is answered by ferry on
    // node-1 as a router answers it; the client's kernel then fragments the next, whose
    // fragments follow the first through SNAT, and the pod's answer (fragmented by the pod's
    // own MTU) comes back through the tunnel as fragments too.
    expect(await send(1472)).toEqual([[false, '', 0], ok(1472)]);
    expect(await stat(sb.net.node(1).host, 'icmp_frag_needed')).toBeGreaterThan(tooBig);
  });

  it('carries 4 MB each way: TCP segments fit the tunnel (the pod\'s MTU sets the MSS it announces)', async () => {
    const down = await sb.net.client.execOk(['curl', '-sS', '--max-time', '20', '-o', '/dev/null', '-w', '%{size_download}', 'http://10.0.30.21:30500/bytes?n=4194304'], { timeoutMs: 30_000 });
    expect(Number(down)).toBe(4194304);
    const up = await sb.net.client.execOk(['sh', '-c', 'head -c 4194304 /dev/zero | curl -sS --max-time 20 --data-binary @- http://10.0.30.21:30500/'], { timeoutMs: 30_000 });
    expect(up).toMatch(/Received: 4194304/);
  });

  it('DSR: the option crosses the tunnel, the backend\'s node reads it on the tunnel, and the pod answers the client itself', async () => {
    const [node1, node2] = [sb.net.node(1).host, sb.net.node(2).host];
    const [dsr, received, replies] = [await stat(node1, 'fwd_dsr'), await stat(node2, 'dsr_received'), await stat(node1, 'reply_remote')];
    const r = await eventually(() => get('http://10.0.30.21:30502/'), (x) => x.code === 0);
    expect(r.stdout).toMatch(/Hostname: web/);
    expect(r.stdout).toMatch(/RemoteAddr: 10\.0\.10\.2:/);
    expect(await stat(node1, 'fwd_dsr')).toBeGreaterThan(dsr);
    expect(await stat(node2, 'dsr_received')).toBeGreaterThan(received);
    expect(await stat(node1, 'reply_remote')).toBe(replies);
  });

  it('with the tunnel left out of devices, flows leave from the node\'s address: a backend node with strict rp_filter drops them', async () => {
    const node1 = sb.net.node(1);
    await sb.stopAgent(node1);
    const agent = await sb.startAgent(node1, 60_000, { devices: 'eth0' });
    try {
      // The previous agent's programs on the tunnel are taken off (stray-programs.ts).
      const dev = TUNNEL.device;
      expect(agent.output()).toContain(`"detachedElsewhere":${JSON.stringify([`${TC_KIND} ingress ${dev}`, `${TC_KIND} egress ${dev}`])}`);
      expect((await get('http://10.0.30.21:30500/')).stdout).toMatch(/RemoteAddr: 10\.0\.30\.21:/);
      const undo = await strictRpFilter(sb.net.node(2).host);
      try {
        expect((await get('http://10.0.30.21:30500/', 2)).code).not.toBe(0);
      } finally {
        await undo();
      }
    } finally {
      await sb.stopAgent(node1);
      await sb.startAgent(node1, 60_000, { devices: DEVICES });
    }
    expect((await eventually(() => get('http://10.0.30.21:30500/'), (x) => x.code === 0)).stdout).toMatch(/RemoteAddr: 10\.244\.1\.0:/);
  });
});
