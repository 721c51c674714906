// The reconciler against real maps: Services and EndpointSlices in, packets checked with
// PROG_TEST_RUN after each sync; a removed backend never receives a new packet, and flows
// to it are flushed (kube-proxy's stale-flow flush).
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BackendFlags } from '../../src/datapath/layouts.js';
import type { Reconciler } from '../../src/agent/reconciler.js';
import { buildPacket, eth, ipv4, udp } from '../../src/packet/build.js';
import { decodePacket } from '../../src/packet/decode.js';
import { TcVerdict } from '../../src/sandbox/packet-fixture.js';
import { NODE_IP, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { nodeReconciler } from '../../src/sandbox/node-reconciler.js';
import { describeWith } from '../harness/requirements.js';

let node: DatapathNode;
let services: V1Service[] = [];
let slices: V1EndpointSlice[] = [];
const nodeObj: V1Node = { metadata: { name: 'node-1' }, status: { addresses: [{ type: 'InternalIP', address: NODE_IP }] } };
let r: Reconciler;
/** Syncs that told the agent a UDP backend went (its connected sockets are then destroyed). */
let udpRemovals = 0;

beforeAll(async () => {
  node = await datapathNode();
  r = nodeReconciler(node, { services: () => services, service: (ns, n) => services.find((s) => s.metadata?.namespace === ns && s.metadata?.name === n), slices: () => slices, node: () => nodeObj, nodes: () => [nodeObj] }, {
    onUdpBackendsRemoved: () => udpRemovals++,
  });
});
afterAll(async () => {
  await r?.stop();
  await node?.close();
});

const dns: V1Service = { metadata: { name: 'dns', namespace: 'kube-system' }, spec: { type: 'NodePort', clusterIP: '10.96.0.10', ports: [{ name: 'dns', port: 53, nodePort: 30053, protocol: 'UDP' }] } };
const slice = (ips: string[], terminating: string[] = []): V1EndpointSlice => ({
  metadata: { name: 'dns-1', namespace: 'kube-system', labels: { 'kubernetes.io/service-name': 'dns' } },
  addressType: 'IPv4',
  ports: [{ name: 'dns', port: 5353, protocol: 'UDP' }],
  endpoints: [
    ...ips.map((ip) => ({ addresses: [ip], nodeName: 'node-1', conditions: { ready: true } })),
    ...terminating.map((ip) => ({ addresses: [ip], nodeName: 'node-1', conditions: { ready: false, serving: true, terminating: true } })),
  ],
});
const query = (sport: number) => buildPacket([eth(), ipv4({ src: '10.0.10.2', dst: NODE_IP }), udp({ sport, dport: 30053 })]);
const dstOf = (p: Buffer) => String(decodePacket(p).find((l) => l.name === 'ipv4')!.fields.dst);

describeWith(['root', 'bpffs', 'netns'], 'reconciler', () => {
  it('programs a Service and follows its endpoints; never sends a new packet to a removed one', async () => {
    services = [dns];
    slices = [slice(['10.244.1.10'])];
    r.serviceChanged(dns);
    await r.syncNow();
    const first = node.run('tc_ingress', query(5000));
    expect(first.retval).toBe(TcVerdict.OK);
    expect(dstOf(first.data)).toBe('10.244.1.10');

    slices = [slice(['10.244.1.10', '10.244.1.11'])];
    r.sliceChanged(slices[0]!);
    await r.syncNow();
    const seen = new Set<string>();
    for (let p = 6000; p < 6100; p++) seen.add(dstOf(node.run('tc_ingress', query(p)).data));
    expect([...seen].sort()).toEqual(['10.244.1.10', '10.244.1.11']);

    expect(udpRemovals).toBe(0);
    slices = [slice(['10.244.1.11'])];
    r.sliceChanged(slices[0]!);
    await r.syncNow();
    expect(udpRemovals).toBe(1);
    // The UDP flow from port 5000 was on .10: flushed, so even it moves now.
    expect(node.dp.maps.ct4.entries().every(([, v]) => node.dp.maps.lb4_backends.lookup(v.backendId))).toBe(true);
    for (let p = 5000; p < 6100; p += 7) expect(dstOf(node.run('tc_ingress', query(p)).data)).toBe('10.244.1.11');
  });

  it('lets established flows to a terminating backend go on, while new flows avoid it', async () => {
    services = [dns];
    slices = [slice(['10.244.1.20', '10.244.1.21'])];
    r.sliceChanged(slices[0]!);
    await r.syncNow();
    node.flushState();
    // Find a flow on .21, then make .21 terminate.
    let port = 8000;
    while (dstOf(node.run('tc_ingress', query(port)).data) !== '10.244.1.21') port++;
    slices = [slice(['10.244.1.20'], ['10.244.1.21'])];
    r.sliceChanged(slices[0]!);
    await r.syncNow();
    expect(dstOf(node.run('tc_ingress', query(port)).data)).toBe('10.244.1.21'); // still served
    for (let p = 9000; p < 9100; p++) expect(dstOf(node.run('tc_ingress', query(p)).data)).toBe('10.244.1.20');
    expect(node.dp.maps.lb4_backends.entries().find(([, b]) => b.address === '10.244.1.21')?.[1].flags).toBe(BackendFlags.LB_BACKEND_F_LOCAL | BackendFlags.LB_BACKEND_F_TERMINATING);
    // Once it is gone from the slice, its flows move.
    slices = [slice(['10.244.1.20'])];
    r.sliceChanged(slices[0]!);
    await r.syncNow();
    expect(dstOf(node.run('tc_ingress', query(port)).data)).toBe('10.244.1.20');
  });

  it('deletes the frontends of a deleted Service, and flushes their flows even while their backends live on', async () => {
    // A second Service on the same endpoint keeps the backend: only the frontend goes.
    const twin: V1Service = { metadata: { name: 'dns-twin', namespace: 'kube-system' }, spec: { type: 'NodePort', clusterIP: '10.96.0.11', ports: [{ name: 'dns', port: 53, nodePort: 30054, protocol: 'UDP' }] } };
    const twinSlice: V1EndpointSlice = { ...slice(['10.244.1.20']), metadata: { name: 'dns-twin-1', namespace: 'kube-system', labels: { 'kubernetes.io/service-name': 'dns-twin' } } };
    services = [dns, twin];
    slices = [slice(['10.244.1.20']), twinSlice];
    r.serviceChanged(twin);
    r.sliceChanged(twinSlice);
    await r.syncNow();
    expect(dstOf(node.run('tc_ingress', query(7000)).data)).toBe('10.244.1.20');
    services = [twin];
    r.serviceChanged(dns);
    const before = udpRemovals;
    await r.syncNow();
    expect(udpRemovals).toBe(before); // the backend lives on for the twin: the periodic pass covers its sockets
    expect(node.dp.maps.lb4_services.entries().filter(([k]) => k.port === 30053)).toEqual([]);
    // The flow's packets skip the frontend lookup: only the flush ends it.
    expect(node.run('tc_ingress', query(7000)).retval).toBe(TcVerdict.UNSPEC); // passes, untouched, on to the next filter
    expect(dstOf(node.run('tc_ingress', query(7000)).data)).toBe(NODE_IP);
    services = [];
    r.serviceChanged(twin);
    await r.syncNow();
    expect(node.dp.maps.lb4_services.entries()).toEqual([]);
  });
});
