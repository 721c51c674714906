// An upgrade's switch (ferry_handover): while the agent copies the previous programs'
// bindings into the new maps, a reply to the SNAT address on a SNAT-range port that finds
// no binding may be one not copied yet. Handed to the host it would reset the backend's
// end of the connection, so in the switch it is dropped and counted (the backend sends it
// again once the binding is there); outside it, or with a host socket on the tuple, it goes
// to the host as ever. Likewise a client's TCP segment (not a SYN) with no flow entry: in
// the switch it is dropped rather than balanced afresh onto another SNAT port. Through tc
// alone and through XDP in front of tc.
import { closeSync } from 'node:fs';
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { monotonicNs } from '../../src/datapath/ct-gc.js';
import { DropReason } from '../../src/datapath/layouts.js';
import { buildPacket, eth, ipv4, payload, tcp, udp } from '../../src/packet/build.js';
import { TcVerdict, XdpVerdict } from '../../src/sandbox/packet-fixture.js';
import { NODE_IP, NODE_MAC, OTHER_NODE_MAC, datapathNode, total, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { REMOTE_POD, TC_SERVICES, clientTcp, syn } from '../../src/sandbox/fixtures/tc.js';
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

for (const acceleration of ['none', 'native'] as const) {
  describeWith(['root', 'bpffs', 'netns'], `replies without a binding in an upgrade's switch (acceleration ${acceleration})`, () => {
    let node: DatapathNode;
    const handover = (untilNs: bigint) => node.dp.maps.ferry_handover.update(0, { untilNs });
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
