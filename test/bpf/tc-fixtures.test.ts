// PROG_TEST_RUN fixtures for every north-south path of tc_ingress/tc_egress, with the
// exact packet each must produce (the table is src/sandbox/fixtures/tc.ts, which the
// benchmarks time too), then the paths that need more than one packet and a table. Maps
// are seeded through the same ServiceWriter the agent uses.
import { mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { TC_COMPAT_OBJECT, TC_OBJECT, tcObjectFile } from '../../src/datapath/tc-object.js';
import { Stat } from '../../src/datapath/layouts.js';
import { DEFAULT_SNAT_PORTS, defaultObjectsDir } from '../../src/datapath/loader.js';
import type { FrontendSpec } from '../../src/model/frontend.js';
import { buildPacket, eth, ipv4, tcp } from '../../src/packet/build.js';
import { decodePacket } from '../../src/packet/decode.js';
import { flowHash4 } from '../../src/datapath/reference/hash.js';
import { TcVerdict, expectFixture, expectPacket } from '../../src/sandbox/packet-fixture.js';
import { CLIENT_IP, NODE_HASH_SEED, NODE_IP, NODE_MAC, OTHER_NODE_MAC, ROUTER_MAC, datapathNode, total, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { CLIENT_PORT, LOCAL_POD, RANGED_LB_IP, REMOTE_POD, TC_FIXTURES, TC_SERVICES, fromRouter, syn } from '../../src/sandbox/fixtures/tc.js';
import { describeWith } from '../harness/requirements.js';

const services = TC_SERVICES;

let node: DatapathNode;
beforeAll(async () => {
  node = await datapathNode();
  node.writer.apply(services);
});
afterAll(async () => {
  await node?.close();
});
beforeEach(() => node.flushState());

// The build for kernels without bpf_cast_to_kern_ctx (tc_compat.bpf.o, src/datapath/tc-object.ts):
// every checksum by the kernel's helper, the same packets out.
describeWith(['root', 'bpffs', 'netns'], 'tc datapath fixtures, the build for kernels before 6.2', () => {
  let compat: DatapathNode;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ferry-compat-'));
    for (const f of readdirSync(defaultObjectsDir())) if (f.endsWith('.bpf.o')) symlinkSync(join(defaultObjectsDir(), f === TC_OBJECT ? TC_COMPAT_OBJECT : f), join(dir, f));
    expect(tcObjectFile()).toBe(TC_OBJECT); // this kernel has the kfunc: the compat build only by the link above
    compat = await datapathNode({ objectsDir: dir });
    compat.writer.apply(services);
  });
  afterAll(async () => {
    await compat?.close();
    rmSync(dir, { recursive: true, force: true });
  });
  beforeEach(() => compat.flushState());
  for (const f of TC_FIXTURES) {
    it(f.description, () => {
      expectFixture(compat, f);
    });
  }
});

