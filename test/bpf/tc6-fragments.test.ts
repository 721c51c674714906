// IPv6 fragments on tc (bpf/lib/frag6.h), by PROG_TEST_RUN: a datagram's first fragment
// is balanced and translated as a whole packet is, and its later fragments (no ports) get
// the same addresses and go the same way, in both directions, to a backend on this node
// and to one on another node (SNAT). Each datagram's fragments, put back together from
// what the program sent, must carry a UDP checksum that is right for the new addresses.
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { buildPacket, eth, fragment6, ipv6, payload, udp } from '../../src/packet/build.js';
import { ipv6Text } from '../../src/packet/addr.js';
import { checksum, pseudo6 } from '../../src/packet/checksum.js';
import { TcVerdict } from '../../src/sandbox/packet-fixture.js';
import { NODE_MAC, OTHER_NODE_MAC, ROUTER_MAC, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { TC_SERVICES } from '../../src/sandbox/fixtures/tc.js';
import { CLIENT6, LB6, LOCAL_POD6, NODE6, REMOTE_POD6, TC6_SERVICES } from '../../src/sandbox/fixtures/tc6.js';
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
const body = Buffer.from(Array.from({ length: 3000 }, (_, i) => (i * 7) & 0xff));
/** A 3000-byte UDP datagram, in fragments of at most 1280 bytes. */
const datagram = (o: { src: string; dst: string; sport: number; dport: number; mac?: ReturnType<typeof eth>; id: number }) =>
  fragment6(buildPacket([o.mac ?? fromRouter, ipv6({ src: o.src, dst: o.dst, hopLimit: 63 }), udp({ sport: o.sport, dport: o.dport }), payload(body)]), 1280, o.id);

interface Datagram { src: string; dst: string; hopLimit: number; id: number; sport: number; dport: number; data: Buffer; checksumOk: boolean }

/** The fragments a program sent, put back together: their addresses (all alike), and the UDP datagram. */
function reassemble(frames: Buffer[]): Datagram {
  const heads = frames.map((f) => ({ src: ipv6Text(f.subarray(22, 38)), dst: ipv6Text(f.subarray(38, 54)), hopLimit: f[21]!, next: f[20]!, id: f.readUInt32BE(58) }));
  for (const h of heads) expect(h).toEqual({ ...heads[0], next: 44 });
  const parts = frames.map((f) => ({ off: f.readUInt16BE(56) & 0xfff8, data: f.subarray(62) })).sort((a, b) => a.off - b.off);
  const upper = Buffer.concat(parts.map((p) => p.data));
  const ps = pseudo6(frames[0]!.subarray(22, 38), frames[0]!.subarray(38, 54), 17, upper.length);
  return { src: heads[0]!.src, dst: heads[0]!.dst, hopLimit: heads[0]!.hopLimit, id: heads[0]!.id, sport: upper.readUInt16BE(0), dport: upper.readUInt16BE(2), data: upper.subarray(8), checksumOk: checksum(upper, ps) === 0 };
}

/** Every frame through `hook`: each must get `verdict`; what it sent, put back together. */
function through(hook: 'tc_ingress' | 'tc_egress', frames: Buffer[], verdict: number): Datagram {
  const out = frames.map((f) => node.run(hook, f));
  expect(out.map((o) => o.retval)).toEqual(frames.map(() => verdict));
  return reassemble(out.map((o) => o.data));
}

describeWith(['root', 'bpffs', 'netns'], 'tc IPv6 fragments', () => {
  it('to a backend on another node: every fragment SNATed and routed as the first, and the reply\'s too', () => {
    const frames = datagram({ src: CLIENT6, dst: LB6, sport: 7000, dport: 55, id: 0x1234 });
    expect(frames).toHaveLength(3);
    const followed = node.counter('STAT_FRAGMENT');
    const sent = through('tc_ingress', frames, TcVerdict.REDIRECT);
    expect(node.counter('STAT_FRAGMENT')).toBe(followed + 2n);
    const [binding] = node.dp.maps.nat6.entries().map(([k]) => k.dport);
    expect(sent).toMatchObject({ src: NODE6, dst: REMOTE_POD6, hopLimit: 62, id: 0x1234, sport: binding, dport: 5353, checksumOk: true });
    expect(sent.data.equals(body)).toBe(true);

    const back = through('tc_ingress', datagram({ src: REMOTE_POD6, dst: NODE6, sport: 5353, dport: binding!, mac: eth({ src: OTHER_NODE_MAC, dst: NODE_MAC }), id: 0x99 }), TcVerdict.REDIRECT);
    expect(back).toMatchObject({ src: LB6, dst: CLIENT6, id: 0x99, sport: 55, dport: 7000, checksumOk: true });
    expect(back.data.equals(body)).toBe(true);
  });

  it('to a backend on this node: every fragment DNATed as the first, and the pod\'s fragmented reply leaves as the frontend', () => {
    const sent = through('tc_ingress', datagram({ src: CLIENT6, dst: LB6, sport: 7000, dport: 53, id: 7 }), TcVerdict.OK);
    expect(sent).toMatchObject({ src: CLIENT6, dst: LOCAL_POD6, hopLimit: 63, sport: 7000, dport: 5353, checksumOk: true });
    const back = through('tc_egress', datagram({ src: LOCAL_POD6, dst: CLIENT6, sport: 5353, dport: 7000, mac: eth({ src: NODE_MAC, dst: ROUTER_MAC }), id: 8 }), TcVerdict.OK);
    expect(back).toMatchObject({ src: LB6, dst: CLIENT6, sport: 53, dport: 7000, checksumOk: true });
    expect(back.data.equals(body)).toBe(true);
  });

  it('a later fragment with no first to follow: dropped at a Service-only address, passed on elsewhere', () => {
    const [, later] = datagram({ src: CLIENT6, dst: LB6, sport: 7000, dport: 55, id: 5 });
    const dropped = node.counter('DROP_FRAGMENT');
    expect(node.run('tc_ingress', later!).retval).toBe(TcVerdict.SHOT);
    expect(node.counter('DROP_FRAGMENT')).toBe(dropped + 1n);
    const [, toNode] = datagram({ src: CLIENT6, dst: NODE6, sport: 7000, dport: 9999, id: 6 });
    expect(node.run('tc_ingress', toNode!).retval).toBe(TcVerdict.UNSPEC);
    // Another datagram's first fragment leaves it unmatched: the identification tells them apart.
    through('tc_ingress', datagram({ src: CLIENT6, dst: LB6, sport: 7000, dport: 55, id: 50 }).slice(0, 1), TcVerdict.REDIRECT);
    expect(node.run('tc_ingress', later!).retval).toBe(TcVerdict.SHOT);
  });
});
