// XDP acceleration end to end: a sandbox whose agents run with acceleration best-effort
// (native XDP on veth when the switch is a bridge, generic on macvlan). Traffic to remote
// backends must be decided by xdp_ingress itself (ferry monitor names the hook): NodePort
// with SNAT, with DSR, a LoadBalancer IP answered by ARP, UDP; a local backend is still
// tc's; `ferry status` says which mode is attached where.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Hook } from '../../src/datapath/layouts.js';
import type { XdpDeviceState } from '../../src/datapath/xdp-devices.js';
import { xdpLine } from '../../src/cli/inspect-commands.js';
import { Sandbox } from '../../src/sandbox/sandbox.js';
import type { NodeInfo } from '../../src/sandbox/network.js';
import { kubectlFor } from '../harness/kubectl.js';
import { whoamiPod } from '../harness/objects.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { eventually } from '../harness/wait.js';

const FERRY = join(REPO_ROOT, 'bin', 'ferry.js');
const UDP = join(REPO_ROOT, 'dist/sandbox/workloads/main.js');
let sb: Sandbox;
const kubectl = kubectlFor(() => sb.kubeconfig);
const node = (i: number): NodeInfo => sb.net.node(i);

const nodePort = (name: string, ports: string, annotations: Record<string, string> = {}) => `
apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: default, annotations: ${JSON.stringify(annotations)} }
spec: { type: NodePort, selector: { app: echo }, ports: ${ports} }
`;

interface Traced {
  hook: number;
  reasonName: string;
  daddr: string;
  dport: number;
}

