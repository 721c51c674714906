// SNAT source ports are a range per backend: a live established flow keeps its port; one
// that never became established gives it up when none is free (early drop); a reset frees
// it at once, but only a reset that can be genuine; a port the host holds a socket on is
// never taken.
import { closeSync } from 'node:fs';
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { CtFlags, Stat } from '../../src/datapath/layouts.js';
import { buildPacket, eth, ipv4, tcp } from '../../src/packet/build.js';
import { decodePacket } from '../../src/packet/decode.js';
import { TcVerdict } from '../../src/sandbox/packet-fixture.js';
import { CLIENT_IP, NODE_IP, datapathNode, total, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { listeningSocketInNetns } from '../../src/sys/socket.js';
import { describeWith } from '../harness/requirements.js';

const REMOTE_POD = '10.244.2.5';
const PORT = 61000;
/** A node whose NodePort 30081 has one remote backend, and SNAT ports min..max. */
async function nodeWithPorts(min: number, max: number): Promise<DatapathNode> {
  const n = await datapathNode({ snatPortMin: min, snatPortMax: max });
  n.writer.apply([{ address: NODE_IP, port: 30081, proto: 'TCP', kind: 'NodePort', backends: [{ address: REMOTE_POD, port: 8080, local: false }] }]);
  return n;
}

let node: DatapathNode;
beforeAll(async () => {
  // One SNAT port: the second live flow to the backend cannot get one.
  node = await nodeWithPorts(PORT, PORT);
});
afterAll(async () => {
  await node?.close();
});
beforeEach(() => node.flushState());

const fromClient = (sport: number, flags: string, seq = 100) => buildPacket([eth(), ipv4({ src: CLIENT_IP, dst: NODE_IP }), tcp({ sport, dport: 30081, flags, seq, ack: flags.includes('A') ? 5001 : 0 })]);
const fromBackend = (flags: string) => buildPacket([eth(), ipv4({ src: REMOTE_POD, dst: NODE_IP }), tcp({ sport: 8080, dport: PORT, flags, seq: 5000, ack: 101 })]);
const natPorts = () => node.dp.maps.nat4.entries().map(([k]) => k.dport);

/** SYN (seq 100), SYN-ACK, ACK (seq 101): an established flow through the one port. */
function establish(sport: number): void {
  expect(node.run('tc_ingress', fromClient(sport, 'S')).retval).toBe(TcVerdict.REDIRECT);
  node.run('tc_ingress', fromBackend('SA'));
  node.run('tc_ingress', fromClient(sport, 'A', 101));
  expect(node.dp.maps.nat4.entries()[0]![1].flags & CtFlags.CT_F_ESTABLISHED).toBeTruthy();
}

describeWith(['root', 'bpffs', 'netns'], 'SNAT ports', () => {
  it('a second flow finds no free port while the first is established, and is dropped', () => {
    establish(40001);
    expect(node.run('tc_ingress', fromClient(40002, 'S')).retval).toBe(TcVerdict.SHOT);
    expect(natPorts()).toEqual([PORT]);
  });

  it('early drop: a flow that never became established gives its port to a new one', () => {
    node.run('tc_ingress', fromClient(40001, 'S'));
    node.run('tc_ingress', fromBackend('SA')); // answered, never acknowledged
    const r = node.run('tc_ingress', fromClient(40002, 'S'));
    expect(r.retval).toBe(TcVerdict.REDIRECT);
    expect(total(node.dp, 'ferry_stats', Stat.STAT_NAT_EARLY_DROP)).toBe(1n);
    expect(node.dp.maps.nat4.entries()[0]![1].clientPort).toBe(40002);
    expect(node.dp.maps.ct4.entries().map(([k]) => k.sport)).toEqual([40002]);
  });

  it('a flow closing with FIN keeps its port for the closing lifetime', () => {
    establish(40001);
    node.run('tc_ingress', fromClient(40001, 'FA', 101));
    expect(node.run('tc_ingress', fromClient(40002, 'S')).retval).toBe(TcVerdict.SHOT);
  });

  it('a client reset with the sequence number it was due to send frees the port at once', () => {
    establish(40001);
    node.run('tc_ingress', fromClient(40001, 'R', 101));
    const [, before] = node.dp.maps.ct4.entries()[0]!;
    expect(before.flags & CtFlags.CT_F_RESET).toBeTruthy();
    const r = node.run('tc_ingress', fromClient(40002, 'S'));
    expect(r.retval).toBe(TcVerdict.REDIRECT);
    expect(decodePacket(r.data).find((l) => l.name === 'tcp')!.fields.sport).toBe(PORT);
    expect(node.dp.maps.nat4.entries()[0]![1].clientPort).toBe(40002);
    expect(node.dp.maps.ct4.entries().map(([k]) => k.sport)).toEqual([40002]);
  });

  it('a reset from outside the window does not free a port the backend\'s connection holds', () => {
    establish(40001);
    node.run('tc_ingress', fromClient(40001, 'R', 90_000)); // a blind reset
    expect(node.dp.maps.ct4.entries()[0]![1].flags & CtFlags.CT_F_RESET).toBe(0);
    expect(node.run('tc_ingress', fromClient(40002, 'S')).retval).toBe(TcVerdict.SHOT);
  });

  it('a flow the backend reset frees its port too, even after another client packet', () => {
    node.run('tc_ingress', fromClient(40001, 'S'));
    node.run('tc_ingress', fromBackend('R'));
    node.run('tc_ingress', fromClient(40001, 'A', 101));
    expect(node.run('tc_ingress', fromClient(40002, 'S')).retval).toBe(TcVerdict.REDIRECT);
    expect(total(node.dp, 'ferry_stats', Stat.STAT_NAT_EARLY_DROP)).toBe(0n);
  });

  it('a stray ACK (no flow, not a SYN) holds a port only as a never-established flow: early drop takes it', () => {
    expect(node.run('tc_ingress', fromClient(40001, 'A', 101)).retval).toBe(TcVerdict.REDIRECT);
    expect(total(node.dp, 'ferry_stats', Stat.STAT_CT_MIDSTREAM)).toBe(1n);
    expect(node.run('tc_ingress', fromClient(40002, 'S')).retval).toBe(TcVerdict.REDIRECT);
    expect(total(node.dp, 'ferry_stats', Stat.STAT_NAT_EARLY_DROP)).toBe(1n);
    expect(node.dp.maps.nat4.entries().map(([, v]) => v.clientPort)).toEqual([40002]);
  });

  it('a client reopening an expired flow frees only its own binding, not the one another flow took since', () => {
    node.run('tc_ingress', fromClient(40001, 'S'));
    const [key, entry] = node.dp.maps.ct4.entries()[0]!;
    // 40001's flow is over: its binding collected, its conntrack entry expired, not yet collected.
    node.dp.maps.nat4.delete(node.dp.maps.nat4.entries()[0]![0]);
    node.dp.maps.ct4.update(key, { ...entry, expiresNs: 1n });
    establish(40002); // takes the port
    // 40001 opens again on its old tuple: its old entry is replaced, and no port is free.
    expect(node.run('tc_ingress', fromClient(40001, 'S')).retval).toBe(TcVerdict.SHOT);
    expect(node.dp.maps.nat4.entries().map(([k, v]) => [k.dport, v.clientPort])).toEqual([[PORT, 40002]]);
  });

  it('a port the host listens on is never taken', () => {
    const fd = listeningSocketInNetns(node.host.netns, NODE_IP, PORT);
    try {
      expect(node.run('tc_ingress', fromClient(40001, 'S')).retval).toBe(TcVerdict.SHOT);
      expect(natPorts()).toEqual([]);
    } finally {
      closeSync(fd);
    }
    expect(node.run('tc_ingress', fromClient(40001, 'S')).retval).toBe(TcVerdict.REDIRECT);
  });
});

// Two ports: a flow whose first port is taken gets the other. Its conntrack entry lost, its
// next segment must find that binding even once the first port is free again.
describeWith(['root', 'bpffs', 'netns'], 'SNAT ports: a flow that lost its conntrack entry retraces its port', () => {
  const PORTS = [61000, 61001];
  let two: DatapathNode;
  beforeAll(async () => {
    two = await nodeWithPorts(PORTS[0]!, PORTS[1]!);
  });
  afterAll(async () => {
    await two?.close();
  });
  beforeEach(() => two.flushState());

  const sportOf = (r: { data: Buffer }) => decodePacket(r.data).find((l) => l.name === 'tcp')!.fields.sport as number;
  const bindingAt = (port: number) => two.dp.maps.nat4.entries().find(([k]) => k.dport === port);
  /** The port a client port's flow tries first (its probe sequence's start), on an empty node. */
  function firstPort(sport: number): number {
    two.flushState();
    const port = sportOf(two.run('tc_ingress', fromClient(sport, 'S')));
    two.flushState();
    return port;
  }

  it('its next segment takes its own port, not an earlier one freed since; a new flow takes the free one', () => {
    const held = 40001;
    const first = firstPort(held);
    let mine = 40002;
    while (firstPort(mine) !== first) mine++;
    let fresh = mine + 1;
    while (firstPort(fresh) !== first) fresh++;
    // `held` takes the first port, so `mine` gets the other, and establishes.
    two.run('tc_ingress', fromClient(held, 'S'));
    expect(sportOf(two.run('tc_ingress', fromClient(mine, 'S')))).not.toBe(first);
    const own = PORTS.find((p) => p !== first)!;
    two.run('tc_ingress', buildPacket([eth(), ipv4({ src: REMOTE_POD, dst: NODE_IP }), tcp({ sport: 8080, dport: own, flags: 'SA', seq: 5000, ack: 101 })]));
    expect(sportOf(two.run('tc_ingress', fromClient(mine, 'A', 101)))).toBe(own);
    // The first port's flow is over and collected; then `mine` loses its conntrack entry (an
    // overfull map evicts it).
    two.dp.maps.nat4.delete(bindingAt(first)![0]);
    for (const [k] of two.dp.maps.ct4.entries()) two.dp.maps.ct4.delete(k);
    const next = two.run('tc_ingress', fromClient(mine, 'A', 102));
    expect(next.retval).toBe(TcVerdict.REDIRECT);
    expect(sportOf(next)).toBe(own); // the tuple the backend knows (before: the freed first port, and a reset)
    expect(bindingAt(first)).toBeUndefined();
    expect(total(two.dp, 'ferry_stats', Stat.STAT_CT_MIDSTREAM)).toBe(1n);
    // A new flow whose sequence starts there takes the freed port: the walk is for lost flows only.
    expect(sportOf(two.run('tc_ingress', fromClient(fresh, 'S')))).toBe(first);
    expect(bindingAt(own)![1]).toMatchObject({ clientPort: mine });
  });
});
