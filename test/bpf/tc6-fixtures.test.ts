// IPv6 north-south on tc (bpf/lib/nodeport6.h), by PROG_TEST_RUN: the fixtures of
// src/sandbox/fixtures/tc6.ts with the exact packets they must produce (checksums
// included), then what needs more than one packet: both directions in ct6 and their
// lifetimes, a reopened port, a tuple another frontend's live flow holds. The maps are
// written by the agent's ServiceWriter, with the IPv4 Services beside them.
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { BackendFlags, CtFlags, CtLifetime, LbFlags, LbScope } from '../../src/datapath/layouts.js';
import { Ct6Dir } from '../../src/datapath/layouts6.js';
import { collectConntrack6, monotonicNs } from '../../src/datapath/ct-gc.js';
import { buildPacket, eth, ipv6, payload, tcp, udp } from '../../src/packet/build.js';
import { TcVerdict, expectFixture } from '../../src/sandbox/packet-fixture.js';
import { NODE_MAC, ROUTER_MAC, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { TC_SERVICES } from '../../src/sandbox/fixtures/tc.js';
import { CLIENT6, CLIENT6_PORT, LB6, LOCAL_POD6, NODE6, TC6_FIXTURES, TC6_SERVICES } from '../../src/sandbox/fixtures/tc6.js';
import { describeWith } from '../harness/requirements.js';

let node: DatapathNode;
beforeAll(async () => {
  node = await datapathNode();
  const stats = node.writer.apply([...TC_SERVICES, ...TC6_SERVICES]);
  expect(stats.failures).toEqual([]);
});
afterAll(async () => {
  await node?.close();
});
beforeEach(() => node.flushState());

const fromRouter = eth({ src: ROUTER_MAC, dst: NODE_MAC });
const toRouter = eth({ src: NODE_MAC, dst: ROUTER_MAC });
const client = (dst: string, dport: number, flags: string, seq = 1000) => buildPacket([fromRouter, ipv6({ src: CLIENT6, dst, hopLimit: 63 }), tcp({ sport: CLIENT6_PORT, dport, flags, seq })]);
const fromPod = (flags: string) => buildPacket([toRouter, ipv6({ src: LOCAL_POD6, dst: CLIENT6, hopLimit: 63 }), tcp({ sport: 8080, dport: CLIENT6_PORT, flags, seq: 1, ack: 1001 })]);
const udp6Query = () => buildPacket([fromRouter, ipv6({ src: CLIENT6, dst: LB6, hopLimit: 63 }), udp({ sport: 7000, dport: 53 }), payload('q')]);
const flows = () => node.dp.maps.ct6.entries().map(([k, v]) => ({ dir: k.dir, from: `${k.saddr}.${k.sport}`, to: `${k.daddr}.${k.dport}`, addr: `${v.addr}.${v.port}`, flags: v.flags, lifetimeS: Number(v.expiresNs - monotonicNs()) / 1e9 }));
const dir = (d: number) => flows().find((f) => f.dir === d)!;

describeWith(['root', 'bpffs', 'netns'], 'tc IPv6 north-south fixtures', () => {
  for (const f of TC6_FIXTURES) {
    it(f.description, () => {
      expectFixture(node, f);
    });
  }

  it('the writer marks the external entries whose backends are all local, and writes ETP=Local\'s internal scope apart', () => {
    const master = (address: string, port: number, proto: number, scope: number) => node.dp.maps.lb6_services.lookup({ address, port, proto, scope, slot: 0 });
    expect(master(LB6, 80, 6, LbScope.LB_SCOPE_EXTERNAL)!.flags & LbFlags.LB_F_LOCAL_ONLY).toBeTruthy();
    expect(master(LB6, 81, 6, LbScope.LB_SCOPE_EXTERNAL)!.flags & LbFlags.LB_F_LOCAL_ONLY).toBeFalsy();
    expect(master(NODE6, 30080, 6, LbScope.LB_SCOPE_EXTERNAL)).toMatchObject({ count: 1 });
    expect(master(NODE6, 30080, 6, LbScope.LB_SCOPE_INTERNAL)).toMatchObject({ count: 2 });
    expect(master(NODE6, 30080, 6, LbScope.LB_SCOPE_INTERNAL)!.flags & LbFlags.LB_F_LOCAL_ONLY).toBeFalsy();
    expect(node.dp.maps.lb6_services.lookup({ address: NODE6, port: 30080, proto: 6, scope: LbScope.LB_SCOPE_EXTERNAL, slot: 1 })!.flags).toBe(BackendFlags.LB_BACKEND_F_LOCAL);
    // No internal entry where the policies agree: the socket hooks find the external one.
    expect(master(LB6, 80, 6, LbScope.LB_SCOPE_INTERNAL)).toBeUndefined();
  });

  it('a flow holds both directions; the reply and the client\'s next segment make it established (6 h), a FIN closing (10 s)', () => {
    expect(node.run('tc_ingress', client(LB6, 80, 'S')).retval).toBe(TcVerdict.OK);
    expect(flows()).toHaveLength(2);
    expect(dir(Ct6Dir.CT6_DIR_CLIENT)).toMatchObject({ from: `${CLIENT6}.${CLIENT6_PORT}`, to: `${LB6}.80`, addr: `${LOCAL_POD6}.8080`, flags: CtFlags.CT_F_LOCAL });
    expect(dir(Ct6Dir.CT6_DIR_REPLY)).toMatchObject({ from: `${LOCAL_POD6}.8080`, to: `${CLIENT6}.${CLIENT6_PORT}`, addr: `${LB6}.80` });
    expect(dir(Ct6Dir.CT6_DIR_CLIENT).lifetimeS).toBeLessThanOrEqual(CtLifetime.CT_LIFETIME_TCP_SYN);
    expect(node.run('tc_egress', fromPod('SA')).retval).toBe(TcVerdict.OK);
    expect(dir(Ct6Dir.CT6_DIR_CLIENT).flags & CtFlags.CT_F_SEEN_REPLY).toBeTruthy();
    expect(node.run('tc_ingress', client(LB6, 80, 'A', 1001)).retval).toBe(TcVerdict.OK);
    for (const d of [Ct6Dir.CT6_DIR_CLIENT, Ct6Dir.CT6_DIR_REPLY]) {
      expect(dir(d).flags & CtFlags.CT_F_ESTABLISHED, `dir ${d}`).toBeTruthy();
      expect(dir(d).lifetimeS, `dir ${d}`).toBeGreaterThan(CtLifetime.CT_LIFETIME_TCP_ESTABLISHED - 5);
    }
    expect(node.run('tc_ingress', client(LB6, 80, 'FA', 1001)).retval).toBe(TcVerdict.OK);
    for (const d of [Ct6Dir.CT6_DIR_CLIENT, Ct6Dir.CT6_DIR_REPLY]) expect(dir(d).lifetimeS, `dir ${d}`).toBeLessThanOrEqual(CtLifetime.CT_LIFETIME_TCP_CLOSING);
    // The client reopens its port: a new flow, and its reply still leaves as the frontend.
    expect(node.run('tc_ingress', client(LB6, 80, 'S', 5000)).retval).toBe(TcVerdict.OK);
    expect(dir(Ct6Dir.CT6_DIR_CLIENT).flags).toBe(CtFlags.CT_F_LOCAL);
    expect(node.run('tc_egress', fromPod('SA')).retval).toBe(TcVerdict.OK);
  });

  it('the collector deletes IPv6 flows past their expiry and keeps the live ones', () => {
    expect(node.run('tc_ingress', client(LB6, 80, 'S')).retval).toBe(TcVerdict.OK);
    expect(node.run('tc_ingress', udp6Query()).retval).toBe(TcVerdict.OK);
    // The TCP flow's two directions expire; the UDP flow's stay.
    for (const [k, v] of node.dp.maps.ct6.entries()) if (k.proto === 6) node.dp.maps.ct6.update(k, { ...v, expiresNs: 1n });
    expect(collectConntrack6(node.dp.maps.ct6)).toEqual({ scanned: 4, deleted: 2 });
    expect(node.dp.maps.ct6.entries().map(([k]) => k.proto)).toEqual([17, 17]);
  });

  it('the collector deletes the IPv6 flows of a backend its frontend no longer holds', () => {
    expect(node.run('tc_ingress', client(LB6, 80, 'S')).retval).toBe(TcVerdict.OK);
    expect(node.run('tc_ingress', udp6Query()).retval).toBe(TcVerdict.OK);
    const serves = (f: { address: string; port: number; proto: number }, b: { address: string; port: number }) => node.writer.servesFlow6(f, b);
    expect(collectConntrack6(node.dp.maps.ct6, monotonicNs(), serves)).toEqual({ scanned: 4, deleted: 0 });
    // LB6:80's pod goes (another takes its place): its flow's two entries go; the UDP flow stays.
    const moved = TC6_SERVICES.map((f) => (f.address === LB6 && f.port === 80 ? { ...f, backends: [{ address: 'fd00:244:1::9', port: 8080, local: true }] } : f));
    try {
      node.writer.apply([...TC_SERVICES, ...moved]);
      expect(collectConntrack6(node.dp.maps.ct6, monotonicNs(), serves)).toEqual({ scanned: 4, deleted: 2 });
      expect(node.dp.maps.ct6.entries().map(([k]) => k.proto)).toEqual([17, 17]);
    } finally {
      node.writer.apply([...TC_SERVICES, ...TC6_SERVICES]);
    }
  });

  it('a new flow whose pod-side tuple a live flow of another frontend holds is dropped, not given the other\'s replies', () => {
    // LB6:80 and NODE6:30080 share the backend [LOCAL_POD6]:8080; the client uses one port for both.
    expect(node.run('tc_ingress', client(LB6, 80, 'S')).retval).toBe(TcVerdict.OK);
    const taken = node.counter('DROP_TUPLE_TAKEN');
    expect(node.run('tc_ingress', client(NODE6, 30080, 'S')).retval).toBe(TcVerdict.SHOT);
    expect(node.counter('DROP_TUPLE_TAKEN')).toBe(taken + 1n);
    // The live flow's replies still leave as its own frontend.
    const out = node.run('tc_egress', fromPod('SA'));
    expect(out.retval).toBe(TcVerdict.OK);
    expect(out.data.subarray(14 + 8, 14 + 24).equals(buildPacket([ipv6({ src: LB6, dst: CLIENT6 })]).subarray(8, 24))).toBe(true);
  });
});
