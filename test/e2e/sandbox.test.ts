// The sandbox: up and down leave nothing behind, the demo's key outputs, and upstream
// Service e2e scenarios (test/e2e/network/service.go, loadbalancer.go) ported to it.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { NetnsSourcesStatus } from '../../src/agent/netns-sources.js';
import { netnsSourcesLine } from '../../src/cli/inspect-commands.js';
import { SandboxApi } from '../../src/sandbox/api-client.js';
import { Sandbox } from '../../src/sandbox/sandbox.js';
import type { Host } from '../../src/sandbox/netns/testbed.js';
import { WORKLOADS_BIN } from '../../src/sandbox/workloads/spawn.js';
import { exec } from '../../src/sys/exec.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { eventually } from '../harness/wait.js';

const FERRY = join(REPO_ROOT, 'bin', 'ferry.js');


describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'sandbox lifecycle', () => {
  it('up then down (through the CLI) leaves no namespace, link, cgroup, pin, process or state', async () => {
    const up = spawnSync(process.execPath, [FERRY, 'sandbox', 'up', '--name', 'lifecycle', '--nodes', '2'], { encoding: 'utf8', timeout: 120_000 });
    expect(up.status, up.stderr).toBe(0);
    expect(up.stdout).toMatch(/node-2 {2}10\.0\.30\.22/);
    const again = spawnSync(process.execPath, [FERRY, 'sandbox', 'up', '--name', 'lifecycle'], { encoding: 'utf8' });
    expect(again.stdout).toMatch(/already up/); // idempotent per name
    const pid = Number(/pid (\d+)/.exec(up.stdout)![1]);
    expect((await exec('ip', ['netns', 'list'])).stdout).toMatch(/fys-lifecycle-node-1/);
    const down = spawnSync(process.execPath, [FERRY, 'sandbox', 'down', '--name', 'lifecycle'], { encoding: 'utf8', timeout: 60_000 });
    expect(down.status, down.stderr).toBe(0);
    expect((await exec('ip', ['netns', 'list'])).stdout).not.toMatch(/fys-lifecycle/);
    expect((await exec('ip', ['-o', 'link'])).stdout).not.toMatch(/fys-lifecycle/);
    expect(readdirSync('/sys/fs/cgroup/unified').filter((d) => d.startsWith('fys-lifecycle'))).toEqual([]);
    expect(readdirSync('/sys/fs/bpf').filter((d) => d.startsWith('fys-lifecycle'))).toEqual([]);
    expect(existsSync('/run/ferry/sandboxes/lifecycle')).toBe(false);
    expect(() => process.kill(pid, 0)).toThrow();
  });

  it('make demo shows the client IP under ETP=Local and the node IP under ETP=Cluster with SNAT', () => {
    const r = spawnSync('bash', [join(REPO_ROOT, 'scripts', 'demo.sh')], { encoding: 'utf8', timeout: 180_000, env: { ...process.env, FERRY_DEMO_NAME: 'cidemo', FERRY_DEMO_DOWN: '1' } });
    expect(r.status, r.stderr).toBe(0);
    const out = r.stdout;
    expect(out).toMatch(/toolbox → 10\.96\.0\.100:80 +Hostname: whoami-\S+ RemoteAddr: 10\.244\.2\.\d+:/);
    for (const ip of ['10.0.30.21', '10.0.30.22', '10.0.30.23']) expect(out).toMatch(new RegExp(`client → ${ip.replace(/\./g, '\\.')}:30080 +Hostname: whoami-`));
    expect(out).toMatch(/ETP=Cluster, client → node-2:30090 \(remote backend, SNAT\): +Hostname: solo RemoteAddr: 10\.0\.30\.22:/);
    expect(out).toMatch(/ETP=Local, +client → LB 10\.0\.100\.11 \(only node-1 announces it\): Hostname: solo RemoteAddr: 10\.0\.10\.2:/);
    expect(out).toMatch(/ETP=Local, +client → node-2:30091 \(no local endpoint: dropped\): curl: \(28\)/);
    expect(out).toMatch(/SNAT, client → node-2:30090: Hostname: solo RemoteAddr: 10\.0\.30\.22:/);
    expect(out).toMatch(/DSR, +client → node-2:30092: Hostname: solo RemoteAddr: 10\.0\.10\.2:/);
    expect(out).toMatch(/10\.96\.0\.100:80\/tcp +ClusterIP/);
    // L2: one node answers, another takes over when its link is cut, and it stays there.
    const first = /router: who has 10\.0\.30\.200\? +reply from 10\.0\.30\.200 \[([0-9A-F:]+)\]/i.exec(out);
    expect(first, out).not.toBeNull();
    const takeover = /after (\d+) ms: reply from 10\.0\.30\.200 \[([0-9A-F:]+)\]/i.exec(out)!;
    expect(takeover[2]).not.toBe(first![1]);
    expect(Number(takeover[1])).toBeLessThan(5000); // polled through `ferry sandbox exec`, each ≈ 0.2 s
    expect(out).toMatch(/10\.0\.30\.200 now announced by node-\d/);
    // BGP: node-1's session with the router is up with BFD; the router has a path per node,
    // and node-3's leaves when its link is cut.
    expect(out).toMatch(/node-1: 10\.0\.30\.1 +64513 +Established .* up \(100\/100 ms × 3\)/);
    const ecmp = /router: (.*)/.exec(out.slice(out.indexOf('6. BGP')))![1]!;
    for (const ip of ['10.0.30.21', '10.0.30.22', '10.0.30.23']) expect(ecmp).toContain(`via ${ip}`);
    const after = /after \d+ ms \(BFD\): (.*)/.exec(out)![1]!;
    expect(after).not.toContain('10.0.30.23');
    expect(after).toContain('10.0.30.21');
    expect(Number(/requests: (\d+) answered/.exec(out.slice(out.indexOf('6. BGP')))![1])).toBeGreaterThan(30);
    expect(Number(/demo took (\d+) s/.exec(out)![1])).toBeLessThan(120);
  });
});

