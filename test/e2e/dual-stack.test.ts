// A dual-stack Service through the real agent: the test API server holds a Service with an
// IPv4 and an IPv6 ClusterIP and an EndpointSlice per family; pods have an IPv6 address
// besides their IPv4 one (routed by their node, as a CNI would). A pod reaches the Service
// at both ClusterIPs, over its own family's endpoints; `ferry service list` shows both;
// the IPv6 family follows its slice and goes with the Service. An IPv6-only Service works
// too, with no NodePort on the node's IPv4 addresses. Once the Node lists an IPv6 address,
// a pod and the host reach IPv6 NodePorts there, and IPv6 LB IPs and externalIPs (the
// socket hooks), and the health check node port answers there. A client outside reaches
// them over IPv6 through the router once the sandbox's links get IPv6 addresses (tc's
// IPv6 path: DNAT to this node's backend, the client's address kept), where an LB IP's
// IPv6 loadBalancerSourceRanges let in only whom they name, outside and in.
import type { V1Service } from '@kubernetes/client-node';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Host } from '../../src/sandbox/netns/testbed.js';
import type { PodInfo } from '../../src/sandbox/network.js';
import type { Sandbox } from '../../src/sandbox/sandbox.js';
import { agentCluster, applyObject, podWith, sliceFor } from '../harness/agent-cluster.js';
import { WHOAMI6, addIPv6, ip6, linkIPv6, slice6 } from '../harness/ipv6-pods.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { eventually } from '../harness/wait.js';

let c: Sandbox;
let web1: PodInfo;
let web2: PodInfo;
let client: PodInfo;

const dual: V1Service = {
  metadata: { name: 'dual', namespace: 'default' },
  spec: {
    type: 'ClusterIP', clusterIP: '10.96.0.60', clusterIPs: ['10.96.0.60', 'fd00:96::60'], ipFamilies: ['IPv4', 'IPv6'], ipFamilyPolicy: 'RequireDualStack',
    ports: [{ name: 'http', port: 80, targetPort: 8080 as never, protocol: 'TCP' }],
  },
};

beforeAll(async () => {
  c = await agentCluster({ nodes: 1, name: 'dualstack' });
  await c.net.node(1).host.execOk(['sysctl', '-qw', 'net.ipv6.conf.all.forwarding=1']);
  [web1, web2, client] = await Promise.all([podWith(c, 'web-1', 1, { whoami: 8080 }), podWith(c, 'web-2', 1), podWith(c, 'client-1', 1)]);
  for (const p of [web1, web2, client]) await addIPv6(p);
  for (const p of [web1, web2]) p.host.spawn([process.execPath, '-e', WHOAMI6, JSON.stringify([ip6(p), `${p.name}-v6`])]);
  applyObject(c, 'services', dual);
  applyObject(c, 'endpointslices', sliceFor('dual', [{ pod: web1 }], [{ name: 'http', port: 8080 }]));
  applyObject(c, 'endpointslices', slice6('dual', [web2]));
});
afterAll(async () => {
  await c?.down();
});

async function hostname(from: Host, url: string): Promise<string> {
  const r = await from.exec(['curl', '-gsS', '--max-time', '3', url], { timeoutMs: 8000 });
  return r.code === 0 ? (/Hostname: (\S+)/.exec(r.stdout)?.[1] ?? '?') : `error ${r.code}`;
}

