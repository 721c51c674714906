// The filter of Service addresses (lb4_addr_filter): tc passes a packet to an address the
// writer does not hold on without its frontend lookups; an unfilled filter filters nothing;
// the writer holds an address from before its first entry is written to after its last is
// gone. Every tc and XDP fixture also runs through the filter (their Services are written
// by the writer): a bit the agent and the program computed differently would fail them.
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { ADDR_FILTER_BYTES, LbScope, type Lb4Key } from '../../src/datapath/layouts.js';
import { addressBit } from '../../src/datapath/address-filter.js';
import { emptyService } from '../../src/datapath/write-plan.js';
import { ServiceWriter, type ServiceMaps } from '../../src/datapath/writer.js';
import type { FrontendSpec } from '../../src/model/frontend.js';
import { buildPacket } from '../../src/packet/build.js';
import { TcVerdict } from '../../src/sandbox/packet-fixture.js';
import { datapathNode, type DatapathNode } from '../../src/sandbox/datapath-node.js';
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

/** Is an address's bit set in the map, as the program reads it? */
function bitSet(address: string): boolean {
  const f = node.dp.maps.lb4_addr_filter.lookup(0)!;
  const bit = addressBit(address);
  return f.ready === 1 && ((f.bits[bit >> 3]! >> (bit & 7)) & 1) === 1;
}

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
      if (keys.some((k) => k.address === LB)) seen.push(`${what}: bit ${bitSet(LB) ? 'set' : 'clear'}`);
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
});
