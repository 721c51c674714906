// The agent end to end: real `ferry agent` processes on two nodes, the test API server,
// Services and EndpointSlices created, changed and deleted, with traffic following; an
// agent restart under continuous traffic; the API server killed and restarted; kube-proxy's
// health servers and metrics; a malformed Service skipped while the rest keeps working.
import type { V1Service } from '@kubernetes/client-node';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Host } from '../../src/sandbox/netns/testbed.js';
import type { PodInfo } from '../../src/sandbox/network.js';
import { serviceHealthBody } from '../../src/agent/health.js';
import { mapSpecs } from '../../src/datapath/layouts.js';
import type { Sandbox } from '../../src/sandbox/sandbox.js';
import { agentCluster, applyObject, podWith, sliceFor } from '../harness/agent-cluster.js';
import { eventually } from '../harness/wait.js';
import { WORKLOADS } from '../../src/sandbox/mini-cluster.js';
import { PinnedDatapath } from '../../src/datapath/pinned-view.js';
import { describeWith } from '../harness/requirements.js';
import { agentSecurity } from '../../src/sandbox/manifests.js';
import type { StaleUdpSocketsStatus } from '../../src/agent/stale-sockets.js';
import { routesLine, udpSocketsLine } from '../../src/cli/inspect-commands.js';
import type { RouteChangesStatus } from '../../src/agent/route-changes.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from '../harness/paths.js';
import { TC_KIND, ferryTcPrograms } from '../harness/tc-programs.js';

let c: Sandbox;
let web1: PodInfo;
let web2: PodInfo;
let client1: PodInfo;

