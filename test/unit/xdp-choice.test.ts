// Which of ferry's devices get XDP: by default every one but tunnels and stacked devices
// (XDP cannot send by them), and no generic XDP (it turns a device's GRO off); named in
// xdpDevices, exactly those, generic XDP too; an entry that takes none of ferry's devices is refused;
// `ferry status` says why a device is off.
import { describe, expect, it } from 'vitest';
import { DEFAULT_CONFIG, mergeConfig } from '../../src/agent/config.js';
import { checkXdpDevices, xdpChoice, xdpDeviceChoice } from '../../src/agent/xdp-choice.js';
import { xdpLine } from '../../src/cli/inspect-commands.js';
import { parseLinks, type LinkInfo } from '../../src/sys/links.js';

const link = (name: string, kind?: string): LinkInfo => ({ name, ifindex: 0, up: true, loopback: false, addresses: [], ...(kind ? { kind } : {}) });

describe('XDP devices', () => {
  it('by default leaves tunnels and stacked devices to tc, and runs XDP on NICs, bonds, bridges and veths, native only', () => {
    const off = (l: LinkInfo) => xdpDeviceChoice([], l).leaveOff;
    for (const kind of ['vxlan', 'geneve', 'wireguard', 'ipip', 'gre']) expect(off(link('t0', kind))).toMatch(new RegExp(`^a ${kind} tunnel: XDP cannot send frames out of it, and generic XDP would turn its GRO off`));
    for (const kind of ['vlan', 'macvlan', 'ipvlan']) expect(off(link('s0', kind))).toMatch(new RegExp(`^a ${kind} device: no driver XDP`));
    for (const l of [link('enp3s0'), link('bond0', 'bond'), link('br0', 'bridge'), link('eth0', 'veth'), link('gone')]) expect(xdpDeviceChoice([], l)).toEqual({}); // no generic fallback
  });

  it('named in xdpDevices: exactly the devices an entry takes (names or whole-name patterns), tunnels too, and generic XDP where the driver has none', () => {
    expect(xdpDeviceChoice(['eth0', 'flannel.1'], link('flannel.1', 'vxlan'))).toEqual({ genericFallback: true });
    expect(xdpDeviceChoice(['enp.*'], link('enp3s0'))).toEqual({ genericFallback: true });
    expect(xdpDeviceChoice(['enp.*'], link('bond0', 'bond'))).toEqual({ leaveOff: 'not named in xdpDevices' });
    expect(xdpDeviceChoice(['np3'], link('enp3s0'))).toEqual({ leaveOff: 'not named in xdpDevices' }); // whole names only
  });

  it('refuses an entry that takes none of ferry\'s devices (XDP runs only where tc does)', () => {
    expect(() => checkXdpDevices(['eth0', 'eth9'], ['eth0', 'flannel.1'])).toThrow(/choose the XDP devices: xdpDevices entry "eth9" takes none of ferry's devices \(eth0, flannel\.1\) \(XDP runs only on devices ferry serves/);
    expect(() => checkXdpDevices(['fl.*'], ['eth0'])).toThrow(/"fl\.\*" takes none/);
    expect(() => checkXdpDevices(['eth.*', 'flannel.1'], ['eth0', 'flannel.1'])).not.toThrow();
  });

  it('at a start: each chosen device judged by the kind its link has; a device not among the links by its name alone', () => {
    const links = parseLinks([
      { ifindex: 2, ifname: 'eth0', flags: ['UP'], linkinfo: { info_kind: 'veth' }, addr_info: [] },
      { ifindex: 7, ifname: 'flannel.1', flags: ['UP'], linkinfo: { info_kind: 'vxlan', info_data: { id: 1 } }, addr_info: [] },
      { ifindex: 3, ifname: 'enp3s0', flags: ['UP'], addr_info: [] },
    ]);
    expect(links.map((l) => [l.name, l.kind])).toEqual([['eth0', 'veth'], ['flannel.1', 'vxlan'], ['enp3s0', undefined]]);
    const off = xdpChoice([], links, ['eth0', 'flannel.1', 'enp3s0']);
    expect(['eth0', 'flannel.1', 'enp3s0', 'enp9s0'].map((d) => off(d).leaveOff === undefined)).toEqual([true, false, true, true]);
    expect(() => xdpChoice(['eth1'], links, ['eth0'])).toThrow(/"eth1" takes none/);
  });

  it('`ferry status` says why a device has no XDP', () => {
    const reason = xdpDeviceChoice([], link('flannel.1', 'vxlan')).leaveOff!;
    expect(xdpLine({ eth0: { mode: 'native', redirectTarget: true }, 'flannel.1': { mode: 'off', redirectTarget: false, reason } }))
      .toBe(`eth0 native, a redirect target; flannel.1 off, tc only (${reason})`);
  });

  it('the setting: a list or a comma-separated string of names and patterns, checked as devices are', () => {
    expect(DEFAULT_CONFIG.xdpDevices).toEqual([]);
    expect(mergeConfig(DEFAULT_CONFIG, { xdpDevices: 'eth0, flannel.1' }, 'environment').xdpDevices).toEqual(['eth0', 'flannel.1']);
    expect(mergeConfig(DEFAULT_CONFIG, { xdpDevices: ['enp.*'] }, 'file').xdpDevices).toEqual(['enp.*']);
    expect(() => mergeConfig(DEFAULT_CONFIG, { xdpDevices: 'eth0,enp(' }, 'flags')).toThrow(/config xdpDevices \(from flags\): has an entry that is not a valid pattern/);
    expect(() => mergeConfig(DEFAULT_CONFIG, { xdpDevices: [3] }, 'file')).toThrow(/xdpDevices \(from file\): is \[3\]/);
  });
});
