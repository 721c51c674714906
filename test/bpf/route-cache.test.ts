// A flow's kept next hop (ct4/nat4 hop_ifindex, hop_macs): a forwarded flow is routed when
// it starts and whenever its lifetime is written (a change of state, or a second of
// traffic), and in between sent by the hop it keeps. A wrong MAC written into the kept hop
// shows which packets used it: those within the second do, the next written one looks the
// route up again and repairs it. A route the program cannot complete (no neighbour yet) is
// not kept. New SNAT flows to one backend share its route (lb4_backend_hops) for a second.
// A route change the agent reports (ferry_hop_epoch) makes every hop kept before it stale.
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { clearConntrack, monotonicNs } from '../../src/datapath/ct-gc.js';
import { HopEpoch } from '../../src/datapath/hop-epoch.js';
import { dumpMap } from '../../src/datapath/inspect.js';
import type { Ct4Key } from '../../src/datapath/layouts.js';
import type { FrontendSpec } from '../../src/model/frontend.js';
import { macBytes, macText } from '../../src/packet/addr.js';
import { buildPacket, eth, ipv4, tcp } from '../../src/packet/build.js';
import { decodePacket } from '../../src/packet/decode.js';
import { TcVerdict } from '../../src/sandbox/packet-fixture.js';
import { CLIENT_IP, NODE_IP, NODE_MAC, OTHER_NODE_IP, OTHER_NODE_MAC, REMOTE_POD_CIDR, ROUTER_IP, ROUTER_MAC, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { CLIENT_PORT, REMOTE_POD, clientTcp } from '../../src/sandbox/fixtures/tc.js';
import { describeWith } from '../harness/requirements.js';

/** On the node's own network, with no neighbour entry: the route is known, the MAC not. */
const UNRESOLVED_BACKEND = '10.0.30.50';
/** Reached by a multipath route: by the router and by the other node. */
const ECMP_BACKEND = '10.244.9.5';
const SERVICES: FrontendSpec[] = [
  { address: NODE_IP, port: 30081, proto: 'TCP', kind: 'NodePort', backends: [{ address: REMOTE_POD, port: 8080, local: false }] },
  { address: NODE_IP, port: 30082, proto: 'TCP', kind: 'NodePort', forwarding: 'dsr', backends: [{ address: REMOTE_POD, port: 8080, local: false }] },
  { address: NODE_IP, port: 30083, proto: 'TCP', kind: 'NodePort', backends: [{ address: UNRESOLVED_BACKEND, port: 8080, local: false }] },
  { address: NODE_IP, port: 30084, proto: 'TCP', kind: 'NodePort', backends: [{ address: ECMP_BACKEND, port: 8080, local: false }] },
];
const STALE_MAC = '02:00:00:00:99:99';

let node: DatapathNode;
beforeAll(async () => {
  node = await datapathNode();
  node.writer.apply(SERVICES);
});
afterAll(async () => {
  await node?.close();
});
beforeEach(() => node.flushState());

const macOf = (b: Buffer, at = 0) => macText(b.subarray(at));
const client = (dport: number, flags: string, seq = 1001) => buildPacket(clientTcp(NODE_IP, dport, { flags, seq }));
const reply = (flags: string) =>
  buildPacket([eth({ src: OTHER_NODE_MAC, dst: NODE_MAC }), ipv4({ src: REMOTE_POD, dst: NODE_IP, ttl: 63, id: 7 }), tcp({ sport: 8080, dport: CLIENT_PORT, flags, seq: 5000, ack: 1001 })]);
const flowKey = (dport: number): Ct4Key => ({ saddr: CLIENT_IP, daddr: NODE_IP, sport: CLIENT_PORT, dport, proto: 6 });

/** Where a packet was sent: its destination MAC, as the program wrote it. */
function sentTo(data: Buffer, verdict: number): string {
  expect(verdict).toBe(TcVerdict.REDIRECT);
  return macOf(data);
}

/** Make a flow's kept hop wrong (the destination MAC), as a route change would leave it. */
function staleFlowHop(dport: number, opts: { dueNow?: boolean } = {}): void {
  const key = flowKey(dport);
  const e = node.dp.maps.ct4.lookup(key)!;
  // Moving the lifetime back by two seconds makes the next packet's write due.
  node.dp.maps.ct4.update(key, { ...e, hopMacs: Buffer.concat([macBytes(STALE_MAC), e.hopMacs.subarray(6)]), expiresNs: opts.dueNow ? e.expiresNs - 2_000_000_000n : e.expiresNs });
}

/** A first new flow to the NodePort `dport` from CLIENT_PORT: sent by a lookup, whose
 * route its backend's slot then shares, as looked up from `saddr`. */
function firstNewFlow(dport: number, saddr: string) {
  const newFlow = (sport: number) => node.run('tc_ingress', buildPacket(clientTcp(NODE_IP, dport, { sport, flags: 'S' })));
  const r = newFlow(CLIENT_PORT);
  expect(sentTo(r.data, r.retval)).toBe(OTHER_NODE_MAC);
  const slot = node.dp.maps.ct4.lookup(flowKey(dport))!.backendId;
  const shared = node.dp.maps.lb4_backend_hops.lookup(slot)!;
  expect(shared).toMatchObject({ daddr: REMOTE_POD, saddr, fromIfindex: node.ifindex, hopIfindex: node.ifindex });
  return { newFlow, slot, shared };
}

describeWith(['root', 'bpffs', 'netns'], 'a flow keeps its next hop', () => {
  it('a new SNAT flow keeps the route it was sent by: the device and both MACs', () => {
    const r = node.run('tc_ingress', client(30081, 'S', 1000));
    expect(sentTo(r.data, r.retval)).toBe(OTHER_NODE_MAC);
    const e = node.dp.maps.ct4.lookup(flowKey(30081))!;
    expect(e.hopIfindex).toBe(node.ifindex);
    expect(macOf(e.hopMacs, 0)).toBe(OTHER_NODE_MAC);
    expect(macOf(e.hopMacs, 6)).toBe(NODE_MAC);
    // As `ferry map dump ct4` shows it.
    const row = dumpMap(node.pinDir, 'ct4').find((r) => r.dport === 30081);
    expect(row).toMatchObject({ hopIfindex: node.ifindex, hopMacs: `${OTHER_NODE_MAC} (from ${NODE_MAC})` });
  });

  it('packets within the second go by the kept hop; the next written one routes again and repairs it', () => {
    node.run('tc_ingress', client(30081, 'S', 1000));
    staleFlowHop(30081);
    // The same state, the lifetime moved by less than a second: no lookup.
    let r = node.run('tc_ingress', client(30081, 'S', 1000));
    expect(sentTo(r.data, r.retval)).toBe(STALE_MAC);
    // A second of traffic later (the lifetime moved back two): looked up, kept anew.
    staleFlowHop(30081, { dueNow: true });
    r = node.run('tc_ingress', client(30081, 'S', 1000));
    expect(sentTo(r.data, r.retval)).toBe(OTHER_NODE_MAC);
    expect(macOf(node.dp.maps.ct4.lookup(flowKey(30081))!.hopMacs)).toBe(OTHER_NODE_MAC);
    // A change of state routes again at once.
    staleFlowHop(30081);
    r = node.run('tc_ingress', client(30081, 'FA'));
    expect(sentTo(r.data, r.retval)).toBe(OTHER_NODE_MAC);
  });

  it('a remote backend\'s replies keep their own hop towards the client', () => {
    node.run('tc_ingress', client(30081, 'S', 1000));
    let r = node.run('tc_ingress', reply('SA'));
    expect(sentTo(r.data, r.retval)).toBe(ROUTER_MAC);
    const [bindingKey, binding] = node.dp.maps.nat4.entries().find(([k]) => k.saddr === REMOTE_POD)!;
    expect(binding.hopIfindex).toBe(node.ifindex);
    expect(macOf(binding.hopMacs)).toBe(ROUTER_MAC);
    node.dp.maps.nat4.update(bindingKey, { ...binding, hopMacs: Buffer.concat([macBytes(STALE_MAC), binding.hopMacs.subarray(6)]) });
    r = node.run('tc_ingress', reply('SA')); // a retransmitted SYN-ACK: nothing new to write
    expect(sentTo(r.data, r.retval)).toBe(STALE_MAC);
    r = node.run('tc_ingress', reply('A')); // established: written, routed again
    expect(sentTo(r.data, r.retval)).toBe(ROUTER_MAC);
  });

  it('a write of one direction\'s lifetime lets the other direction\'s kept hop go, so neither keeps a hop for ever', () => {
    node.run('tc_ingress', client(30081, 'S', 1000));
    node.run('tc_ingress', reply('SA'));
    node.run('tc_ingress', client(30081, 'A')); // established: both directions written
    node.run('tc_ingress', reply('A'));
    const [bindingKey, binding] = node.dp.maps.nat4.entries().find(([k]) => k.saddr === REMOTE_POD)!;
    expect(binding.hopIfindex).toBe(node.ifindex);
    // The replies' hop gone stale; the client's side writes the lifetime (a second on).
    node.dp.maps.nat4.update(bindingKey, { ...binding, hopMacs: Buffer.concat([macBytes(STALE_MAC), binding.hopMacs.subarray(6)]) });
    staleFlowHop(30081, { dueNow: true });
    expect(sentTo(node.run('tc_ingress', client(30081, 'A')).data, TcVerdict.REDIRECT)).toBe(OTHER_NODE_MAC);
    expect(node.dp.maps.nat4.lookup(bindingKey)!.hopIfindex).toBe(0);
    // The next reply, not due itself, routes again.
    let r = node.run('tc_ingress', reply('A'));
    expect(sentTo(r.data, r.retval)).toBe(ROUTER_MAC);
    // And the other way: a reply's write lets the client side's kept hop go.
    staleFlowHop(30081);
    const b = node.dp.maps.nat4.lookup(bindingKey)!;
    node.dp.maps.nat4.update(bindingKey, { ...b, expiresNs: b.expiresNs - 2_000_000_000n });
    node.run('tc_ingress', reply('A'));
    expect(node.dp.maps.ct4.lookup(flowKey(30081))!.hopIfindex).toBe(0);
    r = node.run('tc_ingress', client(30081, 'A'));
    expect(sentTo(r.data, r.retval)).toBe(OTHER_NODE_MAC);
  });

  it('DSR: every packet of a flow uses its kept hop, a SYN that carries the option again too; a due write routes again', () => {
    let r = node.run('tc_ingress', client(30082, 'S', 1000));
    expect(sentTo(r.data, r.retval)).toBe(OTHER_NODE_MAC);
    expect(node.dp.maps.ct4.lookup(flowKey(30082))!.hopIfindex).toBe(node.ifindex);
    staleFlowHop(30082);
    r = node.run('tc_ingress', client(30082, 'A'));
    expect(sentTo(r.data, r.retval)).toBe(STALE_MAC);
    r = node.run('tc_ingress', client(30082, 'S', 1000)); // sent again: the option, by the kept hop
    expect(sentTo(r.data, r.retval)).toBe(STALE_MAC);
    expect(decodePacket(r.data).find((l) => l.name === 'ipv4')!.fields).toMatchObject({ ihl: 28, checksumValid: true });
    staleFlowHop(30082, { dueNow: true });
    r = node.run('tc_ingress', client(30082, 'S', 1000));
    expect(sentTo(r.data, r.retval)).toBe(OTHER_NODE_MAC);
  });

  it('new DSR flows to a backend share its route for a second, as SNAT flows do', () => {
    const hops = node.dp.maps.lb4_backend_hops;
    const { newFlow, slot, shared } = firstNewFlow(30082, CLIENT_IP); // DSR: from the client's address
    hops.update(slot, { ...shared, hopMacs: Buffer.concat([macBytes(STALE_MAC), shared.hopMacs.subarray(6)]) });
    let r = newFlow(CLIENT_PORT + 1);
    expect(sentTo(r.data, r.retval)).toBe(STALE_MAC);
    // From another client address (DSR keeps the source): looked up, and shared anew.
    r = node.run('tc_ingress', buildPacket(clientTcp(NODE_IP, 30082, { sport: CLIENT_PORT, flags: 'S', src: '10.0.40.7' })));
    expect(sentTo(r.data, r.retval)).toBe(OTHER_NODE_MAC);
    expect(hops.lookup(slot)).toMatchObject({ saddr: '10.0.40.7' });
  });

  it('new SNAT flows to a backend share its route for a second: from the same address and device, to the same backend address', () => {
    const hops = node.dp.maps.lb4_backend_hops;
    const { newFlow, slot, shared } = firstNewFlow(30081, NODE_IP); // SNAT: from the node's address
    let r: ReturnType<typeof newFlow>;
    expect([macOf(shared.hopMacs), macOf(shared.hopMacs, 6)]).toEqual([OTHER_NODE_MAC, NODE_MAC]);
    // `ferry map dump lb4_backend_hops`: the written slots only, by backend id.
    expect(dumpMap(node.pinDir, 'lb4_backend_hops')).toEqual([expect.objectContaining({ backendId: slot, daddr: REMOTE_POD, hopMacs: `${OTHER_NODE_MAC} (from ${NODE_MAC})`, lookedUp: '0s ago' })]);
    // Made wrong: the next new flow within the second is sent by it, and keeps it.
    const stale = { ...shared, hopMacs: Buffer.concat([macBytes(STALE_MAC), shared.hopMacs.subarray(6)]) };
    hops.update(slot, stale);
    r = newFlow(CLIENT_PORT + 1);
    expect(sentTo(r.data, r.retval)).toBe(STALE_MAC);
    expect(macOf(node.dp.maps.ct4.lookup({ ...flowKey(30081), sport: CLIENT_PORT + 1 })!.hopMacs)).toBe(STALE_MAC);
    // Not taken when older than a second, for another address (its id reused), from
    // another device or address: looked up, and shared anew.
    const notTaken = [{ lookedUpNs: shared.lookedUpNs - 2_000_000_000n }, { daddr: '10.0.30.99' }, { fromIfindex: node.ifindex + 1000 }, { saddr: '10.0.30.98' }];
    notTaken.forEach((change, i) => {
      hops.update(slot, { ...stale, ...change });
      r = newFlow(CLIENT_PORT + 2 + i);
      expect(sentTo(r.data, r.retval), Object.keys(change)[0]).toBe(OTHER_NODE_MAC);
      expect(hops.lookup(slot)).toMatchObject({ daddr: REMOTE_POD, saddr: NODE_IP, fromIfindex: node.ifindex });
      expect(macOf(hops.lookup(slot)!.hopMacs)).toBe(OTHER_NODE_MAC);
    });
    // An established flow's packets do not take it: they have their own kept hop.
    hops.update(slot, stale);
    r = node.run('tc_ingress', client(30081, 'S', 1000));
    expect(sentTo(r.data, r.retval)).toBe(OTHER_NODE_MAC);
    // `ferry ct flush` forgets it with the flows.
    clearConntrack(node.dp.maps);
    expect(hops.lookup(slot)).toBeUndefined();
    expect(dumpMap(node.pinDir, 'lb4_backend_hops')).toEqual([]);
  });

  it('a reported route change makes the hops kept before it stale: each direction of a flow routes again by its next packet, new flows share no older hop', async () => {
    const epoch = new HopEpoch(node.dp.maps.ferry_hop_epoch);
    // The program's clock (coarse: up to a tick behind the agent's) is past a change written now.
    const changeRoutes = async () => {
      epoch.invalidate();
      await sleep(30);
    };
    const staleReplyHop = () => {
      const [k, b] = node.dp.maps.nat4.entries().find(([key]) => key.saddr === REMOTE_POD)!;
      node.dp.maps.nat4.update(k, { ...b, hopMacs: Buffer.concat([macBytes(STALE_MAC), b.hopMacs.subarray(6)]) });
    };
    try {
      for (const [pkt, flags] of [[client, 'S'], [reply, 'SA'], [client, 'A'], [reply, 'A']] as const) node.run('tc_ingress', pkt === client ? client(30081, flags, 1000) : reply(flags));
      // A change before the flows' last writes: the stale hops are used (so what follows is the epoch's doing).
      node.dp.maps.ferry_hop_epoch.update(0, { sinceNs: (monotonicNs() - 10_000_000_000n) & ~1n }); // even: FERRY_HOPS_PER_FLOW not set
      staleFlowHop(30081);
      staleReplyHop();
      expect(sentTo(node.run('tc_ingress', client(30081, 'A')).data, TcVerdict.REDIRECT)).toBe(STALE_MAC);
      expect(sentTo(node.run('tc_ingress', reply('A')).data, TcVerdict.REDIRECT)).toBe(STALE_MAC);
      // The client's side first: routed again once, then kept again (a hop looked up after the change).
      await changeRoutes();
      expect(sentTo(node.run('tc_ingress', client(30081, 'A')).data, TcVerdict.REDIRECT)).toBe(OTHER_NODE_MAC);
      staleFlowHop(30081);
      expect(sentTo(node.run('tc_ingress', client(30081, 'A')).data, TcVerdict.REDIRECT)).toBe(STALE_MAC);
      // The replies' side on its own.
      node.run('tc_ingress', reply('A'));
      staleReplyHop();
      expect(sentTo(node.run('tc_ingress', reply('A')).data, TcVerdict.REDIRECT)).toBe(STALE_MAC);
      await changeRoutes();
      expect(sentTo(node.run('tc_ingress', reply('A')).data, TcVerdict.REDIRECT)).toBe(ROUTER_MAC);
      // A backend's shared hop looked up before the change is not taken by a new flow.
      const slot = node.dp.maps.ct4.lookup(flowKey(30081))!.backendId;
      const shared = node.dp.maps.lb4_backend_hops.lookup(slot)!;
      node.dp.maps.lb4_backend_hops.update(slot, { ...shared, hopMacs: Buffer.concat([macBytes(STALE_MAC), shared.hopMacs.subarray(6)]), lookedUpNs: monotonicNs() - 5_000_000n });
      await changeRoutes();
      const r = node.run('tc_ingress', buildPacket(clientTcp(NODE_IP, 30081, { sport: CLIENT_PORT + 9, flags: 'S' })));
      expect(sentTo(r.data, r.retval)).toBe(OTHER_NODE_MAC);
      expect(node.dp.maps.lb4_backend_hops.lookup(slot)!.lookedUpNs).toBeGreaterThanOrEqual(epoch.sinceNs);
      expect(dumpMap(node.pinDir, 'ferry_hop_epoch')).toEqual([{ id: 0, routesChanged: '0s ago', newFlowHops: 'shared', snatAddress: "the node's" }]);
    } finally {
      node.dp.maps.ferry_hop_epoch.update(0, { sinceNs: 0n });
    }
  });

  it('a policy rule by port or TOS is followed; where routes depend on them (FERRY_HOPS_PER_FLOW) new flows share no hop', async () => {
    const epoch = new HopEpoch(node.dp.maps.ferry_hop_epoch);
    // Flows that leave from CLIENT_PORT (the SNAT port a client's own port keeps) go to the
    // remote pods by the router, the others by the other node (the main table).
    await node.host.ip('route', 'add', REMOTE_POD_CIDR, 'via', ROUTER_IP, 'table', '100');
    await node.host.ip('rule', 'add', 'pref', '100', 'ipproto', 'tcp', 'sport', String(CLIENT_PORT), 'lookup', '100');
    const fromPort = (sport: number) => {
      const r = node.run('tc_ingress', buildPacket(clientTcp(NODE_IP, 30081, { sport, flags: 'S' })));
      return sentTo(r.data, r.retval);
    };
    try {
      epoch.setPerFlow(true);
      await sleep(30); // past the program's coarse clock
      expect(epoch.perFlow).toBe(true);
      expect(fromPort(CLIENT_PORT)).toBe(ROUTER_MAC);
      expect(fromPort(CLIENT_PORT + 1)).toBe(OTHER_NODE_MAC);
      expect(node.dp.maps.ct4.lookup(flowKey(30081))!.hopIfindex).toBe(node.ifindex);
      expect(macOf(node.dp.maps.ct4.lookup(flowKey(30081))!.hopMacs)).toBe(ROUTER_MAC);
      expect(dumpMap(node.pinDir, 'ferry_hop_epoch')).toEqual([{ id: 0, routesChanged: '0s ago', newFlowHops: 'per flow', snatAddress: "the node's" }]);
      // Shared, as where routes depend on addresses only: the second new flow takes the
      // first one's hop, which this rule makes wrong for it.
      node.flushState();
      epoch.setPerFlow(false);
      await sleep(30);
      expect(fromPort(CLIENT_PORT)).toBe(ROUTER_MAC);
      expect(fromPort(CLIENT_PORT + 1)).toBe(ROUTER_MAC);
      // A rule by TOS: the packet's own TOS byte is in the lookup.
      await node.host.ip('rule', 'add', 'pref', '101', 'tos', '0x10', 'lookup', '100');
      node.flushState();
      epoch.setPerFlow(true);
      await sleep(30);
      const withTos = (sport: number, tos: number) => {
        const r = node.run('tc_ingress', buildPacket(clientTcp(NODE_IP, 30081, { sport, flags: 'S', tos })));
        return sentTo(r.data, r.retval);
      };
      expect(withTos(CLIENT_PORT + 2, 0x10)).toBe(ROUTER_MAC);
      expect(withTos(CLIENT_PORT + 3, 0)).toBe(OTHER_NODE_MAC);
    } finally {
      await node.host.ip('rule', 'del', 'pref', '101').catch(() => undefined);
      await node.host.ip('rule', 'del', 'pref', '100');
      await node.host.ip('route', 'flush', 'table', '100');
      node.dp.maps.ferry_hop_epoch.update(0, { sinceNs: 0n });
    }
  });

  it('multipath routes hashed by ports spread a backend\'s new flows, and each flow stays on its path when routed again', async () => {
    const epoch = new HopEpoch(node.dp.maps.ferry_hop_epoch);
    await node.host.ip('route', 'add', '10.244.9.0/24', 'nexthop', 'via', ROUTER_IP, 'nexthop', 'via', OTHER_NODE_IP);
    await node.host.execOk(['sysctl', '-qw', 'net.ipv4.fib_multipath_hash_policy=1']);
    const PORTS = Array.from({ length: 16 }, (_, i) => CLIENT_PORT + 100 + i);
    const send = (sport: number, flags: string) => {
      const r = node.run('tc_ingress', buildPacket(clientTcp(NODE_IP, 30084, { sport, flags, seq: 1000 })));
      return sentTo(r.data, r.retval);
    };
    try {
      epoch.setPerFlow(true);
      await sleep(30);
      const first = PORTS.map((sport) => send(sport, 'S'));
      expect(new Set(first)).toEqual(new Set([ROUTER_MAC, OTHER_NODE_MAC]));
      // Routed again after a change: the same path for each flow (its hash is its own).
      epoch.invalidate();
      await sleep(30);
      expect(PORTS.map((sport) => send(sport, 'S'))).toEqual(first);
    } finally {
      await node.host.execOk(['sysctl', '-qw', 'net.ipv4.fib_multipath_hash_policy=0']);
      await node.host.ip('route', 'del', '10.244.9.0/24');
      node.dp.maps.ferry_hop_epoch.update(0, { sinceNs: 0n });
    }
  });

  it('a route whose neighbour is not resolved yet is not kept: the kernel resolves it, and the next packet asks again', () => {
    const sent = client(30083, 'S', 1000);
    const r = node.run('tc_ingress', sent);
    expect(r.retval).toBe(TcVerdict.REDIRECT); // bpf_redirect_neigh
    // Translated, TTL down, checksums right; the MACs left for the kernel to write (a
    // resolved route's MACs go in with the IPv4 header, this one's with nothing).
    const [l2, l3, l4] = decodePacket(r.data);
    expect(l2!.fields).toMatchObject({ dst: macOf(sent, 0), src: macOf(sent, 6) });
    expect(l3!.fields).toMatchObject({ src: NODE_IP, dst: UNRESOLVED_BACKEND, ttl: 62, checksumValid: true });
    expect(l4!.fields).toMatchObject({ dport: 8080, checksumValid: true });
    expect(node.dp.maps.ct4.lookup(flowKey(30083))!.hopIfindex).toBe(0);
    expect(node.dp.maps.lb4_backend_hops.lookup(node.dp.maps.ct4.lookup(flowKey(30083))!.backendId)).toBeUndefined(); // none shared
  });
});
