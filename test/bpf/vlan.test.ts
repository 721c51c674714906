// VLAN trunks: a frame tagged for a VLAN reaches the tc programs of the device it came in
// by with its tag already in the skb's metadata (the NIC or the stack took it off), and
// belongs to that VLAN's device, where the kernel takes it next. ferry leaves such frames
// alone on both hooks (tc.bpf.c, vlan_elsewhere): translated on the trunk, they would leave
// still tagged for their VLAN. VLAN 0 carries only a priority: those frames are the
// device's own. This kernel has no VLAN devices, so the frames are tagged by a tc program
// of the test's (bpf/tests/vlan_tag.bpf.c) as a NIC hands them over, and sent live.
import { afterAll, afterEach, beforeAll, beforeEach, expect, it } from 'vitest';
import { bpfObject } from '../harness/paths.js';
import { L2AddressWriter } from '../../src/datapath/l2-announcements.js';
import { BpfObject } from '../../src/ebpf/object.js';
import { attachTc, ifindexOf } from '../../src/ebpf/link-tc.js';
import type { Link } from '../../src/ebpf/link.js';
import { ArpOp, arp, buildPacket, eth, ipv4, tcp } from '../../src/packet/build.js';
import { CLIENT_IP, NODE_IP, NODE_MAC, ROUTER_MAC, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { ANNOUNCED, ROUTER } from '../../src/sandbox/fixtures/arp.js';
import { CLIENT_PORT, LOCAL_POD, TC_SERVICES, syn } from '../../src/sandbox/fixtures/tc.js';
import type { Host } from '../../src/sandbox/netns/testbed.js';
import { inNetns } from '../../src/sys/netns.js';
import { sendFramesOnce } from '../../src/sys/packet-socket.js';
import { describeWith } from '../harness/requirements.js';

const settle = (ms: number) => new Promise((r) => setTimeout(r, ms));

describeWith(['root', 'bpffs', 'netns'], 'VLAN-tagged frames on a device ferry is attached to', () => {
  let node: DatapathNode;
  let peer: Host;
  const taggers: BpfObject[] = [];
  /** The taggers' links (taken away after each test, or within one by untag), and ferry's own. */
  const links: Link[] = [];
  const ferryLinks: Link[] = [];
  /** A tagger for `vlanId` on `host`'s eth0 egress, ahead of any other filter there. */
  const tagOut = (host: Host, vlanId: number): void => {
    const obj = BpfObject.open(bpfObject('tests/vlan_tag'));
    obj.setConstant('vlan_id', vlanId);
    obj.load();
    taggers.push(obj);
    links.push(inNetns(host.netns, () => attachTc(obj.program('vlan_tag'), { ifname: 'eth0', direction: 'egress', priority: 1, handle: 0x77 })));
  };
  const untag = (): void => {
    for (const l of links.splice(0)) l.close();
  };
  const closeTaggers = (): void => {
    untag();
    for (const t of taggers.splice(0)) t.close();
  };
  /** Frames out of `host`'s eth0, as its stack sends them (through its tc egress). */
  const send = (host: Host, frames: Buffer[]): number =>
    inNetns(host.netns, () => sendFramesOnce(ifindexOf('eth0'), frames));
  /** Wait until `counter` reaches `n` (frames pass a veth's backlog, not this thread). */
  const waitFor = async (counter: string, n: number): Promise<void> => {
    for (let i = 0; i < 100 && node.counter(counter) < BigInt(n); i++) await settle(10);
    await settle(50); // and a little longer: a frame that should not count has had its chance
  };
  const flowPorts = (): number[] => [...node.dp.maps.ct4.keys()].map((k) => k.sport).sort((a, b) => a - b);

  beforeAll(async () => {
    node = await datapathNode();
    node.writer.apply(TC_SERVICES);
    peer = node.tb.host('peer');
    // ferry's egress program behind the slot the node's tagger takes (priority 1).
    inNetns(node.host.netns, () => {
      ferryLinks.push(attachTc(node.program('tc_ingress'), { ifname: 'eth0', direction: 'ingress' }));
      ferryLinks.push(attachTc(node.program('tc_egress'), { ifname: 'eth0', direction: 'egress', priority: 2 }));
    });
  }, 60_000);
  afterAll(async () => {
    try {
      for (const l of ferryLinks.reverse()) l.close(); // the first one made the clsact hook: it goes last
    } finally {
      await node?.close();
    }
  });
  beforeEach(() => node.flushState());
  afterEach(closeTaggers);

  it('a NodePort SYN tagged for VLAN 100 is left to the kernel; untagged and priority-tagged ones are forwarded', async () => {
    tagOut(peer, 100);
    send(peer, [syn(NODE_IP, 30081, { sport: 40001 })]);
    untag();
    send(peer, [syn(NODE_IP, 30081, { sport: 40002 })]);
    await waitFor('STAT_FWD_REMOTE', 1);
    expect(node.counter('STAT_FWD_REMOTE')).toBe(1n);
    expect(flowPorts()).toEqual([40002]);

    tagOut(peer, 0); // VLAN 0: a priority tag, the device's own traffic
    send(peer, [syn(NODE_IP, 30081, { sport: 40003 })]);
    await waitFor('STAT_FWD_REMOTE', 2);
    expect(node.counter('STAT_FWD_REMOTE')).toBe(2n);
    expect(flowPorts()).toEqual([40002, 40003]);
  });

  it('a local backend reply leaving tagged for VLAN 100 is not translated at egress; untagged it is', async () => {
    // The flow's binding, as tc_ingress writes it for a client of the local backend.
    expect(node.run('tc_ingress', syn(NODE_IP, 30080)).retval).toBeGreaterThanOrEqual(0);
    const reply = buildPacket([eth({ src: NODE_MAC, dst: ROUTER_MAC }), ipv4({ src: LOCAL_POD, dst: CLIENT_IP, ttl: 64 }), tcp({ sport: 8080, dport: CLIENT_PORT, flags: 'SA', seq: 1, ack: 1001 })]);
    tagOut(node.host, 100);
    send(node.host, [reply]);
    untag();
    send(node.host, [reply]);
    await waitFor('STAT_REPLY_LOCAL', 1);
    expect(node.counter('STAT_REPLY_LOCAL')).toBe(1n);
  });

  it('an ARP request tagged for VLAN 100 is not answered for an address announced on the device', async () => {
    const l2 = new L2AddressWriter(node.dp.maps.l2_owned);
    l2.apply([{ ifindex: node.ifindex, address: ANNOUNCED, mac: NODE_MAC }], 60_000);
    const ask = buildPacket([eth({ src: ROUTER_MAC, dst: 'ff:ff:ff:ff:ff:ff' }), arp({ op: ArpOp.Request, sha: ROUTER_MAC, spa: ROUTER, tpa: ANNOUNCED })]);
    try {
      tagOut(peer, 100);
      send(peer, [ask]);
      untag();
      send(peer, [ask]);
      await waitFor('STAT_ARP_REPLY', 1);
      expect(node.counter('STAT_ARP_REPLY')).toBe(1n);
    } finally {
      l2.apply([], 60_000);
    }
  });
});
