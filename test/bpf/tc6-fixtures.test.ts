// IPv6 north-south on tc (bpf/lib/nodeport6.h), by PROG_TEST_RUN: the fixtures of
// src/sandbox/fixtures/tc6.ts with the exact packets they must produce (checksums
// included), then what needs more than one packet: both directions in ct6 and their
// lifetimes, a reopened port, a tuple another frontend's live flow holds. The maps are
// written by the agent's ServiceWriter, with the IPv4 Services beside them.
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { BackendFlags, CtFlags, CtLifetime, LbFlags, LbScope } from '../../src/datapath/layouts.js';
import { Ct6Dir } from '../../src/datapath/layouts6.js';
import { resetCounters } from '../../src/datapath/counters.js';
import { collectConntrack6, collectNat6, monotonicNs } from '../../src/datapath/ct-gc.js';
import { buildPacket, eth, ipv6, payload, tcp, udp } from '../../src/packet/build.js';
import { macText } from '../../src/packet/addr.js';
import { TcVerdict, expectFixture } from '../../src/sandbox/packet-fixture.js';
import { NODE_MAC, OTHER_NODE_IP6, OTHER_NODE_MAC, REMOTE_POD_CIDR6, ROUTER_MAC, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { TC_SERVICES } from '../../src/sandbox/fixtures/tc.js';
import { CLIENT6, CLIENT6_PORT, LB6, LOCAL_POD6, NODE6, REMOTE_POD6, TC6_FIXTURES, TC6_SERVICES, errorOut6 } from '../../src/sandbox/fixtures/tc6.js';
import { decodePacket } from '../../src/packet/decode.js';
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

describeWith(['root', 'bpffs', 'netns'], 'tc IPv6 to backends on other nodes (SNAT)', () => {
  const fromClient = (src: string, flags: string, seq = 1000) => buildPacket([fromRouter, ipv6({ src, dst: LB6, hopLimit: 63 }), tcp({ sport: CLIENT6_PORT, dport: 84, flags, seq })]);
  const fromBackend = (dport: number, flags: string) => buildPacket([eth({ src: OTHER_NODE_MAC, dst: NODE_MAC }), ipv6({ src: REMOTE_POD6, dst: NODE6, hopLimit: 64 }), tcp({ sport: 8080, dport, flags, seq: 1, ack: 1001 })]);
  const fields = (data: Buffer) => Object.fromEntries(decodePacket(data).map((l) => [l.name, l.fields])) as Record<string, Record<string, unknown>>;
  const binding = () => node.dp.maps.nat6.entries().map(([k, v]) => ({ port: k.dport, client: `${v.clientAddr}.${v.clientPort}`, flags: v.flags, lifetimeS: Number(v.expiresNs - monotonicNs()) / 1e9 }));

  it('two clients on one port to one backend leave from two ports, and each reply finds its own client', () => {
    const other = 'fd00:10::3';
    const first = node.run('tc_ingress', fromClient(CLIENT6, 'S'));
    const second = node.run('tc_ingress', fromClient(other, 'S'));
    expect([first.retval, second.retval]).toEqual([TcVerdict.REDIRECT, TcVerdict.REDIRECT]);
    const ports = [fields(first.data).tcp!.sport, fields(second.data).tcp!.sport] as number[];
    expect(ports[0]).toBe(CLIENT6_PORT); // its own port, free and in the SNAT range
    expect(ports[1]).not.toBe(CLIENT6_PORT);
    expect(ports[1]).toBeGreaterThanOrEqual(1024);
    expect(ports[1]).toBeLessThanOrEqual(29999);
    for (const [i, to] of [[0, CLIENT6], [1, other]] as const) {
      const back = node.run('tc_ingress', fromBackend(ports[i]!, 'SA'));
      expect(back.retval).toBe(TcVerdict.REDIRECT);
      expect(fields(back.data).ipv6).toMatchObject({ src: LB6, dst: to });
      expect(fields(back.data).tcp).toMatchObject({ sport: 84, dport: CLIENT6_PORT });
    }
    expect(binding().map((b) => b.client).sort()).toEqual([`${CLIENT6}.${CLIENT6_PORT}`, `${other}.${CLIENT6_PORT}`]);
  });

  it('the flow and its binding live as long as each other: SYN, then established (6 h) after the answer and the next segment, then closing', () => {
    expect(node.run('tc_ingress', fromClient(CLIENT6, 'S')).retval).toBe(TcVerdict.REDIRECT);
    expect(binding()).toHaveLength(1);
    expect(binding()[0]!.lifetimeS).toBeLessThanOrEqual(CtLifetime.CT_LIFETIME_TCP_SYN);
    expect(node.run('tc_ingress', fromBackend(CLIENT6_PORT, 'SA')).retval).toBe(TcVerdict.REDIRECT);
    expect(binding()[0]!.flags & CtFlags.CT_F_SEEN_REPLY).toBeTruthy();
    expect(node.run('tc_ingress', fromClient(CLIENT6, 'A', 1001)).retval).toBe(TcVerdict.REDIRECT);
    const flow = dir(Ct6Dir.CT6_DIR_CLIENT);
    expect(flow).toMatchObject({ addr: `${REMOTE_POD6}.8080` });
    expect(flow.flags & (CtFlags.CT_F_SNAT | CtFlags.CT_F_ESTABLISHED)).toBe(CtFlags.CT_F_SNAT | CtFlags.CT_F_ESTABLISHED);
    expect(flow.lifetimeS).toBeGreaterThan(CtLifetime.CT_LIFETIME_TCP_ESTABLISHED - 5);
    expect(binding()[0]!.flags & CtFlags.CT_F_ESTABLISHED).toBeTruthy();
    expect(binding()[0]!.lifetimeS).toBeGreaterThan(CtLifetime.CT_LIFETIME_TCP_ESTABLISHED - 5);
    expect(node.run('tc_ingress', fromBackend(CLIENT6_PORT, 'FA')).retval).toBe(TcVerdict.REDIRECT);
    expect(binding()[0]!.lifetimeS).toBeLessThanOrEqual(CtLifetime.CT_LIFETIME_TCP_CLOSING);
    expect(dir(Ct6Dir.CT6_DIR_CLIENT).lifetimeS).toBeLessThanOrEqual(CtLifetime.CT_LIFETIME_TCP_CLOSING);
  });

  it('a port whose flow was reset goes to the next client, and the old flow no longer sends through it', () => {
    expect(node.run('tc_ingress', fromClient(CLIENT6, 'S')).retval).toBe(TcVerdict.REDIRECT);
    expect(node.run('tc_ingress', fromBackend(CLIENT6_PORT, 'R')).retval).toBe(TcVerdict.REDIRECT); // the backend refused it
    const next = node.run('tc_ingress', fromClient('fd00:10::4', 'S'));
    expect(fields(next.data).tcp!.sport).toBe(CLIENT6_PORT); // taken over: the first flow is over
    expect(binding().map((b) => b.client)).toEqual([`fd00:10::4.${CLIENT6_PORT}`]);
    // The first client's entry went with its binding: its next segment is a new flow, on another port.
    expect(flows().filter((f) => f.from === `${CLIENT6}.${CLIENT6_PORT}`)).toEqual([]);
    const again = node.run('tc_ingress', fromClient(CLIENT6, 'S', 7000));
    expect(fields(again.data).tcp!.sport).not.toBe(CLIENT6_PORT);
    expect(binding()).toHaveLength(2);
  });

  it('a binding a full nat6 lost is written again by the flow\'s next lifetime write, on the same port', () => {
    expect(node.run('tc_ingress', fromClient(CLIENT6, 'S')).retval).toBe(TcVerdict.REDIRECT);
    const [k] = node.dp.maps.nat6.entries()[0]!;
    node.dp.maps.nat6.delete(k);
    expect(node.run('tc_ingress', fromBackend(CLIENT6_PORT, 'SA')).retval).toBe(TcVerdict.UNSPEC); // no binding: the host's
    // The flow's lifetime falls due (as a second after its last write does).
    const [ck, cv] = node.dp.maps.ct6.entries().find(([key]) => key.dir === Ct6Dir.CT6_DIR_CLIENT)!;
    node.dp.maps.ct6.update(ck, { ...cv, expiresNs: monotonicNs() + 2_000_000_000n });
    const midstream = node.counter('STAT_CT_MIDSTREAM');
    expect(node.run('tc_ingress', fromClient(CLIENT6, 'A', 1001)).retval).toBe(TcVerdict.REDIRECT);
    expect(node.counter('STAT_CT_MIDSTREAM')).toBe(midstream); // the live flow's own write, not a new flow's
    expect(binding()).toMatchObject([{ port: CLIENT6_PORT, client: `${CLIENT6}.${CLIENT6_PORT}` }]);
    expect(node.run('tc_ingress', fromBackend(CLIENT6_PORT, 'SA')).retval).toBe(TcVerdict.REDIRECT);
  });

  it('the collector deletes bindings past their expiry and those of a backend the frontend no longer holds', () => {
    expect(node.run('tc_ingress', fromClient(CLIENT6, 'S')).retval).toBe(TcVerdict.REDIRECT);
    expect(node.run('tc_ingress', fromClient('fd00:10::3', 'S')).retval).toBe(TcVerdict.REDIRECT);
    const serves = (f: { address: string; port: number; proto: number }, b: { address: string; port: number }) => node.writer.servesFlow6(f, b);
    expect(collectNat6(node.dp.maps.nat6, monotonicNs(), serves)).toEqual({ scanned: 2, deleted: 0 });
    const [k, v] = node.dp.maps.nat6.entries()[0]!;
    node.dp.maps.nat6.update(k, { ...v, expiresNs: 1n });
    expect(collectNat6(node.dp.maps.nat6, monotonicNs(), serves)).toEqual({ scanned: 2, deleted: 1 });
    const moved = TC6_SERVICES.map((f) => (f.address === LB6 && f.port === 84 ? { ...f, backends: [{ address: 'fd00:244:2::9', port: 8080, local: false }] } : f));
    try {
      node.writer.apply([...TC_SERVICES, ...moved]);
      expect(collectNat6(node.dp.maps.nat6, monotonicNs(), serves)).toEqual({ scanned: 1, deleted: 1 });
    } finally {
      node.writer.apply([...TC_SERVICES, ...TC6_SERVICES]);
    }
  });

  it('loadBalancerSourceRanges: a flow whose source its frontend\'s ranges no longer allow loses it at its next packet, local or SNATed', () => {
    const closed = TC6_SERVICES.map((f) => (f.sourceRanges && f.sourceRanges.length > 1 ? { ...f, sourceRanges: ['fd00:99::/64'] } : f.port === 87 ? { ...f, sourceRanges: ['fd00:10::3/128'] } : f));
    expect(node.run('tc_ingress', client(LB6, 85, 'S')).retval).toBe(TcVerdict.OK);
    expect(node.run('tc_ingress', client(LB6, 87, 'S')).retval).toBe(TcVerdict.REDIRECT);
    // Both flows are marked: their packets look the frontend up.
    expect(flows().filter((f) => f.dir === Ct6Dir.CT6_DIR_CLIENT).every((f) => f.flags & CtFlags.CT_F_RANGED)).toBe(true);
    expect(node.run('tc_ingress', client(LB6, 85, 'A', 1001)).retval).toBe(TcVerdict.OK);
    try {
      expect(node.writer.apply([...TC_SERVICES, ...closed]).failures).toEqual([]);
      resetCounters(node.dp.maps);
      expect(node.run('tc_ingress', client(LB6, 85, 'A', 1001)).retval).toBe(TcVerdict.SHOT);
      expect(node.run('tc_ingress', client(LB6, 87, 'A', 1001)).retval).toBe(TcVerdict.SHOT);
      expect(node.counter('DROP_SOURCE_RANGE')).toBe(2n);
    } finally {
      node.writer.apply([...TC_SERVICES, ...TC6_SERVICES]);
    }
    // Allowed again: the flows go on.
    expect(node.run('tc_ingress', client(LB6, 85, 'A', 1001)).retval).toBe(TcVerdict.OK);
    // An unranged flow is not marked.
    expect(node.run('tc_ingress', client(LB6, 84, 'S')).retval).toBe(TcVerdict.REDIRECT);
    expect(flows().find((f) => f.to === `${LB6}.84` && f.dir === Ct6Dir.CT6_DIR_CLIENT)!.flags & CtFlags.CT_F_RANGED).toBe(0);
  });

  it('a segment too big for the device its route to the backend leaves by: Packet Too Big with that MTU, from the address it was sent to, back to its sender', async () => {
    // The other node's pods behind eth1, a hop of the IPv6 minimum MTU.
    const peer = await node.tb.addHost('peer6');
    await node.tb.link({ host: node.host, ifname: 'eth1' }, { host: peer, ifname: 'eth0' });
    await node.host.ip('link', 'set', 'eth1', 'mtu', '1280');
    await node.host.ip('-6', 'addr', 'add', 'fd00:41::1/64', 'dev', 'eth1', 'nodad');
    await node.host.ip('-6', 'neigh', 'replace', 'fd00:41::2', 'lladdr', OTHER_NODE_MAC, 'dev', 'eth1', 'nud', 'permanent');
    await node.host.ip('-6', 'route', 'replace', REMOTE_POD_CIDR6, 'via', 'fd00:41::2', 'dev', 'eth1');
    node.dp.hopEpoch.invalidate(); // as the agent's route monitor reports it: kept hops go
    try {
      expect(node.run('tc_ingress', fromClient(CLIENT6, 'S')).retval).toBe(TcVerdict.REDIRECT); // a SYN fits
      const big = buildPacket([fromRouter, ipv6({ src: CLIENT6, dst: LB6, hopLimit: 63 }), tcp({ sport: CLIENT6_PORT, dport: 84, flags: 'A', seq: 1001 }), payload(Buffer.alloc(1300, 0x62))]);
      resetCounters(node.dp.maps);
      const r = node.run('tc_ingress', big);
      expect(r.retval).toBe(TcVerdict.REDIRECT);
      expect(r.data.equals(errorOut6(LB6, 2, 0, 1280, big)), 'packet too big, MTU 1280, quoting the segment as it came').toBe(true);
      expect(node.counter('STAT_ICMP_FRAG_NEEDED')).toBe(1n);
      expect(node.counter('STAT_FWD_REMOTE6')).toBe(0n);
    } finally {
      await node.host.ip('-6', 'route', 'replace', REMOTE_POD_CIDR6, 'via', OTHER_NODE_IP6, 'dev', 'eth0');
      await node.host.ip('link', 'del', 'eth1');
      node.dp.hopEpoch.invalidate();
    }
  });

  it('next hops are kept per destination (fib6_hops): a route change reaches the packets after the agent reports it, or at once where routes depend on ports', async () => {
    const hopMac = (r: { data: Buffer }) => macText(r.data.subarray(0, 6));
    const moved = '02:00:00:00:00:77';
    expect(hopMac(node.run('tc_ingress', fromClient(CLIENT6, 'S')))).toBe(OTHER_NODE_MAC);
    // The route moves, unreported: the next packet takes the kept hop.
    await node.host.ip('-6', 'neigh', 'replace', 'fd00:30::77', 'lladdr', moved, 'dev', 'eth0', 'nud', 'permanent');
    await node.host.ip('-6', 'route', 'replace', REMOTE_POD_CIDR6, 'via', 'fd00:30::77');
    try {
      expect(hopMac(node.run('tc_ingress', fromClient(CLIENT6, 'A', 1001)))).toBe(OTHER_NODE_MAC);
      expect(node.dp.maps.fib6_hops.entries().filter(([k]) => k.daddr === REMOTE_POD6).map(([k, v]) => [k.saddr, macText(v.macs.subarray(0, 6))])).toEqual([[NODE6, OTHER_NODE_MAC]]);
      // Reported: the next packet looks the route up again.
      node.dp.hopEpoch.invalidate();
      await new Promise((r) => setTimeout(r, 20)); // past the datapath clock's tick
      expect(hopMac(node.run('tc_ingress', fromClient(CLIENT6, 'A', 1001)))).toBe(moved);
      // Routes by ports: nothing kept is used, each packet is looked up.
      await node.host.ip('-6', 'route', 'replace', REMOTE_POD_CIDR6, 'via', OTHER_NODE_IP6);
      node.dp.hopEpoch.setPerFlow(true);
      expect(hopMac(node.run('tc_ingress', fromClient(CLIENT6, 'A', 1001)))).toBe(OTHER_NODE_MAC);
    } finally {
      node.dp.hopEpoch.setPerFlow(false);
      await node.host.ip('-6', 'route', 'replace', REMOTE_POD_CIDR6, 'via', OTHER_NODE_IP6);
      node.dp.hopEpoch.invalidate();
    }
  });

  it('a node with no IPv6 address for flows to leave from drops them, counted (DROP_REMOTE_IPV6)', async () => {
    const bare = await datapathNode({ snatIPv6: undefined });
    try {
      expect(bare.writer.apply([...TC_SERVICES, ...TC6_SERVICES]).failures).toEqual([]);
      expect(bare.run('tc_ingress', fromClient(CLIENT6, 'S')).retval).toBe(TcVerdict.SHOT);
      expect(bare.counter('DROP_REMOTE_IPV6')).toBe(1n);
      expect(bare.run('tc_ingress', client(LB6, 80, 'S')).retval).toBe(TcVerdict.OK); // local backends still served
    } finally {
      await bare.close();
    }
  });

  it('the address flows leave from is what the agent last wrote (snat6_address): none, then another, and replies to it restored', () => {
    const renumbered = 'fd00:30::9';
    const drops = node.counter('DROP_REMOTE_IPV6');
    try {
      expect(node.dp.snat6.set(undefined)).toEqual({ from: NODE6 });
      expect(node.run('tc_ingress', fromClient(CLIENT6, 'S')).retval).toBe(TcVerdict.SHOT);
      expect(node.counter('DROP_REMOTE_IPV6')).toBe(drops + 1n);
      expect(node.dp.snat6.set('FD00:30:0::9')).toEqual({ to: renumbered }); // one address, however written
      expect(node.dp.snat6.set(renumbered)).toBeUndefined();
      const out = node.run('tc_ingress', fromClient(CLIENT6, 'S'));
      expect(out.retval).toBe(TcVerdict.REDIRECT);
      expect(fields(out.data).ipv6).toMatchObject({ src: renumbered, dst: REMOTE_POD6 });
      const reply = buildPacket([eth({ src: OTHER_NODE_MAC, dst: NODE_MAC }), ipv6({ src: REMOTE_POD6, dst: renumbered, hopLimit: 64 }), tcp({ sport: 8080, dport: fields(out.data).tcp!.sport as number, flags: 'SA', seq: 1, ack: 1001 })]);
      const back = node.run('tc_ingress', reply);
      expect(back.retval).toBe(TcVerdict.REDIRECT);
      expect(fields(back.data).ipv6).toMatchObject({ src: LB6, dst: CLIENT6 });
      // The old address is not the node's any more: a packet to it is no reply.
      expect(node.run('tc_ingress', fromBackend(CLIENT6_PORT, 'SA')).retval).toBe(TcVerdict.UNSPEC);
    } finally {
      node.dp.snat6.set(NODE6);
    }
  });

  it('refuses an address no flow can leave from, and passes over such a Node address', () => {
    for (const bad of ['::', '::1', 'fe80::1', 'ff02::1', '10.0.0.1', 'fd00::1%eth0']) expect(() => node.dp.snat6.set(bad), bad).toThrow(/IPv6 SNAT address/);
    expect(node.dp.snat6.get()).toBe(NODE6);
    expect(node.dp.snat6.follow(['fe80::1', 'fd00:30::7'])).toEqual({ from: NODE6, to: 'fd00:30::7' });
    expect(node.dp.snat6.follow(['fe80::1'])).toEqual({ from: 'fd00:30::7' });
    expect(node.dp.maps.snat6_address.lookup(0)).toEqual({ address: '::' });
    node.dp.snat6.set(NODE6);
  });
});