// ---- Upstream Service e2e scenarios, on one shared sandbox ----

let sb: Sandbox;
let api: SandboxApi;

async function curl(from: Host, url: string, timeout = 3): Promise<{ code: number; hostname: string; remote: string }> {
  const r = await from.exec(['curl', '-sS', '--max-time', String(timeout), url], { timeoutMs: (timeout + 5) * 1000 });
  return { code: r.code, hostname: /Hostname: (\S+)/.exec(r.stdout)?.[1] ?? '', remote: (/RemoteAddr: (\S+)/.exec(r.stdout)?.[1] ?? '').split(':')[0]! };
}
const podHost = (ns: string, name: string) => {
  const info = sb.kubelet.podInfo(ns, name);
  if (!info) throw new Error(`pod ${ns}/${name} is not running`);
  return info.host;
};
const put = (kind: string, obj: Record<string, unknown>) => sb.put(kind, obj);
async function del(kind: string, name: string, ns = 'default'): Promise<void> {
  await api.call('DELETE', api.url(kind, ns, name));
  await sb.settle();
}
const pod = (name: string, labels: Record<string, string>, node: string, ports: Array<{ name?: string; containerPort: number; protocol?: string }> = [{ name: 'http', containerPort: 8080 }], image = 'traefik/whoami') =>
  ({ apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'default', labels }, spec: { nodeName: node, containers: [{ name: 'c', image, ports }] } });
const svc = (name: string, spec: Record<string, unknown>, labels?: Record<string, string>) => ({ apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'default', labels }, spec });
const clusterIPOf = async (name: string) => ((await api.call('GET', api.url('Service', 'default', name))).json.spec as { clusterIP: string }).clusterIP;

