// The ARP responder of L2 announcements under PROG_TEST_RUN: requests for an announced
// address answered (fields, MAC, direction), others passed; entries answered only until
// they expire; the gratuitous ARP the agent sends, byte for byte.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { L2AddressWriter } from '../../src/datapath/l2-announcements.js';
import { ArpOp, arp, buildPacket, eth, gratuitousArp } from '../../src/packet/build.js';
import { decodePacket } from '../../src/packet/decode.js';
import { TcVerdict, expectFixture } from '../../src/sandbox/packet-fixture.js';
import { NODE_MAC, ROUTER_MAC, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { ANNOUNCED, ARP_FIXTURES, ROUTER } from '../../src/sandbox/fixtures/arp.js';
import { describeWith } from '../harness/requirements.js';

let node: DatapathNode;
let l2: L2AddressWriter;
beforeAll(async () => {
  node = await datapathNode();
  l2 = new L2AddressWriter(node.dp.maps.l2_owned);
});
afterAll(async () => {
  await node?.close();
});
beforeEach(() => {
  node.flushState();
  l2.apply([{ ifindex: node.ifindex, address: ANNOUNCED, mac: NODE_MAC }], 60_000);
});

const ask = () => buildPacket([eth({ src: ROUTER_MAC, dst: 'ff:ff:ff:ff:ff:ff' }), arp({ op: ArpOp.Request, sha: ROUTER_MAC, spa: ROUTER, tpa: ANNOUNCED })]);

describeWith(['root', 'bpffs', 'netns'], 'ARP responder (L2 announcements)', () => {
  for (const f of ARP_FIXTURES) {
    it(f.description, () => {
      expectFixture(node, f);
    });
  }

  it('answers only on the interface the address is announced on', () => {
    l2.apply([{ ifindex: node.ifindex + 100, address: ANNOUNCED, mac: NODE_MAC }], 60_000);
    expect(node.run('tc_ingress', ask()).retval).toBe(TcVerdict.UNSPEC);
  });

  it('stops answering once the entry expires (an agent that stopped refreshing it)', async () => {
    l2.apply([{ ifindex: node.ifindex, address: ANNOUNCED, mac: NODE_MAC }], 50);
    expect(node.run('tc_ingress', ask()).retval).toBe(TcVerdict.REDIRECT);
    await new Promise((r) => setTimeout(r, 80));
    expect(node.run('tc_ingress', ask()).retval).toBe(TcVerdict.UNSPEC);
  });

  it('an address no longer owned is removed from the map', () => {
    expect(l2.apply([], 60_000)).toMatchObject({ removed: 1 });
    expect([...node.dp.maps.l2_owned.keys()]).toEqual([]);
    expect(node.run('tc_ingress', ask()).retval).toBe(TcVerdict.UNSPEC);
  });
});

describe('gratuitous ARP', () => {
  it('is a broadcast request whose sender and target are the address, from the interface MAC', () => {
    const g = gratuitousArp(NODE_MAC, ANNOUNCED);
    expect(g.length).toBe(42);
    expect(decodePacket(g)).toEqual([
      { name: 'eth', fields: { dst: 'ff:ff:ff:ff:ff:ff', src: NODE_MAC, type: '0x0806' } },
      { name: 'arp', fields: { htype: 1, ptype: '0x0800', hlen: 6, plen: 4, op: 1, sha: NODE_MAC, spa: ANNOUNCED, tha: '00:00:00:00:00:00', tpa: ANNOUNCED } },
    ]);
  });
});
