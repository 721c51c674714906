// An upgrade's switch (ferry_handover): while the agent copies the previous programs'
// bindings into the new maps, a reply to the SNAT address on a SNAT-range port that finds
// no binding may be one not copied yet. Handed to the host it would reset the backend's
// end of the connection, so in the switch it is dropped and counted (the backend sends it
// again once the binding is there); outside it, or with a host socket on the tuple, it goes
// to the host as ever. Likewise a client's TCP segment (not a SYN) with no flow entry: in
// the switch it is dropped rather than balanced afresh onto another SNAT port, and a local
// backend's TCP segment leaving with no binding (its reply, untranslated, would be reset by
// the client) too. Through tc alone and through XDP in front of tc.
import { closeSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { Datapath } from '../../src/datapath/loader.js';
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { monotonicNs } from '../../src/datapath/ct-gc.js';
import { DropReason } from '../../src/datapath/layouts.js';
import { handoverUntil } from '../../src/datapath/handover-chain.js';
import { buildPacket, eth, ipv4, payload, tcp, udp } from '../../src/packet/build.js';
import { TcVerdict, XdpVerdict } from '../../src/sandbox/packet-fixture.js';
import { CLIENT_IP, NODE_IP, NODE_MAC, OTHER_NODE_MAC, ROUTER_MAC, datapathNode, total, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { LOCAL_POD, REMOTE_POD, TC_SERVICES, clientTcp, syn } from '../../src/sandbox/fixtures/tc.js';
import { listeningSocketInNetns } from '../../src/sys/socket.js';
import { describeWith } from '../harness/requirements.js';

const REMOTE_NODEPORT = 30081;
const UNBOUND_PORT = 21000; // in the SNAT range (1024-29999), no binding
const fromBackend = (dport: number, proto: 'tcp' | 'udp' = 'tcp') =>
  buildPacket([
    eth({ src: OTHER_NODE_MAC, dst: NODE_MAC }),
    ipv4({ src: REMOTE_POD, dst: NODE_IP, ttl: 63 }),
    ...(proto === 'tcp' ? [tcp({ sport: 8080, dport, flags: 'A', seq: 5001, ack: 1001 })] : [udp({ sport: 8080, dport }), payload('answer')]),
  ]);

/** The local backend's segment to the client, as it leaves the node (TCP: a reply's ACK). */
const fromPod = (sport: number, proto: 'tcp' | 'udp' = 'tcp') =>
  buildPacket([
    eth({ src: NODE_MAC, dst: ROUTER_MAC }),
    ipv4({ src: LOCAL_POD, dst: CLIENT_IP, ttl: 63 }),
    ...(proto === 'tcp' ? [tcp({ sport, dport: 40000, flags: 'A', seq: 1, ack: 1001 })] : [udp({ sport, dport: 40000 }), payload('answer')]),
  ]);

for (const acceleration of ['none', 'native'] as const) {
  describeWith(['root', 'bpffs', 'netns'], `replies without a binding in an upgrade's switch (acceleration ${acceleration})`, () => {
    let node: DatapathNode;
    const handover = (deadlineNs: bigint, chained = false) => node.dp.maps.ferry_handover.update(0, { untilNs: handoverUntil(deadlineNs, chained) });
    const unboundDrops = () => total(node.dp, 'ferry_drops', DropReason.DROP_HANDOVER_UNBOUND);
    /** XDP drops it itself; with XDP passing, tc decides. */
    const expectDroppedAt = (r: { retval: number }) => {
      expect(r.retval).toBe(TcVerdict.SHOT);
      if (acceleration !== 'none') expect(node.lastXdpVerdict()).toBe(XdpVerdict.DROP);
    };

    beforeAll(async () => {
      node = await datapathNode({ acceleration });
      node.writer.apply(TC_SERVICES);
    }, 60_000);
    afterAll(async () => {
      await node?.close();
    });
    beforeEach(() => {
      node.flushState();
      handover(0n);
    });

    it('outside a switch, an unbound reply goes to the host', () => {
      expect(node.run('tc_ingress', fromBackend(UNBOUND_PORT)).retval).toBe(TcVerdict.UNSPEC);
      expect(unboundDrops()).toBe(0n);
    });

    it('in a switch, an unbound TCP or UDP reply is dropped and counted', () => {
      handover(monotonicNs() + 5_000_000_000n);
      expectDroppedAt(node.run('tc_ingress', fromBackend(UNBOUND_PORT)));
      expectDroppedAt(node.run('tc_ingress', fromBackend(UNBOUND_PORT, 'udp')));
      expect(unboundDrops()).toBe(2n);
    });

    it('a switch that lapsed (its agent died in it) drops nothing', () => {
      handover(monotonicNs() - 1n);
      expect(node.run('tc_ingress', fromBackend(UNBOUND_PORT)).retval).toBe(TcVerdict.UNSPEC);
      expect(unboundDrops()).toBe(0n);
    });

    it('in a switch, a tuple a host socket holds stays the host\'s', () => {
      handover(monotonicNs() + 5_000_000_000n);
      const fd = listeningSocketInNetns(node.host.netns, NODE_IP, UNBOUND_PORT);
      try {
        expect(node.run('tc_ingress', fromBackend(UNBOUND_PORT)).retval).toBe(TcVerdict.UNSPEC);
      } finally {
        closeSync(fd);
      }
      expect(unboundDrops()).toBe(0n);
    });

    it('in a switch, a client\'s TCP segment with no flow entry is dropped unless it is a SYN; outside one it is balanced afresh', () => {
      const ack = buildPacket(clientTcp(NODE_IP, REMOTE_NODEPORT, { flags: 'A', seq: 1001 }));
      handover(monotonicNs() + 5_000_000_000n);
      expectDroppedAt(node.run('tc_ingress', ack));
      expect(unboundDrops()).toBe(1n);
      expect(node.dp.maps.ct4.entries()).toEqual([]);
      expect(node.run('tc_ingress', syn(NODE_IP, REMOTE_NODEPORT)).retval).toBe(TcVerdict.REDIRECT);
      node.flushState();
      handover(0n);
      expect(node.run('tc_ingress', ack).retval).toBe(TcVerdict.REDIRECT);
      expect(unboundDrops()).toBe(0n);
    });

    it('in a switch, a local backend\'s packet leaving with no binding is dropped; other endpoints\' go on; outside one it goes on', () => {
      // The pod's answer on a flow the previous programs opened: the client would reset it untranslated.
      handover(monotonicNs() + 5_000_000_000n);
      expect(node.run('tc_egress', fromPod(8080)).retval).toBe(TcVerdict.SHOT);
      expect(unboundDrops()).toBe(1n);
      expect(node.run('tc_egress', fromPod(45000)).retval).toBe(TcVerdict.UNSPEC); // the pod's own connection
      // UDP is not judged: an east-west answer (the socket hooks balanced its client) needs no binding.
      expect(node.dp.maps.lb4_backend_ids.lookup({ address: LOCAL_POD, port: 5353, proto: 17 })).toBeDefined();
      expect(node.run('tc_egress', fromPod(5353, 'udp')).retval).toBe(TcVerdict.UNSPEC);
      handover(0n);
      expect(node.run('tc_egress', fromPod(8080)).retval).toBe(TcVerdict.UNSPEC);
      expect(unboundDrops()).toBe(1n);
      // And through the index: the backend's id found by its endpoint.
      const index = node.dp.maps.lb4_backend_ids;
      const key = { address: LOCAL_POD, port: 8080, proto: 6 };
      const id = index.lookup(key)!;
      index.delete(key);
      handover(monotonicNs() + 5_000_000_000n);
      expect(node.run('tc_egress', fromPod(8080)).retval).toBe(TcVerdict.UNSPEC);
      index.update(key, id);
    });

    it('chained (the previous programs wait behind): what the switch cannot place is passed on to them, none of it dropped or balanced', () => {
      handover(monotonicNs() + 5_000_000_000n, true);
      const passedOn = (r: { retval: number }) => {
        expect(r.retval).toBe(TcVerdict.UNSPEC);
        if (acceleration !== 'none') expect(node.lastXdpVerdict()).toBe(XdpVerdict.PASS);
      };
      passedOn(node.run('tc_ingress', fromBackend(UNBOUND_PORT)));
      passedOn(node.run('tc_ingress', fromBackend(UNBOUND_PORT, 'udp')));
      passedOn(node.run('tc_ingress', buildPacket(clientTcp(NODE_IP, REMOTE_NODEPORT, { flags: 'A', seq: 1001 }))));
      expect(node.dp.maps.ct4.entries()).toEqual([]);
      // A local backend's unbound segments, UDP too: the previous egress program translates them.
      expect(node.run('tc_egress', fromPod(8080)).retval).toBe(TcVerdict.UNSPEC);
      expect(node.run('tc_egress', fromPod(5353, 'udp')).retval).toBe(TcVerdict.UNSPEC);
      expect(unboundDrops()).toBe(0n);
      // A new flow's SYN is still this build's.
      expect(node.run('tc_ingress', syn(NODE_IP, REMOTE_NODEPORT)).retval).toBe(TcVerdict.REDIRECT);
    });

    it('a load that finds no index (an upgrade from a build without it) fills it from lb4_backends', () => {
      const want = node.dp.maps.lb4_backend_ids.entries().sort(([a], [b]) => `${a.address}:${a.port}`.localeCompare(`${b.address}:${b.port}`));
      expect(want.length).toBeGreaterThan(1);
      unlinkSync(join(node.pinDir, 'lb4_backend_ids'));
      const again = Datapath.load({ ...node.dp.config });
      try {
        expect(again.tc.pinReport.created).toContain('lb4_backend_ids');
        expect(again.maps.lb4_backend_ids.entries().sort(([a], [b]) => `${a.address}:${a.port}`.localeCompare(`${b.address}:${b.port}`))).toEqual(want);
      } finally {
        again.release();
      }
    });

    it('in a switch, a bound reply is translated as ever, and a packet outside the SNAT range is not judged', () => {
      handover(monotonicNs() + 5_000_000_000n);
      const out = node.run('tc_ingress', syn(NODE_IP, REMOTE_NODEPORT));
      expect(out.retval).toBe(TcVerdict.REDIRECT);
      const natPort = out.data.readUInt16BE(34);
      expect(node.run('tc_ingress', fromBackend(natPort)).retval).toBe(TcVerdict.REDIRECT);
      expect(node.run('tc_ingress', fromBackend(40000)).retval).toBe(TcVerdict.UNSPEC);
      expect(unboundDrops()).toBe(0n);
    });
  });
}
