import { describe, expect, it } from 'vitest';
import { SnatDevices, chooseSnatDevices, type DeviceAddresses } from '../../src/datapath/snat-devices.js';
import type { BpfMap } from '../../src/ebpf/map.js';
import { snatLine } from '../../src/cli/inspect-commands.js';

const NODE = '192.0.2.10';
const links: DeviceAddresses[] = [
  { name: 'lo', ifindex: 1, addresses: ['127.0.0.1'] },
  { name: 'enp3s0', ifindex: 2, addresses: [NODE, '192.0.2.99'] },
  { name: 'flannel.1', ifindex: 7, addresses: ['10.244.1.0'] },
  { name: 'enp4s0', ifindex: 3, addresses: [] },
  { name: 'cni0', ifindex: 8, addresses: ['10.244.1.1'] },
];

/** A map as a Map, with the writes it took. */
function fakeMap(): { map: BpfMap<number, string>; data: Map<number, string>; writes: string[] } {
  const data = new Map<number, string>();
  const writes: string[] = [];
  const map = {
    maxEntries: 4,
    keys: () => data.keys(),
    update: (k: number, v: string) => (writes.push(`update ${k}`), data.set(k, v)),
    delete: (k: number) => (writes.push(`delete ${k}`), data.delete(k)),
  } as unknown as BpfMap<number, string>;
  return { map, data, writes };
}

describe('SNAT address per device', () => {
  it('lists the attached devices with an address, other than the one holding the SNAT address, by their first address', () => {
    expect(chooseSnatDevices(links, ['enp3s0', 'flannel.1', 'enp4s0'], NODE)).toEqual([{ name: 'flannel.1', ifindex: 7, address: '10.244.1.0' }]);
    expect(chooseSnatDevices(links, ['enp3s0'], NODE), 'one NIC: nothing').toEqual([]);
  });

  it('lists nothing when no attached device holds the SNAT address (a configured address applies to every flow)', () => {
    expect(chooseSnatDevices(links, ['enp3s0', 'flannel.1'], '198.51.100.1')).toEqual([]);
  });

  it('writes the map and the flag only on a change, entries before the flag is set and after it is cleared', () => {
    const { map, data, writes } = fakeMap();
    data.set(99, '10.9.9.9'); // a previous agent's entry
    const flags: boolean[] = [];
    const epoch = { setSnatByDevice: (on: boolean) => (writes.push(`flag ${on}`), flags.push(on), 0n) };
    const s = new SnatDevices(map, epoch);
    expect(s.apply([]), 'the first apply writes, whatever it finds').toBe(true);
    expect(writes).toEqual(['flag false', 'delete 99']);
    expect(s.apply([]), 'no change').toBe(false);
    writes.length = 0;
    const flannel = { name: 'flannel.1', ifindex: 7, address: '10.244.1.0' };
    expect(s.apply([flannel])).toBe(true);
    expect(writes).toEqual(['update 7', 'flag true']);
    expect([...data]).toEqual([[7, '10.244.1.0']]);
    expect(s.apply([flannel])).toBe(false);
    writes.length = 0;
    expect(s.apply([{ ...flannel, address: '10.244.1.128' }]), 'a new address').toBe(true);
    expect(data.get(7)).toBe('10.244.1.128');
    writes.length = 0;
    expect(s.apply([])).toBe(true);
    expect(writes).toEqual(['flag false', 'delete 7']);
    expect(s.list()).toEqual([]);
    expect(flags.at(-1)).toBe(false);
  });

  it('ferry status says where SNAT flows leave from', () => {
    expect(snatLine([])).toBe("from the node's address (no device lends its own)");
    expect(snatLine([{ name: 'flannel.1', ifindex: 7, address: '10.244.1.0' }])).toBe("flows routed out of flannel.1 from 10.244.1.0; out of any other device from the node's address");
  });

  it('refuses more devices than the map holds, changing nothing', () => {
    const { map, data } = fakeMap();
    const s = new SnatDevices(map, { setSnatByDevice: () => 0n });
    const many = Array.from({ length: 5 }, (_, i) => ({ name: `d${i}`, ifindex: i + 10, address: `10.1.0.${i}` }));
    expect(() => s.apply(many)).toThrow(/5 devices, room for 4/);
    expect(data.size).toBe(0);
  });
});
