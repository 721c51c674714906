// What tc_ingress forwards back out of the device it came in on passes that device's tc
// egress, where ferry has nothing to do with it: tc_ingress marks it (FERRY_MARK_FORWARDED,
// bpf/lib/ctx.h) unless it bears someone else's mark, and tc_egress takes the mark off and
// lets the packet go unparsed. A packet leaving by another device is not marked (that
// device may have no ferry egress program to take the mark off).
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { kernelStruct, skbContext } from '../../src/ebpf/skb-context.js';
import { testRun } from '../../src/ebpf/test-run.js';
import { ifindexOf } from '../../src/ebpf/link-tc.js';
import { buildPacket, ipv4, tcp } from '../../src/packet/build.js';
import { TcVerdict, type TcProgram } from '../../src/sandbox/packet-fixture.js';
import { CLIENT_IP, NODE_IP, NODE_MAC, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { CLIENT_PORT, LOCAL_POD, TC_SERVICES, fromRouter, syn } from '../../src/sandbox/fixtures/tc.js';
import { inNetns } from '../../src/sys/netns.js';
import { describeWith } from '../harness/requirements.js';

const FERRY_MARK_FORWARDED = 0x0fe70000;

describeWith(['root', 'bpffs', 'netns'], 'the mark on what tc_ingress forwards', () => {
  let node: DatapathNode;
  /** Run with a context of our own (device, mark); the packet, verdict and mark out. */
  const run = (prog: TcProgram, data: Buffer, ctx: { ifindex: number; mark: number }) => {
    const r = inNetns(node.host.netns, () => testRun(node.program(prog), { data, ctx: skbContext(ctx) }));
    return { retval: r.retval, data: r.data, mark: r.ctx!.readUInt32LE(kernelStruct('__sk_buff').offset('mark')) };
  };
  /** A local backend's answer to the client, as the stack sends it out (tc_egress translates it). */
  const podReply = buildPacket([fromRouter, ipv4({ src: LOCAL_POD, dst: CLIENT_IP, ttl: 64 }), tcp({ sport: 8080, dport: CLIENT_PORT, flags: 'SA', seq: 1, ack: 1001 })]);

  beforeAll(async () => {
    node = await datapathNode();
    node.writer.apply(TC_SERVICES);
  }, 60_000);
  afterAll(async () => {
    await node?.close();
  });
  beforeEach(() => node.flushState());

  it('a flow forwarded back out of its device is marked; one with a mark of its own keeps it', () => {
    const out = run('tc_ingress', syn(NODE_IP, 30081), { ifindex: node.ifindex, mark: 0 });
    expect(out.retval).toBe(TcVerdict.REDIRECT);
    expect(out.mark).toBe(FERRY_MARK_FORWARDED);
    node.flushState();
    const theirs = run('tc_ingress', syn(NODE_IP, 30081), { ifindex: node.ifindex, mark: 0x42 });
    expect(theirs.retval).toBe(TcVerdict.REDIRECT);
    expect(theirs.mark).toBe(0x42);
  });

  it('a packet leaving by another device than it came in on is not marked', async () => {
    // A second device of the node's (a veth pair within its namespace, with eth0's MAC so
    // that the frame is for this host): arrived there, the flow's route still leaves by eth0.
    await node.host.ip('link', 'add', 'in1', 'address', NODE_MAC, 'type', 'veth', 'peer', 'name', 'in1p');
    await node.host.ip('link', 'set', 'in1', 'up');
    const other = inNetns(node.host.netns, () => ifindexOf('in1'));
    const out = run('tc_ingress', syn(NODE_IP, 30081), { ifindex: other, mark: 0 });
    expect(out.retval).toBe(TcVerdict.REDIRECT);
    expect(out.mark).toBe(0);
  });

  it('tc_egress takes the mark off and leaves the packet alone; unmarked, it translates', () => {
    expect(run('tc_ingress', syn(NODE_IP, 30080), { ifindex: node.ifindex, mark: 0 }).retval).toBe(TcVerdict.OK); // local backend: DNAT, to the stack
    const marked = run('tc_egress', podReply, { ifindex: node.ifindex, mark: FERRY_MARK_FORWARDED });
    expect(marked).toMatchObject({ retval: TcVerdict.UNSPEC, mark: 0 });
    expect(marked.data.equals(podReply)).toBe(true);
    const plain = run('tc_egress', podReply, { ifindex: node.ifindex, mark: 0 });
    expect(plain.retval).toBe(TcVerdict.OK);
    expect(plain.data.equals(podReply)).toBe(false); // the frontend as its source
  });
});
