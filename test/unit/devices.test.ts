// Choosing the tc devices: automatic (the node addresses' and default routes' devices, up,
// not loopback), by name, or by pattern; what cannot be chosen is an error naming what is there.
import { describe, expect, it } from 'vitest';
import { chooseDevices, deviceEntryProblem } from '../../src/agent/devices.js';
import { mergeConfig, DEFAULT_CONFIG } from '../../src/agent/config.js';
import type { LinkInfo } from '../../src/sys/links.js';

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
});
