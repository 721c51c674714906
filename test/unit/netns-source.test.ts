import type { NetworkInterfaceInfo } from 'node:os';
import { describe, expect, it } from 'vitest';
import { sourceAddress } from '../../src/sys/netns-source.js';

const v4 = (address: string, internal = false): NetworkInterfaceInfo => ({ address, netmask: '255.255.255.0', family: 'IPv4', mac: '00:00:00:00:00:00', internal, cidr: `${address}/24` });
const v6 = (address: string): NetworkInterfaceInfo => ({ address, netmask: 'ffff:ffff:ffff:ffff::', family: 'IPv6', mac: '00:00:00:00:00:00', internal: false, cidr: `${address}/64`, scopeid: 0 });

describe('a namespace\'s source address', () => {
  it('is eth0\'s first IPv4 address, whatever else there is', () => {
    expect(sourceAddress({ lo: [v4('127.0.0.1', true)], eth0: [v6('fd00::5'), v4('10.244.1.5'), v4('10.244.1.6')], net1: [v4('192.168.5.5')] })).toBe('10.244.1.5');
  });
  it('is the only non-loopback IPv4 address without an eth0', () => {
    expect(sourceAddress({ lo: [v4('127.0.0.1', true)], 'veth-b': [v4('10.244.2.20'), v6('fd00::1')] })).toBe('10.244.2.20');
  });
  it('is unknown with none yet, or several and no eth0 (which one a connect() leaves from is the routes\' choice)', () => {
    expect(sourceAddress({ lo: [v4('127.0.0.1', true)] })).toBeUndefined();
    expect(sourceAddress({ lo: [v4('127.0.0.1', true)], eth1: [v4('10.0.0.1')], eth2: [v4('10.0.0.2')] })).toBeUndefined();
  });
});