const ferry = (...args: string[]) => spawnSync(process.execPath, [join(REPO_ROOT, 'bin/ferry.js'), ...args], { encoding: 'utf8' });

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'a dual-stack Service through the agent', () => {
  it('a pod reaches both ClusterIPs, each over its own family\'s endpoints, from its own address', async () => {
    expect(await eventually(() => hostname(client.host, 'http://10.96.0.60/'), (h) => h === 'web-1')).toBe('web-1');
    expect(await eventually(() => hostname(client.host, 'http://[fd00:96::60]/'), (h) => h === 'web-2-v6')).toBe('web-2-v6');
    const r = await client.host.execOk(['curl', '-gsS', '--max-time', '3', 'http://[fd00:96::60]/']);
    expect(r).toContain(`RemoteAddr: ${ip6(client)}`);
    const pins = c.pinDir(c.net.node(1));
    const rows = JSON.parse(ferry('service', 'list', '--pin-dir', pins, '-o', 'json').stdout) as Array<{ service: string; frontend: string; type: string; backends: { address: string }[] }>;
    // explain, from a pod and from outside.
    const e = JSON.parse(ferry('explain', `[${ip6(client)}]:40000`, '[fd00:96::60]:80/tcp', '--from', 'pod', '--pin-dir', pins, '-o', 'json').stdout) as { verdict: string; lines: string[] };
    expect(e.verdict).toBe('rewritten to a backend');
    expect(e.lines).toContain(`backends: [${ip6(web2)}]:8080 (local)`);
    // From outside, the twin of tc's IPv6 path: its one backend is on this node, so DNAT.
    const x = JSON.parse(ferry('explain', '[fd00:10::2]:40000', '[fd00:96::60]:80/tcp', '--pin-dir', pins, '--netns', c.net.node(1).host.netns, '-o', 'json').stdout) as { verdict: string; backend?: string };
    expect(x).toMatchObject({ verdict: 'TC_ACT_OK (on to the stack)', backend: `[${ip6(web2)}]:8080` });
    expect(rows.filter((x) => x.frontend.startsWith('10.96.0.60') || x.frontend.startsWith('[fd00:96::60]')).map((x) => [x.service, x.frontend, x.type, x.backends.map((b) => b.address)])).toEqual([
      ['default/dual:http', '10.96.0.60:80/tcp', 'ClusterIP', [`${web1.ip}:8080`]],
      ['default/dual:http', '[fd00:96::60]:80/tcp', 'ClusterIP', [`[${ip6(web2)}]:8080`]],
    ]);
  });

  it('the IPv6 family follows its slice; an unknown port is refused; the Service\'s removal takes both', async () => {
    applyObject(c, 'endpointslices', slice6('dual', [web1]));
    expect(await eventually(() => hostname(client.host, 'http://[fd00:96::60]/'), (h) => h === 'web-1-v6')).toBe('web-1-v6');
    expect(await hostname(client.host, 'http://[fd00:96::60]:81/')).toBe('error 7'); // refused at connect()
    c.store.delete('services', 'default', 'dual');
    expect(await eventually(() => hostname(client.host, 'http://[fd00:96::60]/'), (h) => h !== 'web-1-v6')).not.toBe('web-1-v6');
    expect(await eventually(() => hostname(client.host, 'http://10.96.0.60/'), (h) => h !== 'web-1')).not.toBe('web-1');
  });

  it('an IPv6-only Service: its ClusterIP works, and it gets no IPv4 NodePort', async () => {
    applyObject(c, 'services', { metadata: { name: 'only6', namespace: 'default' }, spec: { type: 'NodePort', clusterIP: 'fd00:96::61', clusterIPs: ['fd00:96::61'], ipFamilies: ['IPv6'], ports: [{ name: 'http', port: 80, nodePort: 30611, protocol: 'TCP' }] } });
    applyObject(c, 'endpointslices', slice6('only6', [web2]));
    expect(await eventually(() => hostname(client.host, 'http://[fd00:96::61]/'), (h) => h === 'web-2-v6')).toBe('web-2-v6');
    // No family of it has an IPv4 ClusterIP: no IPv4 NodePort either (kube-proxy's rule).
    const rows = JSON.parse(ferry('service', 'list', '--pin-dir', c.pinDir(c.net.node(1)), '-o', 'json').stdout) as Array<{ frontend: string }>;
    expect(rows.map((x) => x.frontend).filter((f) => f.includes(':30611/') || f.includes('fd00:96::61'))).toEqual(['[fd00:96::61]:80/tcp']);
  });

  it('IPv6 NodePorts on the node\'s IPv6 address, IPv6 LB IPs and externalIPs: balanced for a pod and the host; the node keeps its other ports', async () => {
    const NODE6 = 'fd00:30::1';
    const node = c.net.node(1).host;
    await node.ip('-6', 'addr', 'add', `${NODE6}/128`, 'dev', 'lo');
    node.spawn([process.execPath, '-e', WHOAMI6, JSON.stringify([NODE6, 'node-1-host', 9099])]);
    const n = c.store.get('nodes', undefined, 'node-1')!;
    const status = n.status as { addresses: Array<{ type: string; address: string }> };
    c.store.update('nodes', { ...n, status: { ...status, addresses: [...status.addresses, { type: 'InternalIP', address: NODE6 }] } }, { status: true });
    // Another class: the sandbox's operator leaves its status (the LB IP) alone.
    applyObject(c, 'services', {
      metadata: { name: 'lb6', namespace: 'default' },
      spec: {
        type: 'LoadBalancer', loadBalancerClass: 'example.com/other', externalTrafficPolicy: 'Local', clusterIP: '10.96.0.62', clusterIPs: ['10.96.0.62', 'fd00:96::62'], ipFamilies: ['IPv4', 'IPv6'], ipFamilyPolicy: 'RequireDualStack',
        externalIPs: ['fd00:e::1'], healthCheckNodePort: 32612, ports: [{ name: 'http', port: 80, nodePort: 30612, protocol: 'TCP' }],
      },
      status: { loadBalancer: { ingress: [{ ip: 'fd00:100::1' }] } },
    } as V1Service);
    applyObject(c, 'endpointslices', slice6('lb6', [web2]));
    for (const url of [`http://[${NODE6}]:30612/`, 'http://[fd00:100::1]/', 'http://[fd00:e::1]/']) {
      expect(await eventually(() => hostname(client.host, url), (h) => h === 'web-2-v6'), url).toBe('web-2-v6');
      expect(await hostname(node, url), `${url} from the host`).toBe('web-2-v6');
    }
    // The node's address is not the Service's: its own service there is reached.
    expect(await eventually(() => hostname(client.host, `http://[${NODE6}]:9099/`), (h) => h === 'node-1-host')).toBe('node-1-host');
    // The health check node port answers on the node's IPv6 address, counting the IPv6 endpoint.
    const health = async () => {
      const r = await client.host.exec(['curl', '-gsS', '--max-time', '3', `http://[${NODE6}]:32612/`], { timeoutMs: 8000 });
      return r.code === 0 ? (JSON.parse(r.stdout) as { localEndpoints: number }).localEndpoints : -1;
    };
    expect(await eventually(health, (n) => n === 1)).toBe(1);
    // The LB IP is the Service's alone: an unknown port is refused at connect().
    expect(await hostname(client.host, 'http://[fd00:100::1]:81/')).toBe('error 7');
    const rows = JSON.parse(ferry('service', 'list', '--pin-dir', c.pinDir(c.net.node(1)), '-o', 'json').stdout) as Array<{ service: string; frontend: string; type: string; flags: string[]; backends: Array<{ address: string; local: boolean }> }>;
    // ETP=Local: the external frontends have an internal entry for this node's pods and host.
    expect(rows.filter((x) => x.service === 'default/lb6:http' && x.frontend.startsWith('[') && x.flags.includes('internal')).map((x) => x.frontend).sort()).toEqual(['[fd00:100::1]:80/tcp', '[fd00:30::1]:30612/tcp', '[fd00:e::1]:80/tcp']);
    // web-2 runs on this node: its slots say so.
    expect(rows.filter((x) => x.service === 'default/lb6:http' && x.frontend.startsWith('[') && !x.flags.includes('internal')).map((x) => `${x.type} ${x.frontend} ${x.backends.map((b) => `${b.address}${b.local ? ' local' : ''}`).join()}`)).toEqual(
      ['LoadBalancer [fd00:100::1]:80/tcp', 'NodePort [fd00:30::1]:30612/tcp', 'ClusterIP [fd00:96::62]:80/tcp', 'ExternalIP [fd00:e::1]:80/tcp'].map((f) => `${f} [${ip6(web2)}]:8080 local`),
    );
  });
  it('IPv6 from outside: a client behind the router reaches the ETP=Local LB IP, NodePort and externalIP through tc, from its own address', async () => {
    const { router, client: outside } = c.net;
    const node = c.net.node(1).host;
    // The sandbox's links are IPv4 only: IPv6 on them, and the router sending the node's
    // IPv6 address and the Service's IPv6 addresses to the node.
    await linkIPv6({ router, client: outside, nodes: [node] });
    for (const a of ['fd00:30::1', 'fd00:100::1', 'fd00:e::1']) await router.ip('-6', 'route', 'replace', `${a}/128`, 'via', 'fd00:31::21');
    for (const url of ['http://[fd00:100::1]/', 'http://[fd00:30::1]:30612/', 'http://[fd00:e::1]/']) {
      const said = await eventually(async () => (await outside.exec(['curl', '-gsS', '--max-time', '3', url], { timeoutMs: 8000 })).stdout, (o) => o.includes('Hostname: web-2-v6'));
      // ETP=Local: the backend sees the client's own address.
      expect(said, url).toContain('RemoteAddr: fd00:10::2');
    }
    // The flows went through tc: both directions of each are in ct6.
    const flows = JSON.parse(ferry('ct', 'list', '--pin-dir', c.pinDir(c.net.node(1)), '-o', 'json').stdout) as Array<{ flow: string; backend: string }>;
    const mine = flows.filter((f) => f.flow.startsWith('[fd00:10::2]:'));
    expect(new Set(mine.map((f) => f.flow.split(' → ')[1]))).toEqual(new Set(['[fd00:100::1]:80/tcp', '[fd00:30::1]:30612/tcp', '[fd00:e::1]:80/tcp']));
    expect(new Set(mine.map((f) => f.backend))).toEqual(new Set([`[${ip6(web2)}]:8080`]));
    // The LB IP is the Service's alone: another port is dropped, not answered by the node.
    expect((await outside.exec(['curl', '-gsS', '--max-time', '2', 'http://[fd00:100::1]:81/'], { timeoutMs: 8000 })).code).toBe(28); // timed out
    // The node's own services on its IPv6 address are untouched.
    expect(await hostname(outside, 'http://[fd00:30::1]:9099/')).toBe('node-1-host');
    // A Service with no endpoint: port unreachable from its LB IP (kube-proxy's REJECT), so
    // the client's connect() is refused at once rather than timing out.
    applyObject(c, 'services', {
      metadata: { name: 'empty6', namespace: 'default' },
      spec: { type: 'LoadBalancer', loadBalancerClass: 'example.com/other', clusterIP: '10.96.0.64', clusterIPs: ['10.96.0.64', 'fd00:96::64'], ipFamilies: ['IPv4', 'IPv6'], ipFamilyPolicy: 'RequireDualStack', ports: [{ name: 'http', port: 80, nodePort: 30614, protocol: 'TCP' }] },
      status: { loadBalancer: { ingress: [{ ip: 'fd00:100::4' }] } },
    } as V1Service);
    await router.ip('-6', 'route', 'replace', 'fd00:100::4/128', 'via', 'fd00:31::21');
    const connectError = async () => (await outside.exec([process.execPath, '-e', "require('node:net').connect({ host: 'fd00:100::4', port: 80, timeout: 3000 }).on('error', (e) => { console.log(e.code); process.exit(0); }).on('timeout', () => { console.log('timeout'); process.exit(0); }).on('connect', () => { console.log('connected'); process.exit(0); })"], { timeoutMs: 8000 })).stdout.trim();
    const stat = (key: string) => (JSON.parse(ferry('map', 'dump', 'ferry_stats', '--pin-dir', c.pinDir(c.net.node(1)), '-o', 'json').stdout) as Array<{ key: string; packets: number }>).find((x) => x.key === key)?.packets ?? 0;
    const rejectedBefore = stat('STAT_ICMP_REJECT');
    expect(await eventually(connectError, (e) => e === 'ECONNREFUSED')).toBe('ECONNREFUSED');
    expect(stat('STAT_ICMP_REJECT')).toBeGreaterThan(rejectedBefore);

    // Path MTU: the router's link to the client carries 1280 bytes, the client's own 1500
    // (so its MSS asks for full segments). The router answers the pod's first full segment
    // with a Packet Too Big sent to the LB IP; tc hands it to the pod quoting the pod's own
    // tuple, or the response would never arrive (IPv6 routers do not fragment).
    web2.host.spawn([process.execPath, '-e', `require('node:http').createServer((q, s) => s.end('x'.repeat(30000))).listen(8083, '${ip6(web2)}')`]);
    applyObject(c, 'services', {
      metadata: { name: 'big6', namespace: 'default' },
      spec: { type: 'LoadBalancer', loadBalancerClass: 'example.com/other', externalTrafficPolicy: 'Local', clusterIP: '10.96.0.63', clusterIPs: ['10.96.0.63', 'fd00:96::63'], ipFamilies: ['IPv4', 'IPv6'], ipFamilyPolicy: 'RequireDualStack', ports: [{ name: 'http', port: 80, nodePort: 30613, protocol: 'TCP' }] },
      status: { loadBalancer: { ingress: [{ ip: 'fd00:100::3' }] } },
    } as V1Service);
    applyObject(c, 'endpointslices', slice6('big6', [web2], 8083));
    await router.ip('-6', 'route', 'replace', 'fd00:100::3/128', 'via', 'fd00:31::21');
    await router.ip('link', 'set', 'clients', 'mtu', '1280');
    const size = async () => {
      const r = await outside.exec(['curl', '-gsS', '--max-time', '5', '-o', '/dev/null', '-w', '%{size_download}', 'http://[fd00:100::3]/'], { timeoutMs: 10_000 });
      return r.code === 0 ? Number(r.stdout) : -r.code;
    };
    expect(await eventually(size, (n) => n === 30000)).toBe(30000);
    const related = JSON.parse(ferry('map', 'dump', 'ferry_stats', '--pin-dir', c.pinDir(c.net.node(1)), '-o', 'json').stdout) as Array<{ key: string; packets: number }>;
    expect(related.find((x) => x.key === 'STAT_ICMP_RELATED')!.packets).toBeGreaterThan(0);

    // With a default route to the router, as a real node has: a ping to the LB IP, which
    // tc does not serve, is dropped there rather than routed back until its hop limit ends.
    await node.ip('-6', 'route', 'replace', 'default', 'via', 'fd00:31::1');
    const drops = () => (JSON.parse(ferry('map', 'dump', 'ferry_drops', '--pin-dir', c.pinDir(c.net.node(1)), '-o', 'json').stdout) as Array<{ key: string; packets: number }>).find((x) => x.key === 'DROP_NOT_SERVED')?.packets ?? 0;
    const before = drops();
    const ping = await outside.exec(['ping', '-6', '-n', '-c', '2', '-i', '0.2', '-W', '1', 'fd00:100::1'], { timeoutMs: 10_000 });
    expect(ping.code).not.toBe(0);
    expect(ping.stdout).not.toMatch(/exceeded/i);
    expect(drops()).toBe(before + 2);
  });

  it('IPv6 loadBalancerSourceRanges: a client outside in a range reaches the LB IP, others are dropped; a pod is allowed or refused by its recorded IPv6 address', async () => {
    const { router, client: outside } = c.net;
    const ranged = (ranges: string[]): V1Service => ({
      metadata: { name: 'ranged6', namespace: 'default' },
      spec: {
        type: 'LoadBalancer', loadBalancerClass: 'example.com/other', externalTrafficPolicy: 'Local', clusterIP: '10.96.0.65', clusterIPs: ['10.96.0.65', 'fd00:96::65'], ipFamilies: ['IPv4', 'IPv6'], ipFamilyPolicy: 'RequireDualStack',
        loadBalancerSourceRanges: ranges, ports: [{ name: 'http', port: 80, nodePort: 30615, protocol: 'TCP' }],
      },
      status: { loadBalancer: { ingress: [{ ip: 'fd00:100::5' }] } },
    } as V1Service);
    // An IPv4 range beside: kube-proxy's IPv6 pass takes the IPv6 ones alone.
    applyObject(c, 'services', ranged(['fd00:10::2/128', '10.0.0.0/8']));
    applyObject(c, 'endpointslices', slice6('ranged6', [web2]));
    await router.ip('-6', 'route', 'replace', 'fd00:100::5/128', 'via', 'fd00:31::21');
    const fromOutside = async () => (await outside.exec(['curl', '-gsS', '--max-time', '2', '-o', '/dev/null', 'http://[fd00:100::5]/'], { timeoutMs: 8000 }).then((r) => r.code));
    expect(await eventually(fromOutside, (code) => code === 0)).toBe(0);
    // The pod's address is in no range: its connect() is refused (EPERM; curl cannot connect).
    expect(await hostname(client.host, 'http://[fd00:100::5]/')).toBe('error 7');
    const rows = JSON.parse(ferry('service', 'list', '--pin-dir', c.pinDir(c.net.node(1)), '-o', 'json').stdout) as Array<{ frontend: string; flags: string[] }>;
    expect(rows.find((x) => x.frontend === '[fd00:100::5]:80/tcp' && !x.flags.includes('internal'))?.flags).toContain('source-ranges');
    // Ranges that name the pod and not the client: the other way round.
    applyObject(c, 'services', ranged([`${ip6(client)}/128`]));
    expect(await eventually(() => hostname(client.host, 'http://[fd00:100::5]/'), (h) => h === 'web-2-v6')).toBe('web-2-v6');
    expect(await eventually(fromOutside, (code) => code === 28)).toBe(28); // dropped: timed out
    const drops = (JSON.parse(ferry('map', 'dump', 'ferry_drops', '--pin-dir', c.pinDir(c.net.node(1)), '-o', 'json').stdout) as Array<{ key: string; packets: number }>).find((x) => x.key === 'DROP_SOURCE_RANGE')?.packets ?? 0;
    expect(drops).toBeGreaterThan(0);
  });
});
