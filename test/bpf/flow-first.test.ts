// A client's packet on a live flow is sent on from its conntrack entry without its
// frontend looked up (bpf/lib/nodeport.h): proven by taking the frontend's entry away
// behind the writer's back. What the skipped lookup decided still holds: a frontend with
// source ranges is looked up on every packet, and the agent flushes a removed frontend's
// flows (ct-gc.ts flushFlowsTo).
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { collectOrphans, flushFlowsTo } from '../../src/datapath/ct-gc.js';
import { CtFlags, LbScope, type Lb4Key } from '../../src/datapath/layouts.js';
import type { FrontendSpec } from '../../src/model/frontend.js';
import { buildPacket } from '../../src/packet/build.js';
import { TcVerdict } from '../../src/sandbox/packet-fixture.js';
import { CLIENT_IP, NODE_IP, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { LOCAL_POD, RANGED_LB_IP, TC_SERVICES, clientTcp, syn } from '../../src/sandbox/fixtures/tc.js';
import { describeWith } from '../harness/requirements.js';

const REMOTE_NODEPORT = 30081; // one remote backend: SNAT, REDIRECT
const ack = (dst: string, dport: number, src = CLIENT_IP) => buildPacket(clientTcp(dst, dport, { src, flags: 'A', seq: 1001 }));
const master = (address: string, port: number): Lb4Key => ({ address, port, proto: 6, scope: LbScope.LB_SCOPE_EXTERNAL, slot: 0 });
/** The Services without the remote NodePort, and a twin of it (an externalIP on the same
 * port) that keeps its backend and the port's bit in the filter. */
const withoutRemoteNodePort = (): FrontendSpec[] => {
  const remote = TC_SERVICES.find((s) => s.address === NODE_IP && s.port === REMOTE_NODEPORT)!;
  return [...TC_SERVICES.filter((s) => s !== remote), { ...remote, address: '10.0.30.40', kind: 'ExternalIP' }];
};

let node: DatapathNode;
beforeAll(async () => {
  node = await datapathNode();
});
afterAll(async () => {
  await node?.close();
});
beforeEach(() => {
  node.writer.apply(TC_SERVICES);
  node.flushState();
});

describeWith(['root', 'bpffs', 'netns'], 'a live flow before its frontend', () => {
  it('a live flow goes on without its frontend entry; a new flow needs it', () => {
    expect(node.run('tc_ingress', syn(NODE_IP, REMOTE_NODEPORT)).retval).toBe(TcVerdict.REDIRECT);
    const key = master(NODE_IP, REMOTE_NODEPORT);
    const entry = node.dp.maps.lb4_services.lookup(key)!;
    node.dp.maps.lb4_services.delete(key);
    try {
      expect(node.run('tc_ingress', ack(NODE_IP, REMOTE_NODEPORT)).retval).toBe(TcVerdict.REDIRECT);
      expect(node.run('tc_ingress', syn(NODE_IP, REMOTE_NODEPORT, { src: '10.0.10.3' })).retval).toBe(TcVerdict.UNSPEC);
    } finally {
      node.dp.maps.lb4_services.update(key, entry);
    }
  });

  it('a frontend with source ranges is looked up on every packet: a source they stop allowing loses its flow', () => {
    expect(node.run('tc_ingress', syn(RANGED_LB_IP, 80)).retval).toBe(TcVerdict.OK);
    const ct = node.dp.maps.ct4.entries()[0]![1];
    expect(ct.flags & CtFlags.CT_F_RANGED).toBe(CtFlags.CT_F_RANGED);
    expect(node.run('tc_ingress', ack(RANGED_LB_IP, 80)).retval).toBe(TcVerdict.OK);
    node.writer.apply(TC_SERVICES.map((s) => (s.address === RANGED_LB_IP ? { ...s, sourceRanges: ['192.168.7.7/32'] } : s)));
    expect(node.run('tc_ingress', ack(RANGED_LB_IP, 80)).retval).toBe(TcVerdict.SHOT);
  });

  it('a removed frontend is named by the writer and its flows flushed; its packets then pass', () => {
    expect(node.run('tc_ingress', syn(NODE_IP, REMOTE_NODEPORT)).retval).toBe(TcVerdict.REDIRECT);
    expect(node.dp.maps.nat4.entries()).toHaveLength(1);
    const stats = node.writer.apply(withoutRemoteNodePort());
    expect(stats.removedFrontends).toEqual([{ address: NODE_IP, port: REMOTE_NODEPORT, proto: 6 }]);
    expect(stats.removedBackends).toEqual([]);
    expect(flushFlowsTo(node.dp.maps, stats.removedBackends, new Set(stats.removedBackendIds), stats.removedFrontends)).toEqual({ ct: 1, nat: 1 });
    expect(node.run('tc_ingress', ack(NODE_IP, REMOTE_NODEPORT)).retval).toBe(TcVerdict.UNSPEC);
  });

  it('a frontend removed without its flush (the agent stopped in between): the GC, given the live frontends, collects its flows', () => {
    const LOCAL_NODEPORT = 30080;
    expect(node.run('tc_ingress', syn(NODE_IP, REMOTE_NODEPORT)).retval).toBe(TcVerdict.REDIRECT);
    expect(node.run('tc_ingress', syn(NODE_IP, LOCAL_NODEPORT)).retval).toBe(TcVerdict.OK);
    // A DSR binding as a backend node keeps it: it names another node's frontend.
    const dsrKey = { saddr: LOCAL_POD, daddr: '10.0.10.9', sport: 8080, dport: 40000, proto: 6 };
    const someBinding = node.dp.maps.nat4.entries()[0]![1];
    node.dp.maps.nat4.update(dsrKey, { ...someBinding, flags: CtFlags.CT_F_DSR, frontendAddr: '10.0.0.99', frontendPort: 30999 });
    node.writer.apply(withoutRemoteNodePort()); // no flush
    expect(node.run('tc_ingress', ack(NODE_IP, REMOTE_NODEPORT)).retval).toBe(TcVerdict.REDIRECT); // still on its flow
    expect(collectOrphans(node.dp.maps)).toMatchObject({ ctDeleted: 0, natDeleted: 0 }); // backends alone: nothing
    expect(collectOrphans(node.dp.maps, node.writer.externalFrontends())).toMatchObject({ ctDeleted: 1, natDeleted: 1 });
    expect(node.run('tc_ingress', ack(NODE_IP, REMOTE_NODEPORT)).retval).toBe(TcVerdict.UNSPEC);
    expect(node.run('tc_ingress', ack(NODE_IP, LOCAL_NODEPORT)).retval).toBe(TcVerdict.OK);
    expect(node.dp.maps.nat4.lookup(dsrKey)).toBeDefined();
  });
});
