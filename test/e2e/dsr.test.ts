// DSR end to end in a sandbox whose nodes run in dsr mode: the backend sees the client,
// the client sees the NodePort answer, the LB node sees no reply, large transfers work;
// UDP datagrams the option cannot fit are refused with fragmentation-needed, and a UDP
// Service annotated snat carries them; a client reusing its port after a reset reaches
// another frontend of the same pod.
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { SandboxApi } from '../../src/sandbox/api-client.js';
import { Sandbox } from '../../src/sandbox/sandbox.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { createObject, datapathPackets } from '../harness/sandbox-calls.js';
import { eventually } from '../harness/wait.js';

let sb: Sandbox;
let api: SandboxApi;
const UDP = join(REPO_ROOT, 'dist/sandbox/workloads/main.js');

const put = (kind: string, obj: Record<string, unknown>) => createObject(sb, api, kind, obj);
const stat = datapathPackets;

beforeAll(async () => {
  sb = await Sandbox.up({ name: 'dsr', nodes: 2, mode: 'dsr', log: pino({ level: 'silent' }), agentEnv: { FERRY_MIN_SYNC_PERIOD_MS: '20' } });
  api = new SandboxApi(sb.api.alsoUrl!);
  await put('Pod', { metadata: { name: 'echo', namespace: 'default', labels: { app: 'echo' } }, spec: { nodeName: 'node-1', containers: [{ name: 'w', image: 'whoami', ports: [{ name: 'http', containerPort: 8080 }, { name: 'dns', containerPort: 5353, protocol: 'UDP' }] }] } });
  await put('Service', { metadata: { name: 'echo', namespace: 'default' }, spec: { type: 'NodePort', selector: { app: 'echo' }, ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort: 30400 }, { name: 'dns', port: 53, protocol: 'UDP', targetPort: 5353, nodePort: 30401 }] } });
  await put('Service', { metadata: { name: 'echo-snat', namespace: 'default', annotations: { 'ferry.dev/forwarding': 'snat' } }, spec: { type: 'NodePort', selector: { app: 'echo' }, ports: [{ name: 'dns', port: 53, protocol: 'UDP', targetPort: 5353, nodePort: 30402 }] } });
  // A second Service on the same pod port: another DSR frontend of the same backend.
  await put('Service', { metadata: { name: 'echo-too', namespace: 'default' }, spec: { type: 'NodePort', selector: { app: 'echo' }, ports: [{ name: 'http', port: 80, targetPort: 8080, nodePort: 30403 }] } });
}, 180_000);
afterAll(async () => {
  await sb?.down();
}, 60_000);

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'DSR in a sandbox', () => {
  it('the pod sees the client, the client talks to the NodePort, and the LB node sees no reply', async () => {
    const node2 = sb.net.node(2).host;
    const repliesBefore = await stat(node2, 'reply_remote');
    const dsrBefore = await stat(node2, 'fwd_dsr');
    const r = await eventually(() => sb.net.client.exec(['curl', '-sS', '--max-time', '3', 'http://10.0.30.22:30400/']), (x) => x.code === 0);
    expect(r.stdout).toMatch(/Hostname: echo/);
    expect(r.stdout).toMatch(/RemoteAddr: 10\.0\.10\.2:/);
    for (let i = 0; i < 5; i++) await sb.net.client.execOk(['curl', '-sS', '--max-time', '3', 'http://10.0.30.22:30400/']);
    expect(await stat(node2, 'fwd_dsr')).toBeGreaterThan(dsrBefore);
    expect(await stat(node2, 'reply_remote')).toBe(repliesBefore);
    expect(await stat(sb.net.node(1).host, 'dsr_received')).toBeGreaterThan(0);
  });

  it('a client that reset its connection reuses the port towards another frontend of the same pod', async () => {
    // The backend node never sees the client's reset (only the pod's side of a DSR flow):
    // its binding still looks live when the same tuple arrives naming another frontend.
    const peer = async (port: number) =>
      JSON.parse(await sb.net.client.exec([process.execPath, UDP, 'tcp-peer', '--to', `10.0.30.22:${port}`, '--local-port', '40555', '--http', '--reset'], { timeoutMs: 10_000 }).then((r) => r.stdout || '{}')) as { peer?: string; status?: string; error?: string };
    await eventually(() => sb.net.client.exec(['curl', '-sS', '--max-time', '3', 'http://10.0.30.22:30403/']), (x) => x.code === 0);
    const contested = await stat(sb.net.node(1).host, 'dsr_contested');
    expect(await peer(30400)).toEqual({ peer: '10.0.30.22:30400', status: 'HTTP/1.1 200 OK' });
    expect(await peer(30403)).toEqual({ peer: '10.0.30.22:30403', status: 'HTTP/1.1 200 OK' });
    expect(await peer(30400)).toEqual({ peer: '10.0.30.22:30400', status: 'HTTP/1.1 200 OK' });
    expect(await stat(sb.net.node(1).host, 'dsr_contested')).toBe(contested + 2);
  });

  it('carries a 4 MB transfer', async () => {
    const r = await sb.net.client.execOk(['curl', '-sS', '--max-time', '20', '-o', '/dev/null', '-w', '%{size_download}', 'http://10.0.30.22:30400/bytes?n=4194304'], { timeoutMs: 30_000 });
    expect(Number(r)).toBe(4194304);
  });

  it('UDP: SNAT carries 1472-byte datagrams; DSR replies come from the NodePort, 1464 bytes fit, 1472 get fragmentation-needed and then go as fragments', async () => {
    const send = async (port: number, size: number) =>
      (JSON.parse(await sb.net.client.execOk([process.execPath, UDP, 'udp', '--to', `10.0.30.22:${port}`, '--size', String(size), '--count', '2'], { timeoutMs: 15_000 })) as { replies: { ok: boolean; from: string; bytes: number }[] }).replies;
    // First SNAT: the client caches the path MTU per destination once told, so order matters.
    expect((await send(30402, 1472)).map((x) => [x.ok, x.bytes])).toEqual([[true, 1472], [true, 1472]]);
    expect((await send(30401, 1464)).map((x) => [x.ok, x.from])).toEqual([[true, '10.0.30.22:30401'], [true, '10.0.30.22:30401']]);
    // The first is lost to fragmentation-needed (MTU 1492); the client's kernel then
    // fragments the next, and the fragments follow the first through DSR.
    expect((await send(30401, 1472)).map((x) => [x.ok, x.bytes])).toEqual([[false, 0], [true, 1472]]);
    expect(await stat(sb.net.node(2).host, 'icmp_frag_needed')).toBeGreaterThan(0);
  });
});
