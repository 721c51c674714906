// The node's IPv4 address remote flows leave from is a map slot the agent writes
// (snat4_address, src/datapath/snat-address.ts), not a load-time constant: a node renumbered
// while its agent runs (a new DHCP lease) forwards from its new address at once. Checked on
// the tc program (new flows, their replies, the node's own ICMP errors) and through the
// reconciler, which follows the Node's InternalIP at each sync.
import type { V1Node } from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { buildPacket, eth, ipv4, tcp } from '../../src/packet/build.js';
import { decodePacket } from '../../src/packet/decode.js';
import { TcVerdict } from '../../src/sandbox/packet-fixture.js';
import { CLIENT_IP, NODE_IP, NODE_MAC, OTHER_NODE_MAC, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { CLIENT_PORT, REMOTE_POD, TC_SERVICES, syn } from '../../src/sandbox/fixtures/tc.js';
import { nodeReconciler } from '../../src/sandbox/node-reconciler.js';
import type { Reconciler } from '../../src/agent/reconciler.js';
import { describeWith } from '../harness/requirements.js';

const RENUMBERED = '10.0.30.99';
const ipv4Of = (data: Buffer) => decodePacket(data).find((l) => l.name === 'ipv4')!.fields as { src: string; dst: string };
const tcpOf = (data: Buffer) => decodePacket(data).find((l) => l.name === 'tcp')!.fields as { sport: number; dport: number };
/** The remote backend's SYN-ACK to `to`:`port`. */
const replyTo = (to: string, port: number) =>
  buildPacket([eth({ src: OTHER_NODE_MAC, dst: NODE_MAC }), ipv4({ src: REMOTE_POD, dst: to, ttl: 63, id: 7 }), tcp({ sport: 8080, dport: port, flags: 'SA', seq: 5000, ack: 1001 })]);

describeWith(['root', 'bpffs', 'netns'], 'the IPv4 SNAT address (snat4_address)', () => {
  let node: DatapathNode;
  beforeAll(async () => {
    node = await datapathNode();
    node.writer.apply(TC_SERVICES);
  });
  afterAll(async () => {
    await node?.close();
  });
  beforeEach(() => {
    node.flushState();
    node.dp.snat4.set(NODE_IP);
  });

  it('new flows leave from the address last written, its replies are restored, and the old one is no reply any more', () => {
    expect(node.dp.maps.snat4_address.lookup(0)).toEqual({ address: NODE_IP });
    const before = node.run('tc_ingress', syn(NODE_IP, 30081));
    expect(before.retval).toBe(TcVerdict.REDIRECT);
    expect(ipv4Of(before.data)).toEqual(expect.objectContaining({ src: NODE_IP, dst: REMOTE_POD }));
    node.flushState();

    expect(node.dp.snat4.set(RENUMBERED)).toEqual({ from: NODE_IP, to: RENUMBERED });
    expect(node.dp.snat4.set(RENUMBERED)).toBeUndefined();
    expect(node.dp.maps.snat4_address.lookup(0)).toEqual({ address: RENUMBERED });
    const out = node.run('tc_ingress', syn(NODE_IP, 30081));
    expect(out.retval).toBe(TcVerdict.REDIRECT);
    expect(ipv4Of(out.data)).toEqual(expect.objectContaining({ src: RENUMBERED, dst: REMOTE_POD }));
    const port = tcpOf(out.data).sport;
    const back = node.run('tc_ingress', replyTo(RENUMBERED, port));
    expect(back.retval).toBe(TcVerdict.REDIRECT);
    expect(ipv4Of(back.data)).toEqual(expect.objectContaining({ src: NODE_IP, dst: CLIENT_IP }));
    expect(tcpOf(back.data)).toEqual(expect.objectContaining({ sport: 30081, dport: CLIENT_PORT }));
    // The node's old address on the same port: not the SNAT address any more, so no reply
    // (it is left to the kernel, which no longer holds the address either).
    expect(node.run('tc_ingress', replyTo(NODE_IP, port)).retval).toBe(TcVerdict.UNSPEC);
  });

  it("the node's own time-exceeded errors come from the address last written", () => {
    node.dp.snat4.set(RENUMBERED);
    const out = node.run('tc_ingress', syn(NODE_IP, 30081, { ttl: 1 }));
    expect(decodePacket(out.data).map((l) => l.name)).toContain('icmp');
    expect(ipv4Of(out.data)).toEqual(expect.objectContaining({ src: RENUMBERED, dst: CLIENT_IP }));
  });

  it('refuses an address no flow can leave from, and none; following a Node passes over such addresses and keeps the last when it lists none', () => {
    for (const bad of ['0.0.0.0', '127.0.0.1', '224.0.0.1', '255.255.255.255', '10.0.0', 'fd00::1', '']) expect(() => node.dp.snat4.set(bad || undefined), bad).toThrow(/IPv4 SNAT address/);
    expect(node.dp.snat4.get()).toBe(NODE_IP);
    expect(node.dp.snat4.follow(['127.0.0.1', RENUMBERED])).toEqual({ from: NODE_IP, to: RENUMBERED });
    expect(node.dp.snat4.follow([])).toBeUndefined();
    expect(node.dp.snat4.follow(['127.0.0.1'])).toBeUndefined();
    expect(node.dp.snat4.get()).toBe(RENUMBERED);
    expect(node.dp.maps.snat4_address.lookup(0)).toEqual({ address: RENUMBERED });
  });

  describe('through the reconciler', () => {
    let nodeObj: V1Node;
    let r: Reconciler | undefined;
    const withAddress = (address: string): V1Node => ({ metadata: { name: 'node-1' }, status: { addresses: [{ type: 'InternalIP', address }] } });
    afterAll(async () => {
      await r?.stop();
    });

    it("follows the Node's InternalIP at each sync when snatIPv4 is not set, and not when it is", async () => {
      nodeObj = withAddress(NODE_IP);
      const source = { services: () => [], service: () => undefined, slices: () => [], node: () => nodeObj, nodes: () => [nodeObj] };
      r = nodeReconciler(node, source, { snat4: node.dp.snat4 });
      await r.syncNow();
      expect(node.dp.snat4.get()).toBe(NODE_IP);
      nodeObj = withAddress(RENUMBERED);
      await r.syncNow();
      expect(node.dp.snat4.get()).toBe(RENUMBERED);
      node.writer.apply(TC_SERVICES); // the reconciler's Services (none) replaced the fixtures'
      expect(ipv4Of(node.run('tc_ingress', syn(NODE_IP, 30081)).data).src).toBe(RENUMBERED);
      await r.stop();

      // Configured (the agent passes no snat4): the Node's address is not followed.
      node.dp.snat4.set(NODE_IP);
      r = nodeReconciler(node, source);
      await r.syncNow();
      expect(node.dp.snat4.get()).toBe(NODE_IP);
    });
  });
});
