// PROG_TEST_RUN fixtures for every north-south path of tc_ingress/tc_egress, with the
// exact packet each must produce. Maps are seeded through the same ServiceWriter the agent
// uses.
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { DropReason, Stat } from '../../src/datapath/layouts.js';
import type { FrontendSpec } from '../../src/model/frontend.js';
import { buildPacket, eth, icmp, ipv4, payload, tcp, udp, type Layer } from '../../src/packet/build.js';
import { decodePacket } from '../../src/packet/decode.js';
import { flowHash4 } from '../../src/datapath/reference/hash.js';
import { diffPackets } from '../../src/packet/diff.js';
import { TcVerdict } from '../harness/fixture.js';
import {
  CLIENT_IP, NODE_IP, NODE_MAC, OTHER_NODE_MAC, ROUTER_MAC, datapathNode, total, type DatapathNode,
} from '../harness/datapath-node.js';
import { describeWith } from '../harness/requirements.js';

const LOCAL_POD = '10.244.1.5';
const REMOTE_POD = '10.244.2.7';
const LB_IP = '10.0.100.10';
const EXTERNAL_IP = '10.0.30.200';
const CLUSTER_IP = '10.96.0.10';

const services: FrontendSpec[] = [
  { address: NODE_IP, port: 30080, proto: 'TCP', kind: 'NodePort', backends: [{ address: LOCAL_POD, port: 8080, local: true }] },
  { address: NODE_IP, port: 30081, proto: 'TCP', kind: 'NodePort', backends: [{ address: REMOTE_POD, port: 8080, local: false }] },
  { address: NODE_IP, port: 30053, proto: 'UDP', kind: 'NodePort', backends: [{ address: LOCAL_POD, port: 5353, local: true }] },
  { address: NODE_IP, port: 30090, proto: 'TCP', kind: 'NodePort', backends: [] },
  { address: NODE_IP, port: 30091, proto: 'TCP', kind: 'NodePort', backends: [], dropWhenEmpty: true },
  { address: LB_IP, port: 80, proto: 'TCP', kind: 'LoadBalancer', backends: [{ address: REMOTE_POD, port: 8080, local: false }] },
  { address: EXTERNAL_IP, port: 80, proto: 'TCP', kind: 'ExternalIP', backends: [{ address: LOCAL_POD, port: 8080, local: true }] },
  { address: CLUSTER_IP, port: 53, proto: 'UDP', kind: 'ClusterIP', backends: [{ address: LOCAL_POD, port: 5353, local: true }] },
  { address: '10.0.100.20', port: 80, proto: 'TCP', kind: 'LoadBalancer', backends: [{ address: LOCAL_POD, port: 8080, local: true }], sourceRanges: ['10.0.10.0/25', '192.168.7.7/32'] },
];

let node: DatapathNode;
beforeAll(async () => {
  node = await datapathNode();
  node.writer.apply(services);
});
afterAll(async () => {
  await node?.close();
});
beforeEach(() => node.flushState());

const fromRouter = eth({ src: ROUTER_MAC, dst: NODE_MAC });

function expectPacket(got: Buffer, want: Buffer): void {
  const d = diffPackets(want, got);
  expect(d.lines, 'packet differs').toEqual([]);
  for (const l of decodePacket(got)) {
    if ('checksumValid' in l.fields) expect(l.fields.checksumValid, `${l.name} checksum`).toBe(true);
  }
}

const syn = (dst: string, dport: number, extra: Partial<{ sport: number; src: string; ttl: number }> = {}): Layer[] => [
  fromRouter,
  ipv4({ src: extra.src ?? CLIENT_IP, dst, ttl: extra.ttl ?? 63, id: 0x1234 }),
  tcp({ sport: extra.sport ?? 62000, dport, flags: 'S', seq: 1000 }),
];

