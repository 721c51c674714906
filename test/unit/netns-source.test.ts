import type { NetworkInterfaceInfo } from 'node:os';
import { describe, expect, it } from 'vitest';
import { defaultRouteDevice, defaultRouteDevice6, sourceAddress } from '../../src/sys/netns-source.js';

const v4 = (address: string, internal = false): NetworkInterfaceInfo => ({ address, netmask: '255.255.255.0', family: 'IPv4', mac: '00:00:00:00:00:00', internal, cidr: `${address}/24` });
const v6 = (address: string): NetworkInterfaceInfo => ({ address, netmask: 'ffff:ffff:ffff:ffff::', family: 'IPv6', mac: '00:00:00:00:00:00', internal: false, cidr: `${address}/64`, scopeid: 0 });

describe('a namespace\'s source address', () => {
  it('is eth0\'s first IPv4 address, whatever else there is', () => {
    expect(sourceAddress({ lo: [v4('127.0.0.1', true)], eth0: [v6('fd00::5'), v4('10.244.1.5'), v4('10.244.1.6')], net1: [v4('192.168.5.5')] })).toBe('10.244.1.5');
  });
  it('is the only non-loopback IPv4 address without an eth0', () => {
    expect(sourceAddress({ lo: [v4('127.0.0.1', true)], 'veth-b': [v4('10.244.2.20'), v6('fd00::1')] })).toBe('10.244.2.20');
  });
  it('is the default route\'s device\'s first IPv4 address before eth0\'s', () => {
    expect(sourceAddress({ eth0: [v4('10.244.1.5')], net1: [v4('192.168.5.5')] }, 'net1')).toBe('192.168.5.5');
    expect(sourceAddress({ eth0: [v4('10.244.1.5')] }, 'gone')).toBe('10.244.1.5');
  });
  it('is unknown with none yet, or several with neither a default route\'s device nor eth0 to tell', () => {
    expect(sourceAddress({ lo: [v4('127.0.0.1', true)] })).toBeUndefined();
    expect(sourceAddress({ lo: [v4('127.0.0.1', true)], eth1: [v4('10.0.0.1')], eth2: [v4('10.0.0.2')] })).toBeUndefined();
  });
  it('finds the default route\'s device in /proc/net/route (the lowest metric; not a /0 with a mask, nor another route)', () => {
    const head = 'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT';
    const row = (dev: string, dest: string, metric: number, mask: string) => `${dev}\t${dest}\t010200C0\t0003\t0\t0\t${metric}\t${mask}\t0\t0\t0`;
    expect(defaultRouteDevice([head, row('eth0', '000200C0', 0, '00FFFFFF'), row('net1', '00000000', 200, '00000000'), row('eth0', '00000000', 100, '00000000')].join('\n'))).toBe('eth0');
    expect(defaultRouteDevice([head, row('eth0', '000200C0', 0, '00FFFFFF')].join('\n'))).toBeUndefined();
    expect(defaultRouteDevice('')).toBeUndefined();
  });
  it('IPv6: chosen the same way, never a link-local address', () => {
    expect(sourceAddress({ lo: [v6('::1')], eth0: [v6('fe80::1'), v6('fd00:10:244:1::5'), v4('10.244.1.5')] }, undefined, 'IPv6')).toBe('fd00:10:244:1::5');
    expect(sourceAddress({ eth0: [v6('fe80::1')], net1: [v6('fd00:5::5')] }, 'net1', 'IPv6')).toBe('fd00:5::5');
    expect(sourceAddress({ eth0: [v6('fe80::1'), v4('10.244.1.5')] }, undefined, 'IPv6')).toBeUndefined();
  });
  it('finds the IPv6 default route\'s device in /proc/net/ipv6_route (::/0, the lowest metric; not lo\'s unreachable one)', () => {
    const z = '0'.repeat(32);
    const row = (dest: string, len: string, metric: string, dev: string) => `${dest} ${len} ${z} 00 fd000000000000000000000000000001 ${metric} 00000001 00000000 00000003 ${dev.padStart(8)}`;
    const text = [row('fd000000000000000000000000000000', '40', '00000100', 'eth0'), row(z, '00', 'ffffffff', 'lo'), row(z, '00', '00000400', 'net1'), row(z, '00', '00000200', 'eth0')].join('\n');
    expect(defaultRouteDevice6(text)).toBe('eth0');
    expect(defaultRouteDevice6(row('fd000000000000000000000000000000', '40', '00000100', 'eth0'))).toBeUndefined();
    expect(defaultRouteDevice6('')).toBeUndefined();
  });
});
