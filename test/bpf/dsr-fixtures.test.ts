// DSR at both ends, with exact packets: the LB node's DNAT plus the IPv4 option (TCP: SYN
// only; UDP: every datagram), the backend node's removal of the option and rewrite of the
// replies, hybrid mode and per-Service overrides, and the MTU answer for datagrams the
// option would not fit.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Stat } from '../../src/datapath/layouts.js';
import type { FrontendSpec } from '../../src/model/frontend.js';
import { buildPacket, eth, icmp, ipv4, payload, tcp, udp } from '../../src/packet/build.js';
import { decodePacket } from '../../src/packet/decode.js';
import { diffPackets } from '../../src/packet/diff.js';
import { TcVerdict } from '../harness/fixture.js';
import { CLIENT_IP, NODE_IP, NODE_MAC, OTHER_NODE_MAC, ROUTER_MAC, datapathNode, total, type DatapathNode } from '../harness/datapath-node.js';
import { describeWith } from '../harness/requirements.js';

const REMOTE_POD = '10.244.2.7';
const LOCAL_POD = '10.244.1.5';
const fromRouter = eth({ src: ROUTER_MAC, dst: NODE_MAC });
const toOther = eth({ src: NODE_MAC, dst: OTHER_NODE_MAC });

/** The option DSR adds: type 0x9e, length 8, the frontend's port and address. */
function dsrOption(port: number, addr: string): Buffer {
  const b = Buffer.alloc(8);
  b[0] = 0x9e;
  b[1] = 8;
  b.writeUInt16BE(port, 2);
  Buffer.from(addr.split('.').map(Number)).copy(b, 4);
  return b;
}

function expectPacket(got: Buffer, want: Buffer): void {
  expect(diffPackets(want, got).lines, 'packet differs').toEqual([]);
  for (const l of decodePacket(got)) if ('checksumValid' in l.fields) expect(l.fields.checksumValid, `${l.name} checksum`).toBe(true);
}

const services = (extra: Partial<FrontendSpec> = {}): FrontendSpec[] => [
  { address: NODE_IP, port: 30081, proto: 'TCP', kind: 'NodePort', backends: [{ address: REMOTE_POD, port: 8080, local: false }], ...extra },
  { address: NODE_IP, port: 30053, proto: 'UDP', kind: 'NodePort', backends: [{ address: REMOTE_POD, port: 5353, local: false }], ...extra },
];