/** The translations a node's datapath traces while `traffic` runs (ferry monitor). */
async function traced(n: NodeInfo, traffic: () => Promise<unknown>): Promise<Traced[]> {
  const pins = sb.pinDir(n);
  const child = spawn(process.execPath, [FERRY, 'monitor', '--type', 'trace', '--pin-dir', pins, '-o', 'json'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  try {
    const flags = async () => (JSON.parse((await sb.net.client.execOk([process.execPath, FERRY, 'map', 'dump', 'ferry_monitor', '--pin-dir', pins, '-o', 'json'])))[0] as { flags: number }).flags;
    await eventually(flags, (f) => f !== 0);
    await traffic();
    await new Promise((r) => setTimeout(r, 300));
  } finally {
    child.kill('SIGINT');
    await new Promise((r) => child.once('exit', r));
  }
  return out.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as Traced);
}

const curl = (url: string, max = 10) => sb.net.client.execOk(['curl', '-sS', '--max-time', String(max), url], { timeoutMs: (max + 5) * 1000 });
const download = async (url: string) => Number(await sb.net.client.execOk(['curl', '-sS', '--max-time', '20', '-o', '/dev/null', '-w', '%{size_download}', url], { timeoutMs: 30_000 }));
const remoteAddr = (body: string) => /RemoteAddr: ([\d.]+):/.exec(body)?.[1];

beforeAll(async () => {
  sb = await Sandbox.up({ name: 'xdp', nodes: 3, mode: 'snat', announce: 'l2', acceleration: 'best-effort', log: pino({ level: 'silent' }), agentEnv: { FERRY_MIN_SYNC_PERIOD_MS: '20' } });
  await kubectl.apply(`
apiVersion: v1
kind: Pod
metadata: { name: echo, namespace: default, labels: { app: echo } }
spec: { nodeName: node-1, containers: [{ name: w, image: whoami, ports: [{ name: http, containerPort: 8080 }, { name: dns, containerPort: 5353, protocol: UDP }] }] }
`);
  await kubectl.apply(nodePort('echo', '[{ name: http, port: 80, targetPort: 8080, nodePort: 30600 }, { name: dns, port: 53, protocol: UDP, targetPort: 5353, nodePort: 30602 }]'));
  await kubectl.apply(nodePort('echo-dsr', '[{ name: http, port: 80, targetPort: 8080, nodePort: 30601 }]', { 'ferry.dev/forwarding': 'dsr' }));
  await eventually(() => sb.net.client.exec(['curl', '-sS', '--max-time', '2', 'http://10.0.30.22:30600/']), (r) => r.code === 0);
}, 240_000);
afterAll(async () => {
  await sb?.down();
}, 60_000);

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'XDP acceleration in a sandbox', () => {
  it('ferry status shows XDP attached on every node, native on a bridge, generic on macvlan', async () => {
    const mode = sb.net.nodeSwitch.kind === 'bridge' ? 'native' : 'generic';
    for (const n of sb.net.nodes) {
      const s = JSON.parse(await sb.net.client.execOk([process.execPath, FERRY, 'status', '--pin-dir', sb.pinDir(n), '--netns', n.host.netns, '-o', 'json'])) as { links: Array<{ where: string; program: string }> };
      // Native on a veth whose peer (the switch port) runs XDP: frames may be redirected to it.
      const where = `xdp/${mode} eth0${mode === 'native' ? ' (redirect target)' : ''}`;
      expect(s.links.filter((l) => l.where.startsWith('xdp'))).toEqual([{ where, program: 'xdp_ingress', id: expect.any(Number), loaded: expect.any(String), ifindex: expect.any(Number) }]);
      // The agent's /status says the same, and why a device is no target.
      const { xdp } = JSON.parse(await n.host.execOk(['curl', '-sS', 'http://127.0.0.1:10249/status'])) as { xdp: Record<string, XdpDeviceState> };
      expect(xdp).toEqual({ eth0: mode === 'native' ? { mode, redirectTarget: true } : { mode, redirectTarget: false, reason: 'generic XDP' } });
      expect(xdpLine(xdp)).toBe(mode === 'native' ? 'eth0 native, a redirect target' : 'eth0 generic, not a redirect target (generic XDP): flows routed out of it from another device go through tc');
    }
  });

  it('NodePort, SNAT to a remote backend: XDP translates both ways; 4 MB arrive whole', async () => {
    const events = await traced(node(2), async () => {
      expect(remoteAddr(await curl('http://10.0.30.22:30600/'))).toBe(node(2).ip);
      expect(await download('http://10.0.30.22:30600/bytes?n=4194304')).toBe(4194304);
    });
    const byXdp = events.filter((e) => e.hook === Hook.HOOK_XDP);
    expect(byXdp.some((e) => e.reasonName === 'fwd_remote' && e.dport === 30600)).toBe(true);
    expect(byXdp.some((e) => e.reasonName === 'reply_remote')).toBe(true);
    // Once the next hop is known, nothing of these flows is left to tc.
    expect(events.filter((e) => e.hook === Hook.HOOK_TC_INGRESS && e.dport === 30600).length).toBeLessThanOrEqual(1);
  });

  it('NodePort, DSR: XDP adds the option, the pod sees the client, replies go straight back', async () => {
    const events = await traced(node(3), async () => {
      expect(remoteAddr(await curl('http://10.0.30.23:30601/'))).toBe('10.0.10.2');
      expect(await download('http://10.0.30.23:30601/bytes?n=4194304')).toBe(4194304);
    });
    expect(events.some((e) => e.hook === Hook.HOOK_XDP && e.reasonName === 'fwd_dsr' && e.dport === 30601)).toBe(true);
    expect(events.some((e) => e.reasonName === 'reply_remote')).toBe(false);
  });

  it('UDP NodePort to a remote backend through XDP', async () => {
    const events = await traced(node(2), async () => {
      const r = JSON.parse(await sb.net.client.execOk([process.execPath, UDP, 'udp', '--to', '10.0.30.22:30602', '--size', '200', '--count', '3'], { timeoutMs: 15_000 })) as { replies: Array<{ ok: boolean; from: string }> };
      expect(r.replies.map((x) => [x.ok, x.from])).toEqual(Array(3).fill([true, '10.0.30.22:30602']));
    });
    expect(events.some((e) => e.hook === Hook.HOOK_XDP && e.reasonName === 'fwd_remote' && e.dport === 30602)).toBe(true);
  });

  it('a LoadBalancer IP answered by ARP, its backend on another node: XDP on the owner SNATs it there', async () => {
    await kubectl.apply(`
apiVersion: v1
kind: Service
metadata: { name: lb, namespace: default }
spec: { type: LoadBalancer, selector: { app: lb }, ports: [{ port: 80, targetPort: 8080 }] }
`);
    const ip = await eventually(() => kubectl.lbAddresses('lb'), (a) => a !== '');
    const answer = await eventually(() => sb.net.router.exec(['arping', '-c', '1', '-w', '2', '-I', 'nodes', ip], { timeoutMs: 5000 }), (r) => /reply from/.test(r.stdout));
    const mac = /\[([0-9A-Fa-f:]+)\]/.exec(answer.stdout)![1]!.toLowerCase();
    const macs = await Promise.all(sb.net.nodes.map(async (n) => (JSON.parse(await n.host.execOk(['ip', '-j', 'link', 'show', 'eth0'])) as Array<{ address: string }>)[0]!.address));
    const owner = sb.net.nodes[macs.indexOf(mac)]!;
    expect(owner, `the node with MAC ${mac}`).toBeDefined();
    const elsewhere = sb.net.nodes.find((n) => n !== owner)!;
    await kubectl.apply(whoamiPod('lb', 'lb', elsewhere.name));
    const events = await traced(owner, async () => {
      const body = await eventually(() => sb.net.client.exec(['curl', '-sS', '--max-time', '2', `http://${ip}/`]), (r) => r.code === 0);
      expect(remoteAddr(body.stdout)).toBe(owner.ip);
    });
    expect(events.some((e) => e.hook === Hook.HOOK_XDP && e.reasonName === 'fwd_remote' && e.daddr === ip)).toBe(true);
  });

  it('a local backend is tc\'s: XDP passes the packet, tc DNATs it for the stack', async () => {
    const events = await traced(node(1), async () => {
      expect(remoteAddr(await curl('http://10.0.30.21:30600/'))).toBe('10.0.10.2');
    });
    expect(events.some((e) => e.hook === Hook.HOOK_TC_INGRESS && e.reasonName === 'fwd_local' && e.dport === 30600)).toBe(true);
    expect(events.filter((e) => e.hook === Hook.HOOK_XDP)).toEqual([]);
  });
});
