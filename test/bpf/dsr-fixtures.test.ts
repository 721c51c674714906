// DSR at both ends, with exact packets (the table is src/sandbox/fixtures/dsr.ts): the LB
// node's DNAT plus the IPv4 option, the backend node's removal of the option and rewrite of
// the replies, the MTU answer; then hybrid mode and per-Service overrides.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { buildPacket, eth, ipv4, tcp, udp } from '../../src/packet/build.js';
import { decodePacket } from '../../src/packet/decode.js';
import { expectFixture } from '../../src/sandbox/packet-fixture.js';
import { flushFlowsTo } from '../../src/datapath/ct-gc.js';
import { CLIENT_IP, NODE_IP, NODE_MAC, ROUTER_MAC, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { DSR_FIXTURES, DSR_REMOTE_POD, dsrServices } from '../../src/sandbox/fixtures/dsr.js';
import { describeWith } from '../harness/requirements.js';

const fromRouter = eth({ src: ROUTER_MAC, dst: NODE_MAC });

describeWith(['root', 'bpffs', 'netns'], 'DSR', () => {
  describe('on a node in dsr mode', () => {
    let node: DatapathNode;
    beforeAll(async () => {
      node = await datapathNode({ forwardingMode: 'dsr' });
      node.writer.apply(dsrServices());
    });
    afterAll(async () => {
      await node?.close();
    });
    beforeEach(() => node.flushState());

    for (const f of DSR_FIXTURES) {
      it(f.description, () => {
        expectFixture(node, f);
      });
    }

    it('LB node: no reply binding is kept (no reply comes back here)', () => {
      node.run('tc_ingress', DSR_FIXTURES[0]!.input);
      expect(node.dp.maps.nat4.entries()).toEqual([]);
    });

    it('LB node: a DSR flow to a removed backend is flushed (found by its backend id: it has no binding)', () => {
      node.run('tc_ingress', DSR_FIXTURES[0]!.input);
      expect(node.dp.maps.ct4.entries()).toHaveLength(1);
      const stats = node.writer.apply(dsrServices().filter((f) => f.port !== 30081));
      expect(stats.removedBackendIds).toHaveLength(1);
      expect(flushFlowsTo(node.dp.maps, stats.removedBackends, new Set(stats.removedBackendIds))).toEqual({ ct: 1, nat: 0 });
      expect(node.dp.maps.ct4.entries()).toEqual([]);
      node.writer.apply(dsrServices());
    });

    it('a Service annotated snat keeps SNAT on a dsr node', () => {
      node.writer.apply(dsrServices({ forwarding: 'snat' }));
      const r = node.run('tc_ingress', buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 63 }), tcp({ sport: 62000, dport: 30081, flags: 'S' })]));
      expect(decodePacket(r.data).find((l) => l.name === 'ipv4')!.fields).toMatchObject({ src: NODE_IP, dst: DSR_REMOTE_POD, ihl: 20 });
      node.writer.apply(dsrServices());
    });
  });

  describe('on a node in hybrid mode', () => {
    let node: DatapathNode;
    beforeAll(async () => {
      node = await datapathNode({ forwardingMode: 'hybrid' });
      node.writer.apply(dsrServices());
    });
    afterAll(async () => {
      await node?.close();
    });

    it('uses DSR for TCP and SNAT for UDP', () => {
      const t = node.run('tc_ingress', buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 63 }), tcp({ sport: 40000, dport: 30081, flags: 'S' })]));
      expect(decodePacket(t.data).find((l) => l.name === 'ipv4')!.fields).toMatchObject({ src: CLIENT_IP, dst: DSR_REMOTE_POD, ihl: 28 });
      const u = node.run('tc_ingress', buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 63 }), udp({ sport: 62001, dport: 30053 })]));
      expect(decodePacket(u.data).find((l) => l.name === 'ipv4')!.fields).toMatchObject({ src: NODE_IP, dst: DSR_REMOTE_POD, ihl: 20 });
    });

    it('a Service annotated dsr uses DSR for UDP too', () => {
      node.writer.apply(dsrServices({ forwarding: 'dsr' }));
      const u = node.run('tc_ingress', buildPacket([fromRouter, ipv4({ src: CLIENT_IP, dst: NODE_IP, ttl: 63 }), udp({ sport: 62002, dport: 30053 })]));
      expect(decodePacket(u.data).find((l) => l.name === 'ipv4')!.fields).toMatchObject({ src: CLIENT_IP, ihl: 28 });
      node.writer.apply(dsrServices());
    });
  });
});