describeWith(['root', 'bpffs', 'netns'], 'tc datapath fixtures', () => {
  it('NodePort, local backend: DNAT only, handed to the stack', () => {
    const r = node.run('tc_ingress', buildPacket(syn(NODE_IP, 30080)));
    expect(r.retval).toBe(TcVerdict.OK);
    expectPacket(r.data, buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: LOCAL_POD, ttl: 63, id: 0x1234 }), tcp({ sport: 62000, dport: 8080, flags: 'S', seq: 1000 })]));
    expect(total(node.dp, 'ferry_stats', Stat.STAT_FWD_LOCAL)).toBe(1n);
  });

  it('NodePort, remote backend: DNAT + SNAT to the node, TTL down, redirected to the next hop', () => {
    const r = node.run('tc_ingress', buildPacket(syn(NODE_IP, 30081)));
    expect(r.retval).toBe(TcVerdict.REDIRECT);
    expectPacket(
      r.data,
      buildPacket([eth({ src: NODE_MAC, dst: OTHER_NODE_MAC }), ipv4({ src: NODE_IP, dst: REMOTE_POD, ttl: 62, id: 0x1234 }), tcp({ sport: 62000, dport: 8080, flags: 'S', seq: 1000 })]),
    );
    const [, ct] = node.dp.maps.ct4.entries()[0]!;
    expect(ct).toMatchObject({ natAddr: NODE_IP, natPort: 62000 });
  });

  it('the reply from the remote backend goes back to the client from the NodePort', () => {
    node.run('tc_ingress', buildPacket(syn(NODE_IP, 30081)));
    const reply = buildPacket([eth({ src: OTHER_NODE_MAC, dst: NODE_MAC }), ipv4({ src: REMOTE_POD, dst: NODE_IP, ttl: 63, id: 7 }), tcp({ sport: 8080, dport: 62000, flags: 'SA', seq: 5000, ack: 1001 })]);
    const r = node.run('tc_ingress', reply);
    expect(r.retval).toBe(TcVerdict.REDIRECT);
    expectPacket(r.data, buildPacket([eth({ src: NODE_MAC, dst: ROUTER_MAC }), ipv4({ src: NODE_IP, dst: CLIENT_IP, ttl: 62, id: 7 }), tcp({ sport: 30081, dport: 62000, flags: 'SA', seq: 5000, ack: 1001 })]));
    expect(total(node.dp, 'ferry_stats', Stat.STAT_REPLY_REMOTE)).toBe(1n);
  });

  it('a second client on the same port gets another SNAT port', () => {
    node.run('tc_ingress', buildPacket(syn(NODE_IP, 30081)));
    const r = node.run('tc_ingress', buildPacket(syn(NODE_IP, 30081, { src: '10.0.10.3' })));
    expect(r.retval).toBe(TcVerdict.REDIRECT);
    const sport = decodePacket(r.data).find((l) => l.name === 'tcp')!.fields.sport as number;
    expect(sport).not.toBe(62000);
    expect(sport).toBeGreaterThanOrEqual(61000);
  });

  it('the reply from a local backend leaves as the NodePort (tc egress)', () => {
    node.run('tc_ingress', buildPacket(syn(NODE_IP, 30080)));
    const reply = buildPacket([eth({ src: NODE_MAC, dst: ROUTER_MAC }), ipv4({ src: LOCAL_POD, dst: CLIENT_IP, ttl: 63, id: 9 }), tcp({ sport: 8080, dport: 62000, flags: 'SA', seq: 1, ack: 1001 })]);
    const r = node.run('tc_egress', reply);
    expect(r.retval).toBe(TcVerdict.OK);
    expectPacket(r.data, buildPacket([eth({ src: NODE_MAC, dst: ROUTER_MAC }), ipv4({ src: NODE_IP, dst: CLIENT_IP, ttl: 63, id: 9 }), tcp({ sport: 30080, dport: 62000, flags: 'SA', seq: 1, ack: 1001 })]));
  });

  it('a client reopening its port after a reset: the new SYN-ACK from the local backend still leaves as the NodePort', () => {
    const fromPod = (flags: string) => buildPacket([eth({ src: NODE_MAC, dst: ROUTER_MAC }), ipv4({ src: LOCAL_POD, dst: CLIENT_IP, ttl: 63, id: 9 }), tcp({ sport: 8080, dport: 62000, flags, seq: 1, ack: 1001 })]);
    node.run('tc_ingress', buildPacket(syn(NODE_IP, 30080)));
    node.run('tc_egress', fromPod('SA'));
    node.run('tc_ingress', buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 63, id: 0x1234 }), tcp({ sport: 62000, dport: 30080, flags: 'R', seq: 1001 })]));
    node.run('tc_ingress', buildPacket(syn(NODE_IP, 30080)));
    const r = node.run('tc_egress', fromPod('SA'));
    expectPacket(r.data, buildPacket([eth({ src: NODE_MAC, dst: ROUTER_MAC }), ipv4({ src: NODE_IP, dst: CLIENT_IP, ttl: 63, id: 9 }), tcp({ sport: 30080, dport: 62000, flags: 'SA', seq: 1, ack: 1001 })]));
  });

  it('LoadBalancer IP with a remote backend, and externalIP with a local one', () => {
    const lb = node.run('tc_ingress', buildPacket(syn(LB_IP, 80)));
    expect(lb.retval).toBe(TcVerdict.REDIRECT);
    expectPacket(lb.data, buildPacket([eth({ src: NODE_MAC, dst: OTHER_NODE_MAC }), ipv4({ src: NODE_IP, dst: REMOTE_POD, ttl: 62, id: 0x1234 }), tcp({ sport: 62000, dport: 8080, flags: 'S', seq: 1000 })]));
    const ext = node.run('tc_ingress', buildPacket(syn(EXTERNAL_IP, 80)));
    expect(ext.retval).toBe(TcVerdict.OK);
    expectPacket(ext.data, buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: LOCAL_POD, ttl: 63, id: 0x1234 }), tcp({ sport: 62000, dport: 8080, flags: 'S', seq: 1000 })]));
  });

  it('UDP NodePort: DNAT with the UDP checksum updated; a zero checksum stays zero', () => {
    const data = [fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 63 })];
    const r = node.run('tc_ingress', buildPacket([...data, udp({ sport: 5000, dport: 30053 }), payload('query')]));
    expect(r.retval).toBe(TcVerdict.OK);
    expectPacket(r.data, buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: LOCAL_POD, ttl: 63 }), udp({ sport: 5000, dport: 5353 }), payload('query')]));
    const noCsum = node.run('tc_ingress', buildPacket([...data, udp({ sport: 5001, dport: 30053, checksum: 0 }), payload('query')]));
    expectPacket(noCsum.data, buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: LOCAL_POD, ttl: 63 }), udp({ sport: 5001, dport: 5353, checksum: 0 }), payload('query')]));
  });

  it('no backend: ICMP port unreachable from the Service address back out the same device', () => {
    const input = buildPacket(syn(NODE_IP, 30090));
    const r = node.run('tc_ingress', input);
    expect(r.retval).toBe(TcVerdict.REDIRECT);
    const quote = input.subarray(14, 14 + 28);
    expectPacket(
      r.data,
      buildPacket([eth({ src: NODE_MAC, dst: ROUTER_MAC }), ipv4({ src: NODE_IP, dst: CLIENT_IP, tos: 0xc0, ttl: 64, id: 0, df: false }), icmp({ type: 3, code: 3 }), payload(quote)]),
    );
    expect(total(node.dp, 'ferry_stats', Stat.STAT_ICMP_REJECT)).toBe(1n);
  });

  it('no local backend under a Local traffic policy: dropped, not rejected', () => {
    const r = node.run('tc_ingress', buildPacket(syn(NODE_IP, 30091)));
    expect(r.retval).toBe(TcVerdict.SHOT);
    expect(total(node.dp, 'ferry_drops', DropReason.DROP_NO_LOCAL_BACKEND)).toBe(1n);
  });

  it('a known Service address on an unknown port is dropped and counted', () => {
    const r = node.run('tc_ingress', buildPacket(syn(LB_IP, 8443)));
    expect(r.retval).toBe(TcVerdict.SHOT);
    expect(total(node.dp, 'ferry_drops', DropReason.DROP_UNKNOWN_PORT)).toBe(1n);
  });

  it('loadBalancerSourceRanges: sources in a range pass, others are dropped before translation', () => {
    expect(node.run('tc_ingress', buildPacket(syn('10.0.100.20', 80))).retval).toBe(TcVerdict.OK);
    expect(node.run('tc_ingress', buildPacket(syn('10.0.100.20', 80, { src: '192.168.7.7' }))).retval).toBe(TcVerdict.OK);
    const denied = buildPacket(syn('10.0.100.20', 80, { src: '10.0.10.200' }));
    const r = node.run('tc_ingress', denied);
    expect(r.retval).toBe(TcVerdict.SHOT);
    expectPacket(r.data, denied);
    expect(total(node.dp, 'ferry_drops', DropReason.DROP_SOURCE_RANGE)).toBe(1n);
    // Ranges follow the Service: widen them, and the source passes.
    node.writer.apply(services.map((s) => (s.address === '10.0.100.20' ? { ...s, sourceRanges: ['10.0.10.0/24'] } : s)));
    expect(node.run('tc_ingress', denied).retval).toBe(TcVerdict.OK);
    expect(node.dp.maps.lb4_src_ranges.keys().next().value).toMatchObject({ prefixlen: 56, source: '10.0.10.0' });
    node.writer.apply(services);
  });

  it('sessionAffinity ClientIP: a client keeps its backend across flows until the timeout', async () => {
    const pods = ['10.244.1.31', '10.244.1.32', '10.244.1.33', '10.244.1.34'];
    const sticky: FrontendSpec = { address: '10.0.100.30', port: 80, proto: 'TCP', kind: 'LoadBalancer', service: 'default/sticky:http', affinityTimeout: 1, backends: pods.map((a) => ({ address: a, port: 8080, local: true })) };
    node.writer.apply([...services, sticky]);
    try {
      const to = (src: string, sport: number) => String(decodePacket(node.run('tc_ingress', buildPacket(syn('10.0.100.30', 80, { src, sport }))).data).find((l) => l.name === 'ipv4')!.fields.dst);
      const first = to(CLIENT_IP, 20000);
      for (let p = 20001; p < 20030; p++) expect(to(CLIENT_IP, p)).toBe(first);
      // Other clients are spread as usual.
      const others = new Set(Array.from({ length: 40 }, (_, i) => to(`10.0.10.${100 + i}`, 20000)));
      expect(others.size).toBeGreaterThan(1);
      // After the timeout the flow hash decides again: find a flow whose hash points elsewhere.
      await new Promise((r) => setTimeout(r, 1100));
      const slotOf = (sport: number) => pods[flowHash4(CLIENT_IP, '10.0.100.30', sport, 80, 6, 0x5eed) % pods.length]!;
      let sport = 21000;
      while (slotOf(sport) === first) sport++;
      expect(to(CLIENT_IP, sport)).toBe(slotOf(sport));
    } finally {
      node.writer.apply(services);
    }
  });

  it('traffic that is not for a Service passes untouched', () => {
    const input = buildPacket(syn('10.0.30.99', 22));
    const r = node.run('tc_ingress', input);
    expect(r.retval).toBe(TcVerdict.OK);
    expectPacket(r.data, input);
  });

  it('an established flow keeps its backend; one whose backend vanished is re-balanced', () => {
    const two: FrontendSpec[] = services.map((s) =>
      s.port === 30080 ? { ...s, backends: [{ address: LOCAL_POD, port: 8080, local: true }, { address: '10.244.1.6', port: 8080, local: true }] } : s,
    );
    node.writer.apply(two);
    try {
      const first = node.run('tc_ingress', buildPacket(syn(NODE_IP, 30080, { sport: 41000 })));
      const chosen = decodePacket(first.data).find((l) => l.name === 'ipv4')!.fields.dst;
      for (let i = 0; i < 5; i++) {
        const again = node.run('tc_ingress', buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP }), tcp({ sport: 41000, dport: 30080, flags: 'A' })]));
        expect(decodePacket(again.data).find((l) => l.name === 'ipv4')!.fields.dst).toBe(chosen);
      }
      // Remove the chosen backend: the flow moves to the one left.
      const left = chosen === LOCAL_POD ? '10.244.1.6' : LOCAL_POD;
      node.writer.apply(services.map((s) => (s.port === 30080 ? { ...s, backends: [{ address: left, port: 8080, local: true }] } : s)));
      const moved = node.run('tc_ingress', buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP }), tcp({ sport: 41000, dport: 30080, flags: 'A' })]));
      expect(decodePacket(moved.data).find((l) => l.name === 'ipv4')!.fields.dst).toBe(left);
      expect(total(node.dp, 'ferry_stats', Stat.STAT_CT_REBALANCED)).toBe(1n);
    } finally {
      node.writer.apply(services);
    }
  });

  it('ICMP fragmentation-needed about a reply is translated to the local backend (PMTU)', () => {
    node.run('tc_ingress', buildPacket(syn(NODE_IP, 30080)));
    // A router near the client could not forward our 1500-byte reply (NodePort → client).
    const quoted = buildPacket([ipv4({ src: NODE_IP, dst: CLIENT_IP, ttl: 62, id: 77 }), tcp({ sport: 30080, dport: 62000, flags: 'A', seq: 1 })]).subarray(0, 28);
    const err = buildPacket([fromRouter, ipv4({ src: '10.0.10.1', dst: NODE_IP, ttl: 64, id: 5 }), icmp({ type: 3, code: 4, rest: 1400 }), payload(quoted)]);
    const r = node.run('tc_ingress', err);
    expect(r.retval).toBe(TcVerdict.OK);
    const wantQuote = buildPacket([ipv4({ src: LOCAL_POD, dst: CLIENT_IP, ttl: 62, id: 77 }), tcp({ sport: 8080, dport: 62000, flags: 'A', seq: 1 })]).subarray(0, 28);
    expectPacket(r.data, buildPacket([fromRouter, ipv4({ src: '10.0.10.1', dst: LOCAL_POD, ttl: 64, id: 5 }), icmp({ type: 3, code: 4, rest: 1400 }), payload(wantQuote)]));
    expect(total(node.dp, 'ferry_stats', Stat.STAT_ICMP_RELATED)).toBe(1n);
  });

  it('ICMP fragmentation-needed about an SNATed packet is translated back to the client', () => {
    node.run('tc_ingress', buildPacket(syn(NODE_IP, 30081)));
    const quoted = buildPacket([ipv4({ src: NODE_IP, dst: REMOTE_POD, ttl: 62, id: 0x1234 }), tcp({ sport: 62000, dport: 8080, flags: 'A', seq: 1000 })]).subarray(0, 28);
    const err = buildPacket([eth({ src: OTHER_NODE_MAC, dst: NODE_MAC }), ipv4({ src: '10.0.30.22', dst: NODE_IP, ttl: 64, id: 6 }), icmp({ type: 3, code: 4, rest: 1400 }), payload(quoted)]);
    const r = node.run('tc_ingress', err);
    expect(r.retval).toBe(TcVerdict.REDIRECT);
    const wantQuote = buildPacket([ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 62, id: 0x1234 }), tcp({ sport: 62000, dport: 30081, flags: 'A', seq: 1000 })]).subarray(0, 28);
    expectPacket(r.data, buildPacket([eth({ src: NODE_MAC, dst: ROUTER_MAC }), ipv4({ src: '10.0.30.22', dst: CLIENT_IP, ttl: 63, id: 6 }), icmp({ type: 3, code: 4, rest: 1400 }), payload(wantQuote)]));
  });
  it('more frontends than 16 bits can number: replies of the last one come back from it', () => {
    // ClusterIP fillers take the reverse-NAT ids up to 70000; the NodePort added after
    // them gets an id above 65535, which must survive conntrack, NAT and the reply path.
    const fillers: FrontendSpec[] = Array.from({ length: 70_000 }, (_, i) => ({
      address: `10.${97 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`, port: 80, proto: 'TCP' as const, kind: 'ClusterIP' as const, backends: [{ address: LOCAL_POD, port: 8080, local: true }],
    }));
    try {
      node.writer.apply([...fillers, { address: NODE_IP, port: 30099, proto: 'TCP', kind: 'NodePort', backends: [{ address: REMOTE_POD, port: 8080, local: false }] }]);
      const [, master] = node.dp.maps.lb4_services.entries().find(([k]) => k.port === 30099 && k.slot === 0)!;
      expect(master.revNatId).toBeGreaterThan(65_535);
      node.run('tc_ingress', buildPacket(syn(NODE_IP, 30099)));
      const reply = buildPacket([eth({ src: OTHER_NODE_MAC, dst: NODE_MAC }), ipv4({ src: REMOTE_POD, dst: NODE_IP, ttl: 63, id: 7 }), tcp({ sport: 8080, dport: 62000, flags: 'SA', seq: 5000, ack: 1001 })]);
      const r = node.run('tc_ingress', reply);
      expect(r.retval).toBe(TcVerdict.REDIRECT);
      expectPacket(r.data, buildPacket([eth({ src: NODE_MAC, dst: ROUTER_MAC }), ipv4({ src: NODE_IP, dst: CLIENT_IP, ttl: 62, id: 7 }), tcp({ sport: 30099, dport: 62000, flags: 'SA', seq: 5000, ack: 1001 })]));
    } finally {
      node.writer.apply(services);
    }
  });
});