describeWith(['root', 'bpffs', 'netns'], 'tc datapath fixtures', () => {
  for (const f of TC_FIXTURES) {
    it(f.description, () => {
      expectFixture(node, f);
    });
  }

  it('a second client on the same port gets another SNAT port', () => {
    node.run('tc_ingress', syn(NODE_IP, 30081));
    const [, ct] = node.dp.maps.ct4.entries()[0]!;
    expect(ct).toMatchObject({ natAddr: NODE_IP, natPort: CLIENT_PORT });
    const r = node.run('tc_ingress', syn(NODE_IP, 30081, { src: '10.0.10.3' }));
    expect(r.retval).toBe(TcVerdict.REDIRECT);
    const sport = decodePacket(r.data).find((l) => l.name === 'tcp')!.fields.sport as number;
    expect(sport).not.toBe(CLIENT_PORT);
    expect(sport).toBeGreaterThanOrEqual(DEFAULT_SNAT_PORTS.min);
    expect(sport).toBeLessThanOrEqual(DEFAULT_SNAT_PORTS.max);
  });

  it('a flow whose conntrack entry was lost (LRU eviction) finds its SNAT binding again: same port, same backend; counted as mid-stream', () => {
    const ephemeral = 41000; // outside the SNAT range: the port comes from the flow's hash
    const midstream = () => total(node.dp, 'ferry_stats', Stat.STAT_CT_MIDSTREAM);
    const ackOf = (seq: number) => buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 63, id: 0x1234 }), tcp({ sport: ephemeral, dport: 30081, flags: 'A', seq })]);
    const first = node.run('tc_ingress', syn(NODE_IP, 30081, { sport: ephemeral }));
    expect(first.retval).toBe(TcVerdict.REDIRECT);
    const tcpOf = (b: Buffer) => decodePacket(b).find((l) => l.name === 'tcp')!.fields;
    const port = tcpOf(first.data).sport as number;
    expect(port).toBeGreaterThanOrEqual(DEFAULT_SNAT_PORTS.min);
    expect(port).toBeLessThanOrEqual(DEFAULT_SNAT_PORTS.max);
    expect(node.run('tc_ingress', ackOf(1001)).retval).toBe(TcVerdict.REDIRECT);
    expect(midstream()).toBe(0n); // a new flow's SYN, and a segment of a held flow, are not
    for (const [k] of node.dp.maps.ct4.entries()) node.dp.maps.ct4.delete(k);
    const later = node.run('tc_ingress', ackOf(1001));
    expect(later.retval).toBe(TcVerdict.REDIRECT);
    expect(tcpOf(later.data).sport).toBe(port);
    expect(node.dp.maps.nat4.entries()).toHaveLength(1);
    expect(midstream()).toBe(1n); // the lost state, visible
    expect(node.run('tc_ingress', ackOf(1002)).retval).toBe(TcVerdict.REDIRECT);
    expect(midstream()).toBe(1n); // once per lost flow: it is held again
    // Another client on that port still gets a port of its own.
    const other = node.run('tc_ingress', syn(NODE_IP, 30081, { sport: ephemeral, src: '10.0.10.3' }));
    expect(tcpOf(other.data).sport).not.toBe(port);
  });

  it('loadBalancerSourceRanges follow the Service: widen them, and a denied source passes', () => {
    const denied = syn(RANGED_LB_IP, 80, { src: '10.0.10.200' });
    expect(node.run('tc_ingress', denied).retval).toBe(TcVerdict.SHOT);
    node.writer.apply(services.map((s) => (s.address === RANGED_LB_IP ? { ...s, sourceRanges: ['10.0.10.0/24'] } : s)));
    expect(node.run('tc_ingress', denied).retval).toBe(TcVerdict.OK);
    expect(node.dp.maps.lb4_src_ranges.keys().next().value).toMatchObject({ prefixlen: 56, source: '10.0.10.0' });
    node.writer.apply(services);
  });

  it('sessionAffinity ClientIP: a client keeps its backend across flows until the timeout', async () => {
    const pods = ['10.244.1.31', '10.244.1.32', '10.244.1.33', '10.244.1.34'];
    const sticky: FrontendSpec = { address: '10.0.100.30', port: 80, proto: 'TCP', kind: 'LoadBalancer', service: 'default/sticky:http', affinityTimeout: 1, backends: pods.map((a) => ({ address: a, port: 8080, local: true })) };
    node.writer.apply([...services, sticky]);
    try {
      const to = (src: string, sport: number) => String(decodePacket(node.run('tc_ingress', syn('10.0.100.30', 80, { src, sport })).data).find((l) => l.name === 'ipv4')!.fields.dst);
      const first = to(CLIENT_IP, 20000);
      for (let p = 20001; p < 20030; p++) expect(to(CLIENT_IP, p)).toBe(first);
      // Other clients are spread as usual.
      const others = new Set(Array.from({ length: 40 }, (_, i) => to(`10.0.10.${100 + i}`, 20000)));
      expect(others.size).toBeGreaterThan(1);
      // After the timeout the flow hash decides again: find a flow whose hash points elsewhere.
      await new Promise((r) => setTimeout(r, 1100));
      const slotOf = (sport: number) => pods[flowHash4(CLIENT_IP, '10.0.100.30', sport, 80, 6, NODE_HASH_SEED) % pods.length]!;
      let sport = 21000;
      while (slotOf(sport) === first) sport++;
      expect(to(CLIENT_IP, sport)).toBe(slotOf(sport));
    } finally {
      node.writer.apply(services);
    }
  });

  it('an established flow keeps its backend; one whose backend vanished is re-balanced', () => {
    const two: FrontendSpec[] = services.map((s) =>
      s.port === 30080 ? { ...s, backends: [{ address: LOCAL_POD, port: 8080, local: true }, { address: '10.244.1.6', port: 8080, local: true }] } : s,
    );
    node.writer.apply(two);
    try {
      const first = node.run('tc_ingress', syn(NODE_IP, 30080, { sport: 41000 }));
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

  it('more frontends than 16 bits can number: replies of the last one come back from it', () => {
    // ClusterIP fillers take the reverse-NAT ids up to 70000; the NodePort planned after
    // them (its Service sorts last) gets an id above 65535, which must survive conntrack,
    // NAT and the reply path.
    const fillers: FrontendSpec[] = Array.from({ length: 70_000 }, (_, i) => ({
      address: `10.${97 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`, port: 80, proto: 'TCP' as const, kind: 'ClusterIP' as const, backends: [{ address: LOCAL_POD, port: 8080, local: true }],
    }));
    try {
      node.writer.apply([...fillers, { address: NODE_IP, port: 30099, proto: 'TCP', kind: 'NodePort', service: 'zz/last:http', backends: [{ address: REMOTE_POD, port: 8080, local: false }] }]);
      const [, master] = node.dp.maps.lb4_services.entries().find(([k]) => k.port === 30099 && k.slot === 0)!;
      expect(master.revNatId).toBeGreaterThan(65_535);
      node.run('tc_ingress', syn(NODE_IP, 30099));
      const reply = buildPacket([eth({ src: OTHER_NODE_MAC, dst: NODE_MAC }), ipv4({ src: REMOTE_POD, dst: NODE_IP, ttl: 63, id: 7 }), tcp({ sport: 8080, dport: CLIENT_PORT, flags: 'SA', seq: 5000, ack: 1001 })]);
      const r = node.run('tc_ingress', reply);
      expect(r.retval).toBe(TcVerdict.REDIRECT);
      expectPacket(r.data, buildPacket([eth({ src: NODE_MAC, dst: ROUTER_MAC }), ipv4({ src: NODE_IP, dst: CLIENT_IP, ttl: 62, id: 7 }), tcp({ sport: 30099, dport: CLIENT_PORT, flags: 'SA', seq: 5000, ack: 1001 })]));
    } finally {
      node.writer.apply(services);
    }
  });
});
