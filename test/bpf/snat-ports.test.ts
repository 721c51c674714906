// SNAT source ports are a small range per backend: a reset flow gives its port to the
// next flow at once; a live or merely closing one keeps it.
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { CtFlags } from '../../src/datapath/layouts.js';
import { buildPacket, eth, ipv4, tcp } from '../../src/packet/build.js';
import { decodePacket } from '../../src/packet/decode.js';
import { TcVerdict } from '../../src/sandbox/packet-fixture.js';
import { CLIENT_IP, NODE_IP, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { describeWith } from '../harness/requirements.js';

const REMOTE_POD = '10.244.2.5';
let node: DatapathNode;
beforeAll(async () => {
  // One SNAT port: the second live flow to the backend cannot get one.
  node = await datapathNode({ snatPortMin: 61000, snatPortMax: 61000 });
  node.writer.apply([{ address: NODE_IP, port: 30081, proto: 'TCP', kind: 'NodePort', backends: [{ address: REMOTE_POD, port: 8080, local: false }] }]);
});
afterAll(async () => {
  await node?.close();
});
beforeEach(() => node.flushState());

const fromClient = (sport: number, flags: string) => buildPacket([eth(), ipv4({ src: CLIENT_IP, dst: NODE_IP }), tcp({ sport, dport: 30081, flags })]);
const natPorts = () => node.dp.maps.nat4.entries().map(([k]) => k.dport);

describeWith(['root', 'bpffs', 'netns'], 'SNAT port reuse', () => {
  it('a second live flow finds no free port and is dropped', () => {
    expect(node.run('tc_ingress', fromClient(40001, 'S')).retval).toBe(TcVerdict.REDIRECT);
    expect(node.run('tc_ingress', fromClient(40002, 'S')).retval).toBe(TcVerdict.SHOT);
    expect(natPorts()).toEqual([61000]);
  });

  it('a flow closing with FIN keeps its port for the closing lifetime', () => {
    node.run('tc_ingress', fromClient(40001, 'S'));
    node.run('tc_ingress', fromClient(40001, 'FA'));
    expect(node.run('tc_ingress', fromClient(40002, 'S')).retval).toBe(TcVerdict.SHOT);
  });

  it('a reset flow gives its port to the next flow, and its conntrack entry goes with it', () => {
    node.run('tc_ingress', fromClient(40001, 'S'));
    node.run('tc_ingress', fromClient(40001, 'R'));
    const [, before] = node.dp.maps.ct4.entries()[0]!;
    expect(before.flags & CtFlags.CT_F_RESET).toBeTruthy();
    const r = node.run('tc_ingress', fromClient(40002, 'S'));
    expect(r.retval).toBe(TcVerdict.REDIRECT);
    expect(decodePacket(r.data).find((l) => l.name === 'tcp')!.fields.sport).toBe(61000);
    const [, binding] = node.dp.maps.nat4.entries()[0]!;
    expect(binding.clientPort).toBe(40002);
    expect(node.dp.maps.ct4.entries().map(([k]) => k.sport)).toEqual([40002]);
  });

  it('a flow the backend reset frees its port too, even after another client packet', () => {
    node.run('tc_ingress', fromClient(40001, 'S'));
    const rst = buildPacket([eth(), ipv4({ src: REMOTE_POD, dst: NODE_IP }), tcp({ sport: 8080, dport: 61000, flags: 'R' })]);
    node.run('tc_ingress', rst);
    node.run('tc_ingress', fromClient(40001, 'A'));
    expect(node.run('tc_ingress', fromClient(40002, 'S')).retval).toBe(TcVerdict.REDIRECT);
  });
});