describeWith(['root', 'bpffs', 'netns'], 'DSR', () => {
  describe('on a node in dsr mode', () => {
    let node: DatapathNode;
    beforeAll(async () => {
      node = await datapathNode({ forwardingMode: 'dsr' });
      node.writer.apply(services());
    });
    afterAll(async () => {
      await node?.close();
    });
    beforeEach(() => node.flushState());

    it('LB node: the SYN is DNATed, keeps the client source and carries the NodePort in an IPv4 option', () => {
      const r = node.run('tc_ingress', buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 63, id: 9 }), tcp({ sport: 40000, dport: 30081, flags: 'S', seq: 7 })]));
      expect(r.retval).toBe(TcVerdict.REDIRECT);
      expectPacket(r.data, buildPacket([toOther, ipv4({ src: CLIENT_IP, dst: REMOTE_POD, ttl: 62, id: 9, options: dsrOption(30081, NODE_IP) }), tcp({ sport: 40000, dport: 8080, flags: 'S', seq: 7 })]));
      expect(total(node.dp, 'ferry_stats', Stat.STAT_FWD_DSR)).toBe(1n);
      expect(node.dp.maps.nat4.entries()).toEqual([]); // no reply will come back here
      // The rest of the connection goes without the option.
      const ack = node.run('tc_ingress', buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 63, id: 10 }), tcp({ sport: 40000, dport: 30081, flags: 'A', seq: 8 })]));
      expectPacket(ack.data, buildPacket([toOther, ipv4({ src: CLIENT_IP, dst: REMOTE_POD, ttl: 62, id: 10 }), tcp({ sport: 40000, dport: 8080, flags: 'A', seq: 8 })]));
    });

    it('LB node: UDP carries the option on every datagram', () => {
      for (const id of [1, 2]) {
        const r = node.run('tc_ingress', buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 63, id }), udp({ sport: 5000, dport: 30053 }), payload('q')]));
        expectPacket(r.data, buildPacket([toOther, ipv4({ src: CLIENT_IP, dst: REMOTE_POD, ttl: 62, id, options: dsrOption(30053, NODE_IP) }), udp({ sport: 5000, dport: 5353 }), payload('q')]));
      }
    });

    it('LB node: a datagram the option would not fit gets fragmentation-needed, MTU 1492', () => {
      const big = buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 63 }), udp({ sport: 5001, dport: 30053 }), payload(Buffer.alloc(1472, 1))]);
      const r = node.run('tc_ingress', big);
      expect(r.retval).toBe(TcVerdict.REDIRECT);
      expectPacket(r.data, buildPacket([eth({ src: NODE_MAC, dst: ROUTER_MAC }), ipv4({ src: NODE_IP, dst: CLIENT_IP, tos: 0xc0, ttl: 64, df: false }), icmp({ type: 3, code: 4, rest: 1492 }), payload(big.subarray(14, 14 + 28))]));
      expect(total(node.dp, 'ferry_stats', Stat.STAT_ICMP_FRAG_NEEDED)).toBe(1n);
      // 1464 bytes fit.
      const fits = node.run('tc_ingress', buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 63 }), udp({ sport: 5002, dport: 30053 }), payload(Buffer.alloc(1464, 1))]));
      expect(decodePacket(fits.data).find((l) => l.name === 'ipv4')!.fields).toMatchObject({ dst: REMOTE_POD, totalLength: 1500 });
    });

    it('backend node: records the frontend, removes the option, and replies leave from the frontend', () => {
      const withOpt = buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: LOCAL_POD, ttl: 62, id: 3, options: dsrOption(30081, '10.0.30.22') }), tcp({ sport: 40000, dport: 8080, flags: 'S', seq: 5 })]);
      const r = node.run('tc_ingress', withOpt);
      expect(r.retval).toBe(TcVerdict.OK);
      expectPacket(r.data, buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: LOCAL_POD, ttl: 62, id: 3 }), tcp({ sport: 40000, dport: 8080, flags: 'S', seq: 5 })]));
      expect(total(node.dp, 'ferry_stats', Stat.STAT_DSR_RECEIVED)).toBe(1n);
      const reply = node.run('tc_egress', buildPacket([eth({ src: NODE_MAC, dst: ROUTER_MAC }), ipv4({ src: LOCAL_POD, dst: CLIENT_IP, ttl: 64, id: 4 }), tcp({ sport: 8080, dport: 40000, flags: 'SA', seq: 1, ack: 6 })]));
      expectPacket(reply.data, buildPacket([eth({ src: NODE_MAC, dst: ROUTER_MAC }), ipv4({ src: '10.0.30.22', dst: CLIENT_IP, ttl: 64, id: 4 }), tcp({ sport: 30081, dport: 40000, flags: 'SA', seq: 1, ack: 6 })]));
    });

    it('a Service annotated snat keeps SNAT on a dsr node', () => {
      node.writer.apply(services({ forwarding: 'snat' }));
      const r = node.run('tc_ingress', buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 63 }), tcp({ sport: 62000, dport: 30081, flags: 'S' })]));
      expect(decodePacket(r.data).find((l) => l.name === 'ipv4')!.fields).toMatchObject({ src: NODE_IP, dst: REMOTE_POD, ihl: 20 });
      node.writer.apply(services());
    });
  });

  describe('on a node in hybrid mode', () => {
    let node: DatapathNode;
    beforeAll(async () => {
      node = await datapathNode({ forwardingMode: 'hybrid' });
      node.writer.apply(services());
    });
    afterAll(async () => {
      await node?.close();
    });

    it('uses DSR for TCP and SNAT for UDP', () => {
      const t = node.run('tc_ingress', buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 63 }), tcp({ sport: 40000, dport: 30081, flags: 'S' })]));
      expect(decodePacket(t.data).find((l) => l.name === 'ipv4')!.fields).toMatchObject({ src: CLIENT_IP, dst: REMOTE_POD, ihl: 28 });
      const u = node.run('tc_ingress', buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 63 }), udp({ sport: 62001, dport: 30053 })]));
      expect(decodePacket(u.data).find((l) => l.name === 'ipv4')!.fields).toMatchObject({ src: NODE_IP, dst: REMOTE_POD, ihl: 20 });
    });

    it('a Service annotated dsr uses DSR for UDP too', () => {
      node.writer.apply(services({ forwarding: 'dsr' }));
      const u = node.run('tc_ingress', buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 63 }), udp({ sport: 62002, dport: 30053 })]));
      expect(decodePacket(u.data).find((l) => l.name === 'ipv4')!.fields).toMatchObject({ src: CLIENT_IP, ihl: 28 });
      node.writer.apply(services());
    });
  });
});