const web: V1Service = {
  metadata: { name: 'web', namespace: 'default' },
  spec: { type: 'NodePort', clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10'], ipFamilies: ['IPv4'], ports: [{ name: 'http', port: 80, targetPort: 8080 as never, nodePort: 30080, protocol: 'TCP' }] },
};
const local: V1Service = {
  metadata: { name: 'local', namespace: 'default' },
  spec: {
    type: 'LoadBalancer', clusterIP: '10.96.0.20', externalTrafficPolicy: 'Local', healthCheckNodePort: 32000,
    ports: [{ name: 'http', port: 80, targetPort: 8080 as never, nodePort: 30081, protocol: 'TCP' }],
  },
  status: { loadBalancer: { ingress: [{ ip: '10.0.100.20' }] } },
};

beforeAll(async () => {
  c = await agentCluster({ nodes: 2 });
  [web1, web2, client1] = await Promise.all([podWith(c, 'web-1', 1, { whoami: 8080 }), podWith(c, 'web-2', 2, { whoami: 8080 }), podWith(c, 'client-1', 1)]);
  applyObject(c, 'services', web);
  applyObject(c, 'endpointslices', sliceFor('web', [{ pod: web1 }], [{ name: 'http', port: 8080 }]));
});
afterAll(async () => {
  await c?.down();
});

async function hostname(from: Host, url: string): Promise<string> {
  const r = await from.exec(['curl', '-sS', '--max-time', '3', url], { timeoutMs: 8000 });
  return r.code === 0 ? (/Hostname: (\S+)/.exec(r.stdout)?.[1] ?? '?') : `error ${r.code}`;
}

const http = async (from: Host, url: string) => {
  const r = await from.exec(['curl', '-sS', '-i', '--max-time', '3', url]);
  const [head = '', body = ''] = r.stdout.split(/\r\n\r\n/);
  return { status: Number(/^HTTP\/1\.1 (\d+)/.exec(head)?.[1] ?? 0), head, body };
};

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'ferry agent', () => {
  it('programs a Service on every node', async () => {
    expect(await eventually(() => hostname(c.net.client, 'http://10.0.30.21:30080/'), (h) => h === 'web-1')).toBe('web-1');
    expect(await eventually(() => hostname(c.net.client, 'http://10.0.30.22:30080/'), (h) => h === 'web-1')).toBe('web-1');
    expect(await eventually(() => hostname(client1.host, 'http://10.96.0.10/'), (h) => h === 'web-1')).toBe('web-1');
  });

  it('follows EndpointSlice changes, and a deleted Service stops working', async () => {
    applyObject(c, 'endpointslices', sliceFor('web', [{ pod: web2 }], [{ name: 'http', port: 8080 }]));
    expect(await eventually(() => hostname(client1.host, 'http://10.96.0.10/'), (h) => h === 'web-2')).toBe('web-2');
    expect(await eventually(() => hostname(c.net.client, 'http://10.0.30.21:30080/'), (h) => h === 'web-2')).toBe('web-2');
    applyObject(c, 'services', { ...web, metadata: { name: 'gone', namespace: 'default' }, spec: { ...web.spec, clusterIP: '10.96.0.11', clusterIPs: ['10.96.0.11'], ports: [{ name: 'http', port: 80, nodePort: 30082, protocol: 'TCP' }] } });
    applyObject(c, 'endpointslices', sliceFor('gone', [{ pod: web1 }], [{ name: 'http', port: 8080 }]));
    expect(await eventually(() => hostname(c.net.client, 'http://10.0.30.21:30082/'), (h) => h === 'web-1')).toBe('web-1');
    c.store.delete('services', 'default', 'gone');
    // A connection caught mid-removal may be reset (curl 56); new ones are refused (curl 7).
    expect(await eventually(() => hostname(c.net.client, 'http://10.0.30.21:30082/'), (h) => h === 'error 7')).toBe('error 7');
    applyObject(c, 'endpointslices', sliceFor('web', [{ pod: web1 }], [{ name: 'http', port: 8080 }]));
    expect(await eventually(() => hostname(client1.host, 'http://10.96.0.10/'), (h) => h === 'web-1')).toBe('web-1');
  });

  it('destroys a pod\'s connected UDP socket when its backend leaves the Service, so that it connects again', async () => {
    const [dns1, dns2] = await Promise.all([podWith(c, 'dns-1', 1, { udpEcho: 5353 }), podWith(c, 'dns-2', 2, { udpEcho: 5353 })]);
    const dns: V1Service = { metadata: { name: 'dns', namespace: 'default' }, spec: { type: 'ClusterIP', clusterIP: '10.96.0.30', clusterIPs: ['10.96.0.30'], ports: [{ name: 'dns', port: 53, protocol: 'UDP' }] } };
    applyObject(c, 'services', dns);
    applyObject(c, 'endpointslices', sliceFor('dns', [{ pod: dns1 }], [{ name: 'dns', port: 5353, protocol: 'UDP' }]));
    // A client that connects once and sends a datagram every 100 ms: echoes while its backend serves.
    const script = `const s = require('dgram').createSocket('udp4');
let replies = 0;
s.on('error', (e) => { console.log('error ' + e.code + ' after ' + replies + ' replies'); process.exit(0); });
s.on('message', () => { if (replies++ === 0) console.log('reply'); });
s.connect(53, '10.96.0.30', () => setInterval(() => s.send('q', () => {}), 100));`;
    const client = client1.host.spawn([process.execPath, '-e', script]);
    try {
      expect(await eventually(async () => client.output(), (o) => o.includes('reply'), 15_000)).toContain('reply');
      applyObject(c, 'endpointslices', sliceFor('dns', [{ pod: dns2 }], [{ name: 'dns', port: 5353, protocol: 'UDP' }]));
      expect(await eventually(async () => client.output(), (o) => o.includes('error'), 15_000)).toMatch(/error ECONNABORTED after [1-9]/);
      const m = await c.net.node(1).host.execOk(['curl', '-sS', 'http://127.0.0.1:10249/metrics']);
      expect(Number(/^ferry_udp_sockets_terminated_total (\d+)/m.exec(m)?.[1])).toBeGreaterThanOrEqual(1);
      // ferry status: what the agent's /status says of it.
      const status = JSON.parse(await c.net.node(1).host.execOk(['curl', '-sS', 'http://127.0.0.1:10249/status'])) as { udpSockets: StaleUdpSocketsStatus };
      expect(status.udpSockets).toMatchObject({ enabled: true });
      expect(status.udpSockets.destroyed).toBeGreaterThanOrEqual(1);
      expect(udpSocketsLine(status.udpSockets)).toMatch(/^connected sockets to removed backends are terminated: [1-9]\d* so far in \d+ passes; last pass .*: \d+ namespaces, \d+ destroyed, \d+ ms$/);
    } finally {
      client.child.kill();
    }
    c.store.delete('services', 'default', 'dns');
  });

  it('serves kube-proxy health: /healthz, /livez and the health check node port of an ETP=Local Service', async () => {
    applyObject(c, 'services', local);
    applyObject(c, 'endpointslices', sliceFor('local', [{ pod: web1 }], [{ name: 'http', port: 8080 }]));
    const n1 = c.net.node(1).host;
    const n2 = c.net.node(2).host;
    const hz = await http(n1, 'http://127.0.0.1:10256/healthz');
    expect(hz.status).toBe(200);
    expect(hz.head).toMatch(/Content-Type: application\/json/i);
    expect(hz.head).toMatch(/X-Content-Type-Options: nosniff/i);
    expect(hz.body).toMatch(/^\{"lastUpdated": "[\d-]+T[\d:.]+Z","currentTime": "[\d-]+T[\d:.]+Z", "nodeEligible": true\}$/);
    expect((await http(n1, 'http://127.0.0.1:10256/livez')).body).toMatch(/^\{"lastUpdated": "[^"]+","currentTime": "[^"]+"\}$/);
    const on1 = await eventually(() => http(n1, 'http://10.0.30.21:32000/'), (r) => r.status === 200);
    expect(on1.body).toBe(serviceHealthBody('default', 'local', 1, true));
    expect(on1.body).toBe('{\n\t"service": {\n\t\t"namespace": "default",\n\t\t"name": "local"\n\t},\n\t"localEndpoints": 1,\n\t"serviceProxyHealthy": true\n}');
    expect(on1.head).toMatch(/X-Load-Balancing-Endpoint-Weight: 1/i);
    const on2 = await eventually(() => http(n2, 'http://10.0.30.22:32000/'), (r) => r.status === 503);
    expect(on2.body).toBe(serviceHealthBody('default', 'local', 0, true));
    // A terminating endpoint does not count: node-1 answers 503 too.
    applyObject(c, 'endpointslices', sliceFor('local', [{ pod: web1, ready: false, terminating: true }], [{ name: 'http', port: 8080 }]));
    expect((await eventually(() => http(n1, 'http://10.0.30.21:32000/'), (r) => r.status === 503)).status).toBe(503);
  });

  it('exposes kube-proxy metrics and its own, and /proxyMode', async () => {
    const n1 = c.net.node(1).host;
    const m = (await n1.execOk(['curl', '-sS', 'http://127.0.0.1:10249/metrics'])).split('\n');
    const value = (name: string) => Number(m.find((l) => l.startsWith(name))?.split(' ').at(-1));
    expect(value('kubeproxy_sync_proxy_rules_duration_seconds_count')).toBeGreaterThan(0);
    expect(value('kubeproxy_sync_proxy_rules_last_timestamp_seconds')).toBeGreaterThan(1e9);
    expect(value('kubeproxy_network_programming_duration_seconds_count')).toBeGreaterThan(0);
    expect(value('kubeproxy_sync_proxy_rules_endpoint_changes_total')).toBeGreaterThan(0);
    expect(value('ferry_map_entries{map="lb4_services"}')).toBeGreaterThan(0);
    expect(value('ferry_map_capacity{map="ct4"}')).toBe(131072);
    expect(value('ferry_datapath_packets_total{path="fwd_local"}')).toBeGreaterThan(0);
    expect(m.some((l) => l.startsWith('ferry_datapath_drops_total{reason="unknown_port"}'))).toBe(true);
    // The route monitor runs (its start counts as a change) and its changes reach the datapath.
    expect(value('ferry_route_changes_total')).toBeGreaterThanOrEqual(1);
    expect(PinnedDatapath.with(c.pinDir(c.net.node(1)), (dp) => dp.map('ferry_hop_epoch').lookup(0)?.sinceNs ?? 0n)).toBeGreaterThan(0n);
    expect(value('ferry_route_monitor_up')).toBe(1);
    const { routes } = JSON.parse(await n1.execOk(['curl', '-sS', 'http://127.0.0.1:10249/status'])) as { routes: RouteChangesStatus };
    expect(routes).toMatchObject({ watching: true, starts: 1 });
    expect(routes.written).toBeGreaterThanOrEqual(1);
    expect(routesLine(routes)).toMatch(/^watched by ip monitor \(pid \d+, started 1x\): [1-9]\d* change\(s\) written, last \d{4}-/);
    expect(await n1.execOk(['curl', '-sS', 'http://127.0.0.1:10249/proxyMode'])).toBe('ebpf');
  });

  it('serves every metric the Grafana dashboard (deploy/grafana/ferry.json) queries: the agent or the operator', async () => {
    const dashboard = JSON.parse(readFileSync(join(REPO_ROOT, 'deploy', 'grafana', 'ferry.json'), 'utf8')) as { panels: Array<{ targets?: Array<{ expr: string }> }> };
    const queried = new Set(dashboard.panels.flatMap((p) => p.targets ?? []).flatMap((t) => [...t.expr.matchAll(/\b(?:kubeproxy|ferry|process|nodejs)_[a-z0-9_]+/g)].map((m) => m[0])));
    expect(queried.size).toBeGreaterThan(30);
    const n1 = c.net.node(1).host;
    const served = (await n1.execOk(['curl', '-sS', 'http://127.0.0.1:10249/metrics'])) + (await n1.execOk(['curl', '-sS', 'http://127.0.0.1:9253/metrics']));
    // A sample, or for a labelled metric nothing has happened to yet, its TYPE line.
    const has = (name: string) => new RegExp(`^${name}[{ ]`, 'm').test(served) || new RegExp(`^# TYPE ${name.replace(/_(bucket|sum|count)$/, '')} `, 'm').test(served);
    expect([...queried].filter((m) => !has(m))).toEqual([]);
    expect(has('ferry_not_a_metric')).toBe(false);
  });

  it('skips a malformed Service with an Event and a metric; everything else keeps working', async () => {
    applyObject(c, 'services', { metadata: { name: 'broken', namespace: 'default' }, spec: { clusterIP: '10.96.0.99', ports: [{ name: 'a', port: 80 }, { name: 'b', port: 80 }] } });
    const events = await eventually(async () => c.store.list('events'), (evs) => evs.some((e) => (e.involvedObject as { name?: string })?.name === 'broken'));
    const ev = events.find((e) => (e.involvedObject as { name?: string })?.name === 'broken')!;
    expect(ev).toMatchObject({ reason: 'FerryRejected', type: 'Warning' });
    expect(String(ev.message)).toMatch(/port 80\/TCP is listed twice/);
    expect(await hostname(client1.host, 'http://10.96.0.10/')).toBe('web-1');
    const m = await c.net.node(1).host.execOk(['curl', '-sS', 'http://127.0.0.1:10249/metrics']);
    expect(m).toMatch(/ferry_rejected_objects_total\{kind="Service"\} 1/);
    c.store.delete('services', 'default', 'broken');
  });

  it('answers /livez from its start while the API server is away, /readyz once synced; with no devices named it chooses the node\'s', async () => {
    const node1 = c.net.node(1);
    const get = async (path: string) => (await node1.host.exec(['curl', '-s', '-o', '/dev/null', '-w', '%{http_code}', '--max-time', '1', `http://127.0.0.1:10256${path}`])).stdout;
    await c.stopAgent(node1);
    await c.api.stop();
    const starting = c.startAgent(node1, 60_000, { devices: '' });
    try {
      await eventually(() => get('/livez'), (s) => s === '200', 15_000);
      expect(await get('/readyz')).toBe('503');
    } finally {
      await c.api.start();
    }
    const agent = await starting;
    expect(await get('/readyz')).toBe('200');
    expect(agent.output()).toMatch(/"devices":\["eth0"\],"devicesFrom":"node addresses and default routes"/);
    expect(await hostname(c.net.client, 'http://10.0.30.21:30080/')).toMatch(/^web-/);
  });

  it('attaches to a device that appears later and matches its pattern, and forgets it when it goes', async () => {
    const node1 = c.net.node(1);
    await c.stopAgent(node1);
    const agent = await c.startAgent(node1, 60_000, { devices: 'eth0|hot[0-9]+', env: { FERRY_DEVICE_SCAN_SECONDS: '1' } });
    const filters = async () => ferryTcPrograms(node1.host.netns, 'hot0').join(',');
    await node1.host.ip('link', 'add', 'hot0', 'type', 'veth', 'peer', 'name', 'cold0');
    try {
      await node1.host.ip('link', 'set', 'hot0', 'up');
      expect(await eventually(filters, (f) => f.includes('tc_ingress'), 10_000), agent.output().slice(-3000)).toContain('tc_ingress');
      // The log line follows the attach: wait for it too (it lost that race once under load).
      expect(await eventually(async () => agent.output(), (o) => o.includes('"device":"hot0","msg":"device attached"'), 5000)).toMatch(/"device":"hot0","msg":"device attached"/);
      expect(ferryTcPrograms(node1.host.netns, 'cold0')).toEqual([]);
    } finally {
      await node1.host.exec(['ip', 'link', 'del', 'hot0']);
    }
    await eventually(async () => agent.output(), (o) => o.includes('"device":"hot0","msg":"device gone"'), 10_000);
    expect(await hostname(c.net.client, 'http://10.0.30.21:30080/')).toMatch(/^web-/);
  });

  it('takes its programs off a device the previous agent served and this one does not', async () => {
    const node1 = c.net.node(1);
    const filters = async () => ferryTcPrograms(node1.host.netns, 'spare0').join(',');
    await node1.host.ip('link', 'add', 'spare0', 'type', 'veth', 'peer', 'name', 'spare1');
    try {
      await node1.host.ip('link', 'set', 'spare0', 'up');
      await c.stopAgent(node1);
      await c.startAgent(node1, 60_000, { devices: 'eth0,spare0' });
      expect(await filters()).toContain('tc_ingress');
      await c.stopAgent(node1); // its filters stay, as across any restart
      expect(await filters()).toContain('tc_ingress');
      const agent = await c.startAgent(node1, 60_000, { devices: 'eth0' });
      expect(await filters()).not.toContain('tc_ingress');
      expect(agent.output()).toContain(`"detachedElsewhere":["${TC_KIND} ingress spare0","${TC_KIND} egress spare0"]`);
      expect(await hostname(c.net.client, 'http://10.0.30.21:30080/')).toMatch(/^web-/);
    } finally {
      await node1.host.exec(['ip', 'link', 'del', 'spare0']);
    }
  });

  it('runs with only the capabilities the DaemonSet grants (no privileged), and not without CAP_SYS_ADMIN', async () => {
    const node1 = c.net.node(1);
    const granted = daemonSetCapabilities();
    expect(granted).toEqual(['BPF', 'NET_ADMIN', 'SYS_ADMIN', 'NET_RAW']);
    await c.stopAgent(node1);
    const agent = await c.startAgent(node1, 60_000, { capabilities: granted.map((x) => x.toLowerCase()) });
    expect(agent.output()).toMatch(/"adopted":\d+/);
    expect(await hostname(c.net.client, 'http://10.0.30.21:30080/')).toMatch(/^web-/);
    // The UDP socket terminator (an iterator: a tracing program) loads with them too.
    expect(agent.output()).not.toMatch(/connected UDP sockets are not terminated/);
    expect((JSON.parse(await node1.host.execOk(['curl', '-sS', 'http://127.0.0.1:10249/status'])) as { udpSockets: StaleUdpSocketsStatus }).udpSockets.enabled).toBe(true);
    // Adopting the pinned maps reads their BTF by id, which the kernel allows CAP_SYS_ADMIN only.
    await c.stopAgent(node1);
    await expect(c.startAgent(node1, 15_000, { capabilities: granted.filter((x) => x !== 'SYS_ADMIN').map((x) => x.toLowerCase()) })).rejects.toThrow(/EPERM|not permitted/);
    await c.stopAgent(node1);
    await c.startAgent(node1);
  });

  it('restarts under continuous traffic without a single failed connection', async () => {
    const node1 = c.net.node(1);
    const load = c.net.client.spawn([process.execPath, WORKLOADS, 'connect-latency', '--to', '10.0.30.21:30080', '--count', '4000']);
    await new Promise((r) => setTimeout(r, 300));
    await c.stopAgent(node1);
    await c.startAgent(node1);
    await load.exited;
    const result = JSON.parse(load.output().trim().split('\n').at(-1)!) as { count: number; failures: number };
    expect(result.failures).toBe(0);
    expect(result.count).toBe(4000);
    // Every map was adopted from the pins, none made anew.
    const restarted = c.agents.get(node1.name)!.output();
    expect(Number(/"adopted":(\d+)/.exec(restarted)?.[1])).toBeGreaterThanOrEqual(Object.keys(mapSpecs).length);
    expect(Number(/"created":(\d+)/.exec(restarted)?.[1])).toBe(0);
  });

  it('keeps traffic flowing while the API server is down, and applies changes made meanwhile', async () => {
    await c.api.stop();
    expect(await hostname(c.net.client, 'http://10.0.30.21:30080/')).toBe('web-1');
    applyObject(c, 'endpointslices', sliceFor('web', [{ pod: web2 }], [{ name: 'http', port: 8080 }]));
    await new Promise((r) => setTimeout(r, 500));
    expect(await hostname(c.net.client, 'http://10.0.30.21:30080/')).toBe('web-1'); // nothing seen yet
    await c.api.start();
    expect(await eventually(() => hostname(c.net.client, 'http://10.0.30.21:30080/'), (h) => h === 'web-2', 30_000)).toBe('web-2');
  });
});

/** The agent container's added capabilities, from deploy/kubernetes/base/agent.yaml. */
function daemonSetCapabilities(): string[] {
  const sc = agentSecurity();
  expect(sc.privileged).toBe(false);
  expect(sc.hostPID).toBe(false);
  expect(sc.drop).toEqual(['ALL']);
  return sc.add;
}
