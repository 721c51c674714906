// Choosing the tc devices: automatic (the node addresses' and default routes' devices, up,
// not loopback), by name, or by pattern; what cannot be chosen is an error naming what is there.
import { describe, expect, it } from 'vitest';
import { chooseDevices, deviceEntryProblem, vlansLeftOut } from '../../src/agent/devices.js';
import { mergeConfig, DEFAULT_CONFIG } from '../../src/agent/config.js';
import { parseLinks, type LinkInfo } from '../../src/sys/links.js';

const link = (name: string, addresses: string[] = [], o: Partial<LinkInfo> = {}): LinkInfo => ({ name, ifindex: 0, up: true, loopback: false, addresses, ...o });
// A Talos bare-metal node: the node address on enp3s0, the default route on enp4s0 (a
// second uplink), a down NIC, a bridge for pods, loopback.
const talos = [
  link('lo', ['127.0.0.1'], { loopback: true }),
  link('enp3s0', ['192.168.1.20']),
  link('enp4s0', ['203.0.113.7']),
  link('enp5s0', [], { up: false }),
  link('cni0', ['10.244.1.1']),
];

describe('tc devices', () => {
  it('chooses the devices of the node addresses and of the default routes when none are named', () => {
    expect(chooseDevices(talos, ['enp4s0'], ['192.168.1.20'], [])).toEqual(['enp3s0', 'enp4s0']);
    expect(chooseDevices(talos, [], ['192.168.1.20'], [])).toEqual(['enp3s0']);
  });

  it('refuses to guess when nothing carries the node address or a default route', () => {
    expect(() => chooseDevices(talos, [], ['10.9.9.9'], [])).toThrow(/choose devices: no up interface carries the node's addresses \(10\.9\.9\.9\) or a default route \(set devices/);
  });

  it('takes names and whole-name patterns, in order, once each', () => {
    expect(chooseDevices(talos, [], [], ['enp.*'])).toEqual(['enp3s0', 'enp4s0', 'enp5s0']);
    expect(chooseDevices(talos, [], [], ['enp4s0', 'enp[0-9]s0'])).toEqual(['enp4s0', 'enp3s0', 'enp5s0']);
    expect(() => chooseDevices(talos, [], [], ['eth0'])).toThrow(/no interface named "eth0" \(have: enp3s0, enp4s0, enp5s0, cni0\)/);
    expect(() => chooseDevices(talos, [], [], ['eth.*'])).toThrow(/no interface matches "eth\.\*"/);
    // A pattern matches whole names only, and never loopback.
    expect(() => chooseDevices(talos, [], [], ['np3'])).toThrow(/named "np3"/);
    expect(() => chooseDevices(talos, [], [], ['l.*'])).toThrow(/matches "l\.\*"/);
  });

  it('validates entries in the config: names, or patterns that compile', () => {
    expect(deviceEntryProblem('eth0.100')).toBeUndefined();
    expect(deviceEntryProblem('')).toBe('is empty');
    expect(deviceEntryProblem('enp.*')).toBeUndefined();
    expect(deviceEntryProblem('enp[')).toMatch(/is not a valid pattern/);
    expect(deviceEntryProblem(`(${'x'.repeat(64)})`)).toMatch(/longer than 64/);
    expect(deviceEntryProblem('a-very-long-interface-name')).toMatch(/longer than 15/);
    expect(() => mergeConfig(DEFAULT_CONFIG, { devices: 'eth0,enp(' }, 'flags')).toThrow(/config devices \(from flags\): has an entry that is not a valid pattern/);
    expect(mergeConfig(DEFAULT_CONFIG, { devices: 'eth0,enp.*' }, 'flags').devices).toEqual(['eth0', 'enp.*']);
  });

  it('reads VLAN devices from `ip -d -j addr show` (the parent and the id), and only those', () => {
    const rows = [
      { ifindex: 2, ifname: 'enp3s0', flags: ['BROADCAST', 'UP'], linkinfo: undefined, addr_info: [{ family: 'inet', local: '192.168.1.20' }] },
      { ifindex: 5, ifname: 'enp3s0.100', link: 'enp3s0', flags: ['BROADCAST', 'UP'], linkinfo: { info_kind: 'vlan', info_data: { protocol: '802.1Q', id: 100, flags: ['REORDER_HDR'] } }, addr_info: [{ family: 'inet', local: '10.100.0.20' }, { family: 'inet6', local: 'fe80::1' }] },
      { ifindex: 6, ifname: 'veth1', link: 'veth2', flags: ['UP'], linkinfo: { info_kind: 'veth' }, addr_info: [] },
    ];
    const links = parseLinks(rows as Parameters<typeof parseLinks>[0]);
    expect(links.map((l) => [l.name, l.vlan])).toEqual([['enp3s0', undefined], ['enp3s0.100', { parent: 'enp3s0', id: 100 }], ['veth1', undefined]]);
    expect(links[1]!.addresses).toEqual(['10.100.0.20']);
  });

  it('names the VLANs of an attached device that are not attached themselves (their tagged traffic is left to them)', () => {
    const vlan = (name: string, parent: string, id: number, up = true) => link(name, [], { up, vlan: { parent, id } });
    const links = [...talos, vlan('enp3s0.100', 'enp3s0', 100), vlan('enp3s0.200', 'enp3s0', 200), vlan('enp4s0.300', 'enp4s0', 300), vlan('enp3s0.400', 'enp3s0', 400, false)];
    expect(vlansLeftOut(links, ['enp3s0', 'enp3s0.200']).map((l) => l.name)).toEqual(['enp3s0.100']); // .200 served, .300's parent not ferry's, .400 down
    expect(vlansLeftOut(links, ['enp3s0', 'enp3s0.100', 'enp3s0.200'])).toEqual([]);
    expect(vlansLeftOut(talos, ['enp3s0'])).toEqual([]);
  });

  it('leaves the ports of a bond or bridge out of patterns and the automatic choice, not out of names', () => {
    const bonded = [
      link('lo', ['127.0.0.1'], { loopback: true }),
      link('enp3s0', [], { portOf: 'bond0' }),
      link('enp4s0', [], { portOf: 'bond0' }),
      link('bond0', ['192.168.1.20']),
      link('enp5s0', ['203.0.113.7']),
    ];
    expect(chooseDevices(bonded, [], ['192.168.1.20'], [])).toEqual(['bond0']);
    expect(chooseDevices(bonded, [], [], ['enp.*|bond0'])).toEqual(['bond0', 'enp5s0']); // in the links' order
    expect(chooseDevices(bonded, [], [], ['enp3s0'])).toEqual(['enp3s0']); // named outright: taken
    expect(() => chooseDevices(bonded, [], [], ['enp[34]s0'])).toThrow(/matches "enp\[34\]s0" .*it matches only ports of other devices: enp3s0 \(of bond0\), enp4s0 \(of bond0\) \(name the bond or bridge itself\)/);
  });

  it('reads a port\'s bond or bridge from `ip -d -j addr show`; a VRF\'s member is no port', () => {
    const rows = [
      { ifindex: 3, ifname: 'enp3s0', master: 'bond0', flags: ['UP', 'SLAVE'], linkinfo: { info_slave_kind: 'bond', info_slave_data: { state: 'ACTIVE' } }, addr_info: [] },
      { ifindex: 4, ifname: 'vpa', master: 'br0', link: 'vpb', flags: ['UP'], linkinfo: { info_kind: 'veth', info_slave_kind: 'bridge', info_slave_data: { id: '0x8001' } }, addr_info: [] },
      { ifindex: 5, ifname: 'enp5s0', master: 'vrf-blue', flags: ['UP'], linkinfo: { info_slave_kind: 'vrf', info_slave_data: { table: 10 } }, addr_info: [{ family: 'inet', local: '203.0.113.7' }] },
    ];
    expect(parseLinks(rows as Parameters<typeof parseLinks>[0]).map((l) => [l.name, l.portOf, l.vlan])).toEqual([['enp3s0', 'bond0', undefined], ['vpa', 'br0', undefined], ['enp5s0', undefined, undefined]]);
  });
});

