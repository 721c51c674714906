// The kernel counters a failed reliability run is read by: /proc/net/snmp and netstat
// parsed into "Group.Name", and only the watched ones that moved named, per host.
import { expect, it } from 'vitest';
import { movedCounters, parseNetCounters } from '../../src/sandbox/reliability/net-counters.js';

const snmp = (noRoutes: number, unreach: number, resets = 0) => `Ip: Forwarding DefaultTTL InReceives InAddrErrors OutNoRoutes
Ip: 1 64 1000 0 0
Icmp: InMsgs OutDestUnreachs OutTimeExcds
Icmp: 3 ${unreach} 0
IcmpMsg: OutType3
IcmpMsg: ${unreach}
IpExt: InNoRoutes InOctets
IpExt: ${noRoutes} 123456789012
Tcp: RtoAlgorithm OutRsts
Tcp: 1 ${resets}
`;

it('reads header and value lines in pairs, and skips what does not pair up', () => {
  const c = parseNetCounters(snmp(2, 5));
  expect(c).toMatchObject({ 'Ip.Forwarding': 1, 'Ip.InReceives': 1000, 'Icmp.OutDestUnreachs': 5, 'IcmpMsg.OutType3': 5, 'IpExt.InNoRoutes': 2, 'IpExt.InOctets': 123456789012 });
  // A header whose value line is missing or of another group is not read as values.
  expect(parseNetCounters('Ip: A B\nTcp: 1 2\n')).toEqual({});
  expect(parseNetCounters('Ip: A B\nIp: 1\n')).toEqual({});
});

it('names per host only the watched counters that moved', () => {
  const before = new Map([['router', parseNetCounters(snmp(0, 0))], ['node-1', parseNetCounters(snmp(0, 0))]]);
  before.set('web-1', parseNetCounters(snmp(0, 0, 7)));
  const after = new Map([['router', parseNetCounters(snmp(3, 3))], ['node-1', parseNetCounters(snmp(0, 0).replace('1000', '5000'))], ['web-1', parseNetCounters(snmp(0, 0, 8))]]);
  // A pod that reset a connection is named by its TCP resets sent.
  expect(movedCounters(before, after)).toEqual(['router: Icmp.OutDestUnreachs +3, IpExt.InNoRoutes +3', 'web-1: Tcp.OutRsts +1']);
});
