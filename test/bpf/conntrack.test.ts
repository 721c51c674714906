// Conntrack lifetimes as the program sets them (SYN, established, closing, UDP; written on
// a change of state or once a second) and the user-space collector that removes expired
// flows.
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { collectConntrack, collectOrphans, deleteStillExpired, deleteStillOrphaned, expiredKeys, monotonicNs, orphanKeys } from '../../src/datapath/ct-gc.js';
import { CtFlags, Stat, type Ct4Key, type Nat4Entry } from '../../src/datapath/layouts.js';
import type { FrontendSpec } from '../../src/model/frontend.js';
import { buildPacket, eth, icmp, ipv4, payload, tcp, udp } from '../../src/packet/build.js';
import { CLIENT_IP, NODE_IP, datapathNode, total, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { checksumProblems } from '../../src/sandbox/packet-fixture.js';
import { describeWith } from '../harness/requirements.js';

let node: DatapathNode;
const SERVICES: FrontendSpec[] = [
  { address: NODE_IP, port: 30080, proto: 'TCP', kind: 'NodePort', backends: [{ address: '10.244.1.5', port: 8080, local: true }] },
  { address: NODE_IP, port: 30081, proto: 'TCP', kind: 'NodePort', backends: [{ address: '10.244.1.5', port: 8080, local: true }] },
  { address: NODE_IP, port: 30053, proto: 'UDP', kind: 'NodePort', backends: [{ address: '10.244.2.5', port: 53, local: false }] },
  { address: NODE_IP, port: 30054, proto: 'UDP', kind: 'NodePort', backends: [{ address: '10.244.1.5', port: 5353, local: true }] },
  { address: NODE_IP, port: 30055, proto: 'UDP', kind: 'NodePort', backends: [{ address: '10.244.1.5', port: 5353, local: true }] },
];
const LIFETIMES = { tcpSyn: 30, tcpEstablished: 3000, tcpClosing: 5, nonTcp: 20 };
beforeAll(async () => {
  node = await datapathNode({ ctLifetimes: LIFETIMES });
  node.writer.apply(SERVICES);
});
afterAll(async () => {
  await node?.close();
});
beforeEach(() => node.flushState());

const toNodePort = (sport: number, flags: string) => buildPacket([eth(), ipv4({ src: CLIENT_IP, dst: NODE_IP }), tcp({ sport, dport: 30080, flags })]);
const replyFromPod = (dport: number, flags: string) => buildPacket([eth(), ipv4({ src: '10.244.1.5', dst: CLIENT_IP }), tcp({ sport: 8080, dport, flags })]);

/** An established flow from `sport` to NodePort 30080 (pod 10.244.1.5:8080), and the same
 * client port towards NodePort 30081 of the same pod: its packets, and the source port
 * the pod's replies on the shared tuple leave with. */
function sharedTuple(sport: number): { toOther: (flags: string) => Buffer; replySource: (flags: string, toPort?: number) => number } {
  node.run('tc_ingress', toNodePort(sport, 'S'));
  node.run('tc_egress', replyFromPod(sport, 'SA'));
  node.run('tc_ingress', toNodePort(sport, 'A'));
  return {
    toOther: (flags) => buildPacket([eth(), ipv4({ src: CLIENT_IP, dst: NODE_IP }), tcp({ sport, dport: 30081, flags })]),
    replySource: (flags, toPort = sport) => node.run('tc_egress', replyFromPod(toPort, flags)).data.readUInt16BE(14 + 20),
  };
}

/** Source and destination ports of a packet as it left (Ethernet + 20-byte IPv4). */
const portsOf = (b: Buffer) => [b.readUInt16BE(14 + 20), b.readUInt16BE(14 + 22)];

/** Seconds from now until the single ct4 entry expires. */
function ctTtl(): { ttl: number; flags: number } {
  const [, v] = node.dp.maps.ct4.entries()[0]!;
  return { ttl: Number(v.expiresNs - monotonicNs()) / 1e9, flags: v.flags };
}

describeWith(['root', 'bpffs', 'netns'], 'conntrack', () => {
  it('follows a TCP flow: SYN, established once the client acknowledges the reply, closing after FIN', () => {
    node.run('tc_ingress', toNodePort(62001, 'S'));
    expect(ctTtl().ttl).toBeGreaterThan(LIFETIMES.tcpSyn - 2);
    expect(ctTtl().ttl).toBeLessThanOrEqual(LIFETIMES.tcpSyn);
    node.run('tc_egress', replyFromPod(62001, 'SA'));
    // A SYN-ACK alone does not establish the flow.
    expect(ctTtl()).toMatchObject({ flags: CtFlags.CT_F_LOCAL | CtFlags.CT_F_SEEN_REPLY });
    expect(ctTtl().ttl).toBeLessThanOrEqual(LIFETIMES.tcpSyn);
    node.run('tc_ingress', toNodePort(62001, 'A'));
    expect(ctTtl()).toMatchObject({ flags: CtFlags.CT_F_LOCAL | CtFlags.CT_F_SEEN_REPLY | CtFlags.CT_F_ESTABLISHED });
    expect(ctTtl().ttl).toBeGreaterThan(LIFETIMES.tcpEstablished - 2);
    node.run('tc_ingress', toNodePort(62001, 'FA'));
    expect(ctTtl().flags & CtFlags.CT_F_CLOSING).toBeTruthy();
    expect(ctTtl().ttl).toBeLessThanOrEqual(LIFETIMES.tcpClosing);
  });

  it('stamps lifetimes by the monotonic clock as the last tick left it, read again when the tick moves (each CPU keeps a copy)', async () => {
    const SEC = 1_000_000_000n;
    // A tick is 1-10 ms (HZ 1000 to 100); the copy may lag one tick more at a tick's edge. A
    // copy never read again would lag by the pauses between flows (60 ms each).
    const LAG = 25_000_000n;
    for (let i = 0; i < 4; i++) {
      const sport = 62040 + i;
      const before = monotonicNs();
      node.run('tc_ingress', toNodePort(sport, 'S'));
      const after = monotonicNs();
      const entry = node.dp.maps.ct4.entries().find(([k]) => k.sport === sport)?.[1];
      expect(entry).toBeDefined();
      const stamped = entry!.expiresNs - BigInt(LIFETIMES.tcpSyn) * SEC;
      expect(stamped).toBeLessThanOrEqual(after);
      expect(stamped).toBeGreaterThan(before - LAG);
      await new Promise((r) => setTimeout(r, 60));
    }
  });

  it('writes a flow\'s lifetime (and its reply binding) when its state changes or the lifetime moves a second, not on every packet', async () => {
    const expires = () => ({ ct: node.dp.maps.ct4.entries()[0]![1].expiresNs, nat: node.dp.maps.nat4.entries()[0]![1].expiresNs });
    node.run('tc_ingress', toNodePort(62020, 'S'));
    node.run('tc_egress', replyFromPod(62020, 'SA'));
    node.run('tc_ingress', toNodePort(62020, 'A'));
    const established = expires();
    expect(established.nat).toBe(established.ct);
    // The next segments, within the second: nothing written, either way.
    node.run('tc_ingress', toNodePort(62020, 'A'));
    node.run('tc_egress', replyFromPod(62020, 'A'));
    expect(expires()).toEqual(established);
    // A binding lost meanwhile (LRU eviction) comes back with the next write.
    node.dp.maps.nat4.delete(node.dp.maps.nat4.entries()[0]![0]);
    await new Promise((r) => setTimeout(r, 1100));
    node.run('tc_ingress', toNodePort(62020, 'A'));
    const later = expires();
    expect(later.ct).toBeGreaterThan(established.ct + 1_000_000_000n);
    expect(later.nat).toBe(later.ct);
    // A state change is written at once.
    node.run('tc_ingress', toNodePort(62020, 'FA'));
    expect(ctTtl().flags & CtFlags.CT_F_CLOSING).toBeTruthy();
    expect(ctTtl().ttl).toBeLessThanOrEqual(LIFETIMES.tcpClosing);
    expect(expires().nat).toBe(expires().ct);
  });

  it('half-open: a SYN answered but never acknowledged keeps the SYN lifetime, whatever the SYN-ACKs', () => {
    node.run('tc_ingress', toNodePort(62010, 'S'));
    for (let i = 0; i < 3; i++) node.run('tc_egress', replyFromPod(62010, 'SA')); // retransmitted SYN-ACKs
    node.run('tc_ingress', toNodePort(62010, 'S')); // and a retransmitted SYN
    expect(ctTtl().flags & CtFlags.CT_F_ESTABLISHED).toBe(0);
    expect(ctTtl().ttl).toBeLessThanOrEqual(LIFETIMES.tcpSyn);
    const [, binding] = node.dp.maps.nat4.entries()[0]!;
    expect(Number(binding.expiresNs - monotonicNs()) / 1e9).toBeLessThanOrEqual(LIFETIMES.tcpSyn);
  });

  it('a non-SYN segment from the backend means its connection is established', () => {
    node.run('tc_ingress', toNodePort(62011, 'S'));
    node.run('tc_egress', replyFromPod(62011, 'SA'));
    node.run('tc_egress', replyFromPod(62011, 'A'));
    expect(ctTtl().flags & CtFlags.CT_F_ESTABLISHED).toBeTruthy();
    expect(ctTtl().ttl).toBeGreaterThan(LIFETIMES.tcpEstablished - 2);
  });

  it('gives UDP the non-TCP lifetime and keeps an SNAT binding beside it', () => {
    node.run('tc_ingress', buildPacket([eth(), ipv4({ src: CLIENT_IP, dst: NODE_IP }), udp({ sport: 5000, dport: 30053 })]));
    expect(ctTtl().ttl).toBeGreaterThan(LIFETIMES.nonTcp - 2);
    expect(node.dp.maps.nat4.entries().map(([, v]) => v.flags & CtFlags.CT_F_SNAT)).toEqual([CtFlags.CT_F_SNAT]);
  });

  it('collects flows whose backend is gone (after a restart the removal flush missed), and names the ids live flows use', () => {
    node.run('tc_ingress', toNodePort(62020, 'S'));
    node.run('tc_ingress', buildPacket([eth(), ipv4({ src: CLIENT_IP, dst: NODE_IP }), udp({ sport: 5000, dport: 30053 })]));
    const ids = new Set(node.dp.maps.ct4.entries().map(([, v]) => v.backendId));
    expect(collectOrphans(node.dp.maps)).toEqual({ ctDeleted: 0, natDeleted: 0, backendIdsInFlows: ids });
    // The UDP backend disappears behind the writer's back.
    const [udpId] = node.dp.maps.lb4_backends.entries().find(([, b]) => b.address === '10.244.2.5')!;
    node.dp.maps.lb4_backends.delete(udpId);
    const r = collectOrphans(node.dp.maps);
    expect(r).toMatchObject({ ctDeleted: 1, natDeleted: 1 });
    expect([...r.backendIdsInFlows]).not.toContain(udpId);
    expect(node.dp.maps.ct4.entries().map(([k]) => k.dport)).toEqual([30080]);
    // The maps and the writer's view agree again.
    node.writer.apply([]);
    node.writer.apply(SERVICES);
  });

  it('the orphan collector keeps a flow and a binding whose backend is live again when it deletes, though its walk found them orphaned', () => {
    const udpFrom = (sport: number) => buildPacket([eth(), ipv4({ src: CLIENT_IP, dst: NODE_IP }), udp({ sport, dport: 30053 })]);
    node.run('tc_ingress', udpFrom(5001));
    const [[ctKey]] = node.dp.maps.ct4.entries() as [[Ct4Key, unknown]];
    const [[natKey]] = node.dp.maps.nat4.entries() as [[Ct4Key, unknown]];
    const [udpId, udpBackend] = node.dp.maps.lb4_backends.entries().find(([, b]) => b.address === '10.244.2.5')!;
    // The backend disappears behind the writer's back, and the collector's walk finds both orphans.
    node.dp.maps.lb4_backends.delete(udpId);
    const found = orphanKeys(node.dp.maps);
    expect(found.ct).toEqual([ctKey]);
    expect(found.nat).toEqual([natKey]);
    // Before it deletes, the backend is back under its id (as a flow balanced afresh under the
    // same key points at a live one) and the flow's next packet went on through it.
    node.dp.maps.lb4_backends.update(udpId, udpBackend);
    node.run('tc_ingress', udpFrom(5001));
    expect(deleteStillOrphaned(node.dp.maps, found)).toEqual({ ctDeleted: 0, natDeleted: 0 });
    expect(node.dp.maps.ct4.lookup(ctKey)?.backendId).toBe(udpId);
    expect(node.dp.maps.nat4.lookup(natKey)).toBeDefined();
    // Still orphans when it deletes: they go.
    node.dp.maps.lb4_backends.delete(udpId);
    expect(deleteStillOrphaned(node.dp.maps, found)).toEqual({ ctDeleted: 1, natDeleted: 1 });
    expect(node.dp.maps.ct4.lookup(ctKey)).toBeUndefined();
    node.writer.apply([]);
    node.writer.apply(SERVICES);
  });

  it('collects expired entries and keeps live ones', () => {
    node.run('tc_ingress', toNodePort(62002, 'S'));
    node.run('tc_ingress', toNodePort(62003, 'S'));
    expect(collectConntrack(node.dp.maps)).toEqual({ ctScanned: 2, ctDeleted: 0, natScanned: 2, natDeleted: 0 });
    // As if the SYN lifetime had passed.
    const later = monotonicNs() + BigInt(LIFETIMES.tcpSyn + 1) * 1_000_000_000n;
    expect(collectConntrack(node.dp.maps, later)).toEqual({ ctScanned: 2, ctDeleted: 2, natScanned: 2, natDeleted: 2 });
    expect(node.dp.maps.ct4.entries()).toEqual([]);
  });

  it('the collector does not delete a key the datapath took over after the collector found it expired', () => {
    const toUdpNodePort = (src: string) => buildPacket([eth(), ipv4({ src, dst: NODE_IP }), udp({ sport: 5000, dport: 30053 })]);
    node.run('tc_ingress', toUdpNodePort(CLIENT_IP));
    const [[bindingKey, binding]] = node.dp.maps.nat4.entries() as [[Ct4Key, Nat4Entry]];
    expect(binding.clientAddr).toBe(CLIENT_IP);
    // The flow is over (expired, awaiting collection) when the collector walks the maps.
    node.dp.maps.nat4.update(bindingKey, { ...binding, expiresNs: 1n });
    const now = monotonicNs();
    const found = expiredKeys(node.dp.maps, now);
    expect(found.nat).toEqual([bindingKey]);
    // Before it deletes, a new client from the same port takes the binding's port over.
    node.run('tc_ingress', toUdpNodePort('192.0.2.77'));
    expect(node.dp.maps.nat4.lookup(bindingKey)?.clientAddr).toBe('192.0.2.77');
    expect(deleteStillExpired(node.dp.maps.nat4, found.nat, now)).toBe(0);
    expect(node.dp.maps.nat4.lookup(bindingKey)?.clientAddr).toBe('192.0.2.77');
    // What is still expired goes.
    node.dp.maps.nat4.update(bindingKey, { ...node.dp.maps.nat4.lookup(bindingKey)!, expiresNs: 1n });
    expect(deleteStillExpired(node.dp.maps.nat4, found.nat, now)).toBe(1);
    expect(node.dp.maps.nat4.lookup(bindingKey)).toBeUndefined();
  });

  it('a closed NodePort flow does not rewrite a new connection that reuses the client port', () => {
    node.run('tc_ingress', toNodePort(62004, 'S'));
    node.run('tc_egress', replyFromPod(62004, 'SA'));
    node.run('tc_ingress', toNodePort(62004, 'FA'));
    // The client now connects straight to the pod from the same port: its SYN-ACK must
    // leave untouched, and the stale reply entry goes.
    const synAck = replyFromPod(62004, 'SA');
    const r = node.run('tc_egress', synAck);
    expect(r.data.equals(synAck)).toBe(true);
    expect(node.dp.maps.nat4.entries()).toEqual([]);
  });

  it('a client port reused at once towards another frontend of the same pod: the new flow reaches the pod from another port, both go on', () => {
    const { toOther, replySource } = sharedTuple(62007);
    // The other frontend's SYN reaches the pod from another client port (netfilter would
    // remap it too); before, it took the live connection's replies, whose client answered
    // them with a reset that ended the live connection at the pod.
    const remappedSyn = node.run('tc_ingress', toOther('S')).data;
    const [remapped, podPort] = portsOf(remappedSyn);
    expect(podPort).toBe(8080);
    expect(checksumProblems(remappedSyn)).toEqual([]); // both ports and the address changed at once
    expect(remapped).not.toBe(62007);
    expect(remapped).toBeGreaterThanOrEqual(1024);
    expect(total(node.dp, 'ferry_stats', Stat.STAT_LOCAL_REMAPPED)).toBe(1n);
    expect(total(node.dp, 'ferry_stats', Stat.STAT_LOCAL_CONTESTED)).toBe(0n);
    // The pod answers each on its own tuple; each answer leaves as its frontend, to the client's own port.
    expect(replySource('PA')).toBe(30080);
    const synAck = node.run('tc_egress', replyFromPod(remapped!, 'SA')).data;
    expect(portsOf(synAck)).toEqual([30081, 62007]);
    // Both flows' later segments keep their ports at the pod.
    expect(portsOf(node.run('tc_ingress', toNodePort(62007, 'PA')).data)).toEqual([62007, 8080]);
    expect(portsOf(node.run('tc_ingress', toOther('A')).data)).toEqual([remapped, 8080]);
    const other = node.dp.maps.ct4.entries().find(([k]) => k.dport === 30081)![1];
    expect(other).toMatchObject({ natAddr: CLIENT_IP, natPort: remapped });
    // Its conntrack entry lost (an overfull map evicting it): its next segment finds the port its pod knows again.
    node.dp.maps.ct4.delete(node.dp.maps.ct4.entries().find(([k]) => k.dport === 30081)![0]);
    expect(portsOf(node.run('tc_ingress', toOther('PA')).data)).toEqual([remapped, 8080]);
    expect(total(node.dp, 'ferry_stats', Stat.STAT_LOCAL_REMAPPED)).toBe(1n); // found again, not remapped anew
    expect(replySource('A')).toBe(30080);
    expect(replySource('A', remapped)).toBe(30081);
    // A router's fragmentation-needed about the remapped flow's reply (30081 → client:62007)
    // reaches the pod quoting the tuple the pod knows (pod:8080 → client:remapped).
    const quoted = buildPacket([ipv4({ src: NODE_IP, dst: CLIENT_IP, id: 7 }), tcp({ sport: 30081, dport: 62007, flags: 'A' })]).subarray(0, 28);
    const tooBig = buildPacket([eth(), ipv4({ src: '10.0.10.1', dst: NODE_IP }), icmp({ type: 3, code: 4, rest: 1400 }), payload(quoted)]);
    const related = node.run('tc_ingress', tooBig).data;
    expect(related.subarray(14 + 16, 14 + 20).join('.')).toBe('10.244.1.5');
    const inner = 14 + 20 + 8;
    expect([related.subarray(inner + 12, inner + 16).join('.'), related.readUInt16BE(inner + 20), related.readUInt16BE(inner + 22)]).toEqual(['10.244.1.5', 8080, remapped]);
  });

  it('UDP from one client port to two frontends of the same pod: each flow\'s answers leave as its own frontend', () => {
    const udpTo = (dport: number) => buildPacket([eth(), ipv4({ src: CLIENT_IP, dst: NODE_IP }), udp({ sport: 5000, dport }), payload('q')]);
    const answer = (dport: number) => buildPacket([eth(), ipv4({ src: '10.244.1.5', dst: CLIENT_IP }), udp({ sport: 5353, dport }), payload('a')]);
    expect(portsOf(node.run('tc_ingress', udpTo(30054)).data)).toEqual([5000, 5353]);
    const remappedDatagram = node.run('tc_ingress', udpTo(30055)).data;
    const [remapped] = portsOf(remappedDatagram);
    expect(remapped).not.toBe(5000);
    expect(checksumProblems(remappedDatagram)).toEqual([]);
    // Before, the newest flow owned the tuple: the first flow's answers left as 30055,
    // which its client (a socket connected to 30054) never sees.
    expect(portsOf(node.run('tc_egress', answer(5000)).data)).toEqual([30054, 5000]);
    expect(portsOf(node.run('tc_egress', answer(remapped!)).data)).toEqual([30055, 5000]);
    expect(portsOf(node.run('tc_ingress', udpTo(30054)).data)).toEqual([5000, 5353]);
    expect(portsOf(node.run('tc_ingress', udpTo(30055)).data)).toEqual([remapped, 5353]);
    expect(total(node.dp, 'ferry_stats', Stat.STAT_LOCAL_REMAPPED)).toBe(1n);
  });

  it('a flow whose binding was evicted and taken by another frontend\'s flow: its SYN contests the tuple, the pod\'s SYN-ACK moves it back', () => {
    const { toOther, replySource } = sharedTuple(62008);
    // The live flow's binding lost (LRU eviction), the other frontend's flow finds the tuple free and takes it.
    for (const [k] of node.dp.maps.nat4.entries()) node.dp.maps.nat4.delete(k);
    expect(portsOf(node.run('tc_ingress', toOther('S')).data)).toEqual([62008, 8080]);
    expect(replySource('SA')).toBe(30081);
    // The first flow's client opens again from its port (its conntrack entry still live): its SYN contests.
    node.run('tc_ingress', toNodePort(62008, 'S'));
    expect(total(node.dp, 'ferry_stats', Stat.STAT_LOCAL_CONTESTED)).toBe(1n);
    expect(replySource('SA')).toBe(30080);
    // The binding is the first flow's: its flags and reverse NAT, counted afresh.
    const [, moved] = node.dp.maps.nat4.entries()[0]!;
    expect(moved).toMatchObject({ frontendPort: 30080, pendingPort: 0, packets: 1n });
    const ct = node.dp.maps.ct4.entries().find(([k]) => k.dport === 30080)![1];
    expect(moved.revNatId).toBe(ct.revNatId);
    expect(moved.flags & CtFlags.CT_F_LOCAL).toBeTruthy();
    // A segment of the other flow (not a SYN) does not take it back.
    node.run('tc_ingress', toOther('FA'));
    expect(replySource('A')).toBe(30080);
  });

  it('a client port reused towards another frontend of the same backend gets that frontend in replies', () => {
    node.run('tc_ingress', toNodePort(62006, 'S'));
    node.run('tc_egress', replyFromPod(62006, 'SA'));
    node.run('tc_ingress', toNodePort(62006, 'FA'));
    // Same client port, NodePort 30081, same pod: the pod sees the same tuple as before.
    node.run('tc_ingress', buildPacket([eth(), ipv4({ src: CLIENT_IP, dst: NODE_IP }), tcp({ sport: 62006, dport: 30081, flags: 'S' })]));
    const out = node.run('tc_egress', replyFromPod(62006, 'SA'));
    expect(out.data.readUInt16BE(14 + 20)).toBe(30081);
  });

  it('a new SYN on a closing tuple starts a fresh flow', () => {
    node.run('tc_ingress', toNodePort(62005, 'S'));
    node.run('tc_egress', replyFromPod(62005, 'SA'));
    node.run('tc_ingress', toNodePort(62005, 'RA'));
    expect(ctTtl().flags & CtFlags.CT_F_CLOSING).toBeTruthy();
    node.run('tc_ingress', toNodePort(62005, 'S'));
    expect(ctTtl().flags).toBe(CtFlags.CT_F_LOCAL);
    expect(ctTtl().ttl).toBeGreaterThan(LIFETIMES.tcpSyn - 2);
  });
});