beforeAll(async () => {
  sb = await Sandbox.up({ name: 'scenarios', nodes: 2, mode: 'snat', log: pino({ level: 'silent' }), agentEnv: { FERRY_MIN_SYNC_PERIOD_MS: '20' } });
  api = new SandboxApi(sb.api.alsoUrl!);
  await put('Pod', pod('web-a', { app: 'web' }, 'node-1'));
  await put('Pod', pod('web-b', { app: 'web' }, 'node-2'));
  await put('Pod', pod('tool-1', { role: 'tool' }, 'node-1'));
  await put('Pod', pod('tool-2', { role: 'tool' }, 'node-2'));
  await put('Service', svc('web', { selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 'http' }] }));
}, 180_000);
afterAll(async () => {
  await sb?.down();
}, 60_000);

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'upstream Service e2e scenarios in the sandbox', () => {
  it('serves a basic endpoint from pods (every backend reachable)', async () => {
    const ip = await clusterIPOf('web');
    const seen = new Set<string>();
    for (let i = 0; i < 20 && seen.size < 2; i++) seen.add((await curl(podHost('default', 'tool-1'), `http://${ip}/`)).hostname);
    expect([...seen].sort()).toEqual(['web-a', 'web-b']);
  });

  it('preserves the pod source IP through a ClusterIP, on the same and on another node', async () => {
    const ip = await clusterIPOf('web');
    for (const tool of ['tool-1', 'tool-2']) {
      const info = sb.kubelet.podInfo('default', tool)!;
      const r = await curl(info.host, `http://${ip}/`);
      expect(r.remote).toBe(info.ip);
    }
  });

  it('reaches itself through its own Service (hairpin)', async () => {
    await put('Service', svc('self', { selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 8080 }] }));
    await put('Service', svc('only-a', { selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080 }] }));
    const ip = await clusterIPOf('self');
    const r = await eventually(() => curl(podHost('default', 'web-a'), `http://${ip}/`), (x) => x.code === 0);
    expect(['web-a', 'web-b']).toContain(r.hostname);
    await del('Service', 'self');
    await del('Service', 'only-a');
  });

  it('resolves named target ports on a multiport Service', async () => {
    await put('Pod', pod('multi', { app: 'multi' }, 'node-1', [{ name: 'web', containerPort: 8080 }, { name: 'alt', containerPort: 9090 }]));
    await put('Service', svc('multi', { selector: { app: 'multi' }, ports: [{ name: 'a', port: 80, targetPort: 'web' }, { name: 'b', port: 81, targetPort: 'alt' }] }));
    const ip = await clusterIPOf('multi');
    expect((await eventually(() => curl(podHost('default', 'tool-2'), `http://${ip}:80/`), (r) => r.code === 0)).hostname).toBe('multi');
    expect((await eventually(() => curl(podHost('default', 'tool-2'), `http://${ip}:81/`), (r) => r.code === 0)).hostname).toBe('multi');
  });

  it('follows ports being added and removed', async () => {
    const ip = await clusterIPOf('multi');
    await put('Service', svc('multi', { clusterIP: ip, selector: { app: 'multi' }, ports: [{ name: 'a', port: 80, targetPort: 'web' }] }));
    expect((await eventually(() => curl(podHost('default', 'tool-2'), `http://${ip}:81/`), (r) => r.code === 7)).code).toBe(7);
    await put('Service', svc('multi', { clusterIP: ip, selector: { app: 'multi' }, ports: [{ name: 'a', port: 80, targetPort: 'web' }, { name: 'c', port: 82, targetPort: 'alt' }] }));
    expect((await eventually(() => curl(podHost('default', 'tool-2'), `http://${ip}:82/`), (r) => r.code === 0)).hostname).toBe('multi');
  });

  it('rejects connections to a Service without endpoints, and works once endpoints appear', async () => {
    await put('Service', svc('later', { selector: { app: 'later' }, ports: [{ port: 80, targetPort: 8080 }] }));
    const ip = await clusterIPOf('later');
    expect((await eventually(() => curl(podHost('default', 'tool-1'), `http://${ip}/`), (r) => r.code === 7)).code).toBe(7);
    await put('Pod', pod('later', { app: 'later' }, 'node-2'));
    expect((await eventually(() => curl(podHost('default', 'tool-1'), `http://${ip}/`), (r) => r.code === 0)).hostname).toBe('later');
  });

  it('takes Services up and down, and a recreated Service works', async () => {
    const ip = await clusterIPOf('later');
    await del('Service', 'later');
    expect((await eventually(() => curl(podHost('default', 'tool-1'), `http://${ip}/`, 1), (r) => r.code !== 0)).code).not.toBe(0);
    await put('Service', svc('later', { selector: { app: 'later' }, ports: [{ port: 80, targetPort: 8080 }] }));
    const ip2 = await clusterIPOf('later');
    expect((await eventually(() => curl(podHost('default', 'tool-1'), `http://${ip2}/`), (r) => r.code === 0)).hostname).toBe('later');
  });

  it('serves a NodePort on every node IP, and releases it on delete', async () => {
    await put('Service', svc('np', { type: 'NodePort', selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080, nodePort: 30300 }] }));
    for (const n of sb.net.nodes) expect((await eventually(() => curl(sb.net.client, `http://${n.ip}:30300/`), (r) => r.code === 0)).code).toBe(0);
    await del('Service', 'np');
    const again = await put('Service', svc('np2', { type: 'NodePort', selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080, nodePort: 30300 }] }));
    expect(((again.spec as { ports: { nodePort: number }[] }).ports[0]!.nodePort)).toBe(30300);
    await del('Service', 'np2');
  });

  it('serves the same port number over TCP and UDP', async () => {
    await put('Pod', pod('dual', { app: 'dual' }, 'node-1', [{ name: 'tcp', containerPort: 8053, protocol: 'TCP' }, { name: 'udp', containerPort: 8053, protocol: 'UDP' }]));
    await put('Service', svc('dual', { selector: { app: 'dual' }, ports: [{ name: 'tcp', port: 53, targetPort: 8053, protocol: 'TCP' }, { name: 'udp', port: 53, targetPort: 8053, protocol: 'UDP' }] }));
    const ip = await clusterIPOf('dual');
    const tool = podHost('default', 'tool-2');
    expect((await eventually(() => curl(tool, `http://${ip}:53/`), (r) => r.code === 0)).hostname).toBe('dual');
    const u = JSON.parse(await tool.execOk([process.execPath, join(REPO_ROOT, 'dist/sandbox/workloads/main.js'), 'udp', '--to', `${ip}:53`, '--count', '2'])) as { replies: { ok: boolean; from: string }[] };
    expect(u.replies.map((x) => [x.ok, x.from])).toEqual([[true, `${ip}:53`], [true, `${ip}:53`]]);
  });

  it('changes type from ExternalName to ClusterIP to NodePort', async () => {
    await put('Service', svc('morph', { type: 'ExternalName', externalName: 'example.com' }));
    await put('Service', svc('morph', { type: 'ClusterIP', selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080 }] }));
    const ip = await clusterIPOf('morph');
    expect((await eventually(() => curl(podHost('default', 'tool-1'), `http://${ip}/`), (r) => r.code === 0)).code).toBe(0);
    await put('Service', svc('morph', { type: 'NodePort', clusterIP: ip, selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080, nodePort: 30301 }] }));
    expect((await eventually(() => curl(sb.net.client, 'http://10.0.30.22:30301/'), (r) => r.code === 0)).code).toBe(0);
    await del('Service', 'morph');
  });

  it('programs an ExternalIP not assigned to any node, reached from pods', async () => {
    await put('Service', svc('ext', { selector: { app: 'web' }, externalIPs: ['10.0.30.200'], ports: [{ port: 80, targetPort: 8080 }] }));
    expect((await eventually(() => curl(podHost('default', 'tool-1'), 'http://10.0.30.200/'), (r) => r.code === 0)).code).toBe(0);
    await del('Service', 'ext');
  });

  it('ignores Services with the service-proxy-name or headless label', async () => {
    await put('Service', svc('other-proxy', { selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080 }] }, { 'service.kubernetes.io/service-proxy-name': 'foo' }));
    await put('Service', svc('headless-label', { selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080 }] }, { 'service.kubernetes.io/headless': '' }));
    await new Promise((r) => setTimeout(r, 300));
    for (const name of ['other-proxy', 'headless-label']) {
      const r = await curl(podHost('default', 'tool-1'), `http://${await clusterIPOf(name)}/`, 1);
      expect(r.code).not.toBe(0);
    }
  });

  it('routes to not-ready pods with publishNotReadyAddresses', async () => {
    await put('Pod', pod('shy', { app: 'shy' }, 'node-2'));
    await put('Service', svc('shy', { selector: { app: 'shy' }, publishNotReadyAddresses: true, ports: [{ port: 80, targetPort: 8080 }] }));
    const p = (await api.call('GET', api.url('Pod', 'default', 'shy'))).json;
    await api.call('PUT', `${api.url('Pod', 'default', 'shy')}/status`, { ...p, status: { ...(p.status as object), conditions: [{ type: 'Ready', status: 'False' }] } });
    await sb.settle();
    const ip = await clusterIPOf('shy');
    expect((await eventually(() => curl(podHost('default', 'tool-1'), `http://${ip}/`), (r) => r.code === 0)).hostname).toBe('shy');
  });

  it('internalTrafficPolicy=Local: only local endpoints; a node without one gets nothing', async () => {
    await put('Service', svc('itp', { selector: { app: 'later' }, internalTrafficPolicy: 'Local', ports: [{ port: 80, targetPort: 8080 }] }));
    const ip = await clusterIPOf('itp');
    expect((await eventually(() => curl(podHost('default', 'tool-2'), `http://${ip}/`), (r) => r.code === 0)).hostname).toBe('later'); // 'later' runs on node-2
    expect((await curl(podHost('default', 'tool-1'), `http://${ip}/`, 1)).code).not.toBe(0);
  });

  it('keeps serving through terminating endpoints when they are all that is left (ETP Cluster and Local)', async () => {
    await put('Pod', pod('fading', { app: 'fading' }, 'node-1'));
    await put('Service', svc('fading', { type: 'LoadBalancer', externalTrafficPolicy: 'Local', selector: { app: 'fading' }, ports: [{ port: 80, targetPort: 8080 }] }));
    const svcObj = (await api.call('GET', api.url('Service', 'default', 'fading'))).json;
    const hc = (svcObj.spec as { healthCheckNodePort: number }).healthCheckNodePort;
    const node1 = sb.net.node(1).host;
    const health = async () => Number((await node1.exec(['curl', '-s', '-o', '/dev/null', '-w', '%{http_code}', `http://10.0.30.21:${hc}/`])).stdout);
    expect(await eventually(health, (c) => c === 200)).toBe(200);
    await api.call('PATCH', api.url('Pod', 'default', 'fading'), { metadata: { deletionTimestamp: new Date().toISOString() } });
    // Terminating: the health check fails at once, but the pod still serves.
    expect(await eventually(health, (c) => c === 503)).toBe(503);
    expect((await curl(podHost('default', 'tool-1'), `http://${await clusterIPOf('fading')}/`)).hostname).toBe('fading');
    expect((await curl(node1, 'http://10.0.30.21:' + String((svcObj.spec as { ports: { nodePort: number }[] }).ports[0]!.nodePort) + '/')).hostname).toBe('fading');
  });

  it('ETP=Local: external clients need a local endpoint, this node\'s pods and host reach it anyway', async () => {
    // 'multi' runs on node-1 only.
    const created = await put('Service', svc('etp-local', { type: 'LoadBalancer', externalTrafficPolicy: 'Local', selector: { app: 'multi' }, ports: [{ port: 80, targetPort: 'web', nodePort: 30310 }] }));
    void created;
    const lbIP = await eventually(async () => (((await api.call('GET', api.url('Service', 'default', 'etp-local'))).json.status as { loadBalancer?: { ingress?: { ip: string }[] } })?.loadBalancer?.ingress?.[0]?.ip ?? ''), (ip) => ip !== '');
    const viaNode1 = await eventually(() => curl(sb.net.client, 'http://10.0.30.21:30310/'), (r) => r.code === 0);
    expect(viaNode1).toMatchObject({ hostname: 'multi', remote: '10.0.10.2' }); // client IP kept
    expect((await curl(sb.net.client, 'http://10.0.30.22:30310/', 1)).code).toBe(28); // no local endpoint on node-2: dropped
    // The short-circuit: from node-2's pods and host, the cluster endpoints serve.
    expect((await curl(podHost('default', 'tool-2'), `http://${lbIP}/`)).hostname).toBe('multi');
    expect((await curl(podHost('default', 'tool-2'), 'http://10.0.30.22:30310/')).hostname).toBe('multi');
    expect((await curl(sb.net.node(2).host, 'http://10.0.30.22:30310/')).hostname).toBe('multi');
    await del('Service', 'etp-local');
  });

  it('loadBalancerSourceRanges allow and deny, and follow updates', async () => {
    const spec = (ranges: string[]) => ({ type: 'LoadBalancer', loadBalancerIP: '10.0.100.50', loadBalancerSourceRanges: ranges, selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080 }] });
    await put('Service', svc('ranged', spec(['10.0.10.0/24'])));
    expect((await eventually(() => curl(sb.net.client, 'http://10.0.100.50/'), (r) => r.code === 0)).remote).toMatch(/^10\.0\./);
    await put('Service', svc('ranged', spec(['192.168.50.0/24'])));
    expect((await eventually(() => curl(sb.net.client, 'http://10.0.100.50/', 1), (r) => r.code === 28)).code).toBe(28);
    // The NodePort of the same Service is not restricted (kube-proxy applies ranges to LB IPs only).
    const np = ((await api.call('GET', api.url('Service', 'default', 'ranged'))).json.spec as { ports: { nodePort: number }[] }).ports[0]!.nodePort;
    expect((await curl(sb.net.client, `http://10.0.30.21:${np}/`)).code).toBe(0);
    // Pods too (upstream: "should only allow access from service loadbalancer source
    // ranges"): the socket hooks take a pod's address from its namespace (lb4_netns_sources).
    const accept = sb.kubelet.podInfo('default', 'tool-1')!;
    const drop = podHost('default', 'tool-2');
    await put('Service', svc('ranged', spec([`${accept.ip}/32`])));
    expect((await eventually(() => curl(accept.host, 'http://10.0.100.50/'), (r) => r.code === 0)).code).toBe(0);
    // Refused at connect() with EPERM (a policy's refusal; no endpoints would be ECONNREFUSED).
    const probe = await drop.exec([process.execPath, WORKLOADS_BIN, 'connect-probe', '--targets', '[10.0.100.50]:80/tcp'], { timeoutMs: 30_000 });
    expect(probe.code, probe.stderr).toBe(0);
    expect((JSON.parse(probe.stdout.trim()) as { result: string }).result).toBe('EPERM');
    // The agent's /status (and ferry status) tell how many namespaces it knows.
    const { netnsSources } = JSON.parse(await sb.net.node(1).host.execOk(['curl', '-sS', 'http://127.0.0.1:10249/status'])) as { netnsSources: NetnsSourcesStatus };
    expect(netnsSources.recorded).toBeGreaterThanOrEqual(2); // node-1's pods: web-a and tool-1 at least
    expect(netnsSourcesLine(netnsSources)).toMatch(/^\d+ of \d+ namespaces' addresses known to the socket hooks/);
    // The ranges follow an update for pods as for the client.
    await put('Service', svc('ranged', spec([`${sb.kubelet.podInfo('default', 'tool-2')!.ip}/32`])));
    expect((await eventually(() => curl(drop, 'http://10.0.100.50/'), (r) => r.code === 0)).code).toBe(0);
    expect((await eventually(() => curl(accept.host, 'http://10.0.100.50/', 1), (r) => r.code === 7)).code).toBe(7);
    await del('Service', 'ranged');
  });

  it('session affinity ClientIP holds for 15 requests (ClusterIP and NodePort) and breaks after its timeout', async () => {
    await put('Pod', pod('web-c', { app: 'web' }, 'node-2'));
    const spec = (affinity: boolean) => ({
      type: 'NodePort', selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080, nodePort: 30320 }],
      ...(affinity ? { sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 2 } } } : { sessionAffinity: 'None' }),
    });
    await put('Service', svc('sticky', spec(true)));
    const ip = await clusterIPOf('sticky');
    const tool = podHost('default', 'tool-1');
    await eventually(() => curl(tool, `http://${ip}/`), (r) => r.code === 0);
    for (const [from, url] of [[tool, `http://${ip}/`], [sb.net.client, 'http://10.0.30.21:30320/']] as const) {
      const first = (await curl(from, url)).hostname;
      for (let i = 0; i < 15; i++) expect((await curl(from, url)).hostname).toBe(first);
    }
    // After the timeout the choice is free again: over a few expiries more than one backend shows up.
    const seen = new Set<string>();
    for (let round = 0; round < 8 && seen.size < 2; round++) {
      await new Promise((r) => setTimeout(r, 2200));
      seen.add((await curl(tool, `http://${ip}/`)).hostname);
    }
    expect(seen.size).toBeGreaterThan(1);
    // Switching affinity off spreads at once.
    await put('Service', svc('sticky', { ...spec(false), clusterIP: ip }));
    const spread = new Set<string>();
    for (let i = 0; i < 30 && spread.size < 2; i++) spread.add((await curl(tool, `http://${ip}/`)).hostname);
    expect(spread.size).toBeGreaterThan(1);
    await del('Service', 'sticky');
  });

  it('works with kubectl and the printed kubeconfig: apply, get, delete', async () => {
    const kubectl = (...args: string[]) => exec('kubectl', ['--kubeconfig', sb.kubeconfig, ...args], { timeoutMs: 30_000 });
    const applied = await kubectl('apply', '--validate=false', '-f', join(REPO_ROOT, 'demo', 'whoami.yaml'));
    expect(applied.stdout, applied.stderr).toMatch(/deployment.apps\/whoami created/);
    await sb.settle();
    const pods = await eventually(() => kubectl('get', 'pods', '-l', 'app=whoami', '-o', 'json'), (r) => ((JSON.parse(r.stdout || '{}') as { items?: unknown[] }).items ?? []).length === 2);
    expect((JSON.parse(pods.stdout) as { items: unknown[] }).items).toHaveLength(2);
    expect((await kubectl('get', 'svc', 'whoami')).stdout).toMatch(/whoami/);
    expect((await eventually(() => curl(podHost('default', 'tool-1'), 'http://10.96.0.100/'), (r) => r.code === 0)).hostname).toMatch(/^whoami-/);
    const deleted = await kubectl('delete', '-f', join(REPO_ROOT, 'demo', 'whoami.yaml'));
    expect(deleted.stdout).toMatch(/service "whoami" deleted/);
    await sb.settle();
  });

  it('keeps working across an agent restart', async () => {
    const node1 = sb.net.node(1);
    await sb.stopAgent(node1);
    const ip = await clusterIPOf('web');
    expect((await curl(podHost('default', 'tool-1'), `http://${ip}/`)).code).toBe(0); // the datapath stays without its agent
    await sb.startAgent(node1);
    expect((await curl(podHost('default', 'tool-1'), `http://${ip}/`)).code).toBe(0);
  });
});
