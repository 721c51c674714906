// The filter of Service packets (lb4_addr_filter): tc passes a packet to an address the
// writer does not hold, or to a port no frontend uses at an address without a wildcard, on
// without its lookups; an unfilled slot filters nothing; the writer holds an address and
// port from before their first entry is written to after their last is gone. Every tc and XDP fixture also runs through the filter (their Services are written
// by the writer): a bit the agent and the program computed differently would fail them.
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { ADDR_FILTER_BYTES, FilterSlot, LbScope, type Lb4Key } from '../../src/datapath/layouts.js';
import { addressBit } from '../../src/datapath/address-filter.js';
import { dumpMap } from '../../src/datapath/inspect.js';
import { emptyService } from '../../src/datapath/write-plan.js';
import { ServiceWriter, type ServiceMaps } from '../../src/datapath/writer.js';
import type { FrontendSpec } from '../../src/model/frontend.js';
import { buildPacket } from '../../src/packet/build.js';
import { TcVerdict } from '../../src/sandbox/packet-fixture.js';
import { NODE_IP, datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { REMOTE_POD, clientTcp } from '../../src/sandbox/fixtures/tc.js';
import { describeWith } from '../harness/requirements.js';

const LB = '10.0.100.7';
const lbService: FrontendSpec = { address: LB, port: 80, proto: 'TCP', kind: 'LoadBalancer', service: 'default/lb:http', backends: [{ address: REMOTE_POD, port: 8080, local: false }] };
const master: Lb4Key = { address: LB, port: 80, proto: 6, scope: LbScope.LB_SCOPE_EXTERNAL, slot: 0 };
const toLB = () => buildPacket(clientTcp(LB, 80, { flags: 'S' }));

let node: DatapathNode;
beforeAll(async () => {
  node = await datapathNode();
});
afterAll(async () => {
  await node?.close();
});
beforeEach(() => {
  node.writer.apply([], { reread: true });
  node.flushState();
});

/** Is a bit of a slot set in the map, as the program reads it? */
function slotBit(slot: number, bit: number): boolean {
  const f = node.dp.maps.lb4_addr_filter.lookup(slot)!;
  return f.ready === 1 && ((f.bits[bit >> 3]! >> (bit & 7)) & 1) === 1;
}
const bitSet = (address: string) => slotBit(FilterSlot.LB4_FILTER_ADDRESSES, addressBit(address));

describeWith(['root', 'bpffs', 'netns'], 'the filter of Service addresses', () => {
  it('a packet to an address the writer does not hold is passed on unlooked-up; held, it is balanced; let go, passed again', () => {
    // An entry written behind the writer's back, for an address it does not hold: found,
    // it would be balanced (and dropped: it has no slot). The filter says "no Service".
    node.dp.maps.lb4_services.update(master, { ...emptyService, count: 1 });
    expect(bitSet(LB)).toBe(false);
    expect(node.run('tc_ingress', toLB()).retval).toBe(TcVerdict.UNSPEC);
    node.dp.maps.lb4_services.delete(master);

    node.writer.apply([lbService]);
    expect(node.writer.addressFilter.addresses()).toContain(LB);
    expect(bitSet(LB)).toBe(true);
    expect(node.run('tc_ingress', toLB()).retval).toBe(TcVerdict.REDIRECT);

    node.writer.apply([]);
    expect(node.writer.addressFilter.addresses()).not.toContain(LB);
    expect(bitSet(LB)).toBe(false);
  });

  it('an unfilled filter (ready 0, as a new map is before the writer fills it) filters nothing; a filled one is read', () => {
    node.writer.apply([lbService]);
    node.flushState();
    node.dp.maps.lb4_addr_filter.update(0, { ready: 0, bits: Buffer.alloc(ADDR_FILTER_BYTES) });
    expect(node.run('tc_ingress', toLB()).retval).toBe(TcVerdict.REDIRECT);
    node.flushState();
    node.dp.maps.lb4_addr_filter.update(0, { ready: 1, bits: Buffer.alloc(ADDR_FILTER_BYTES) });
    expect(node.run('tc_ingress', toLB()).retval).toBe(TcVerdict.UNSPEC);
    // A writer that reads its view from the maps again writes the filter again.
    node.writer.apply([lbService], { reread: true });
    expect(bitSet(LB)).toBe(true);
  });

  it('the writer sets an address\'s bit before its first entry and clears it after its last', () => {
    const seen: string[] = [];
    const services = node.dp.maps.lb4_services;
    const watch = (what: string, keys: Lb4Key[]) => {
      const all = bitSet(LB) && slotBit(FilterSlot.LB4_FILTER_PORTS, 80) && slotBit(FilterSlot.LB4_FILTER_WILDCARDS, addressBit(LB));
      if (keys.some((k) => k.address === LB)) seen.push(`${what}: bits ${all ? 'set' : 'clear'}`);
    };
    const checked = new Proxy(services, {
      get(target, prop, receiver) {
        if (prop === 'updateBatch') return (entries: Array<[Lb4Key, unknown]>) => (watch('write', entries.map(([k]) => k)), target.updateBatch(entries as never));
        if (prop === 'deleteBatch') return (keys: Lb4Key[]) => (watch('delete', keys), target.deleteBatch(keys));
        const v = Reflect.get(target, prop, receiver);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    const maps: ServiceMaps = { ...node.dp.maps, lb4_services: checked };
    const writer = new ServiceWriter(maps);
    writer.apply([lbService]);
    writer.apply([]);
    expect(seen.length).toBeGreaterThanOrEqual(3); // slots, master and wildcard; their delete
    expect(seen.filter((s) => s.endsWith('clear'))).toEqual([]);
    expect(bitSet(LB)).toBe(false);
  });

  it('at an address without a wildcard (a node address), a port no frontend uses passes unlooked-up; at one with a wildcard, every port is looked up', () => {
    const nodePort: FrontendSpec = { address: NODE_IP, port: 30090, proto: 'TCP', kind: 'NodePort', service: 'default/np:http', backends: [{ address: REMOTE_POD, port: 8080, local: false }] };
    node.writer.apply([nodePort, lbService]);
    expect(node.writer.addressFilter.ports().sort((a, b) => a - b)).toEqual([80, 30090]);
    expect(slotBit(FilterSlot.LB4_FILTER_WILDCARDS, addressBit(LB))).toBe(true);
    expect(slotBit(FilterSlot.LB4_FILTER_WILDCARDS, addressBit(NODE_IP))).toBe(false);
    expect(dumpMap(node.pinDir, 'lb4_addr_filter')).toEqual([
      { slot: 'addresses', ready: 1, bits: '2 of 65536 set' },
      { slot: 'wildcards', ready: 1, bits: '1 of 65536 set' },
      { slot: 'ports', ready: 1, bits: '2 of 65536 set' },
    ]);
    const to = (address: string, port: number) => node.run('tc_ingress', buildPacket(clientTcp(address, port, { flags: 'S' }))).retval;
    // Entries behind the writer's back at the node address: found, each would be balanced
    // and dropped (no slot). On port 22, which no frontend uses, the filter says no Service.
    const behind = [22, 80].map((port): Lb4Key => ({ address: NODE_IP, port, proto: 6, scope: LbScope.LB_SCOPE_EXTERNAL, slot: 0 }));
    for (const k of behind) node.dp.maps.lb4_services.update(k, { ...emptyService, count: 1 });
    try {
      expect(to(NODE_IP, 22)).toBe(TcVerdict.UNSPEC);
      expect(to(NODE_IP, 80)).toBe(TcVerdict.SHOT); // port 80 is the LB's: looked up
      expect(to(NODE_IP, 30090)).toBe(TcVerdict.REDIRECT);
      expect(to(LB, 81)).toBe(TcVerdict.SHOT); // the LB's wildcard: an unknown port drops
      // An unfilled port slot filters nothing.
      node.dp.maps.lb4_addr_filter.update(FilterSlot.LB4_FILTER_PORTS, { ready: 0, bits: Buffer.alloc(ADDR_FILTER_BYTES) });
      expect(to(NODE_IP, 22)).toBe(TcVerdict.SHOT);
    } finally {
      node.dp.maps.lb4_services.deleteBatch(behind);
    }
    // Let go, the ports' bits are clear again.
    node.writer.apply([]);
    expect(node.writer.addressFilter.ports()).toEqual([]);
    expect(slotBit(FilterSlot.LB4_FILTER_PORTS, 30090)).toBe(false);
  });
});
