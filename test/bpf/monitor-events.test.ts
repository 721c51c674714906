// What `ferry monitor` is told, by PROG_TEST_RUN with the monitor's switch on and its lease
// held: a drop's tuple and reason, a trace's packet before and after, for IPv4 and for
// IPv6 (tc's IPv6 path: DNAT to a local backend, its reply, a port no Service has, a
// rejected connection), at ingress and egress; and nothing for a packet of
// neither family.
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { monotonicNs } from '../../src/datapath/ct-gc.js';
import { decodeEvent } from '../../src/datapath/event-layout.js';
import { MonitorFlags, Stat } from '../../src/datapath/layouts.js';
import { L2AddressWriter } from '../../src/datapath/l2-announcements.js';
import { describeEvent, type DatapathEvent } from '../../src/datapath/monitor.js';
import { libbpf } from '../../src/ebpf/libbpf.js';
import { RingBufferReader } from '../../src/ebpf/ringbuf.js';
import { CLIENT_IP, NODE_IP, NODE_MAC, datapathNode, total, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { ANNOUNCED, ARP_FIXTURES } from '../../src/sandbox/fixtures/arp.js';
import { CLIENT_PORT, LB_IP, LOCAL_POD, TC_SERVICES, fixture } from '../../src/sandbox/fixtures/tc.js';
import { CLIENT6, CLIENT6_PORT, LB6, LOCAL_POD6, TC6_FIXTURES, TC6_SERVICES } from '../../src/sandbox/fixtures/tc6.js';
import { TcVerdict, type TcProgram } from '../../src/sandbox/packet-fixture.js';
import { describeWith } from '../harness/requirements.js';

let n: DatapathNode;
let reader: RingBufferReader;
let seen: DatapathEvent[] = [];

beforeAll(async () => {
  n = await datapathNode();
  expect(n.writer.apply([...TC_SERVICES, ...TC6_SERVICES]).failures).toEqual([]);
  reader = new RingBufferReader('ferry_events', libbpf().objGet(join(n.pinDir, 'ferry_events')), (data) => seen.push(describeEvent(decodeEvent(data))));
  n.dp.maps.ferry_monitor_lease.update(0, { untilNs: monotonicNs() + 600_000_000_000n, owner: 42 });
  n.dp.maps.ferry_monitor.update(0, { flags: MonitorFlags.MONITOR_DROPS | MonitorFlags.MONITOR_TRACES });
});
afterAll(async () => {
  reader?.close();
  await n?.close();
});
beforeEach(() => n.flushState());

/** The events one packet makes, with its verdict. */
function eventsOf(program: TcProgram, packet: Buffer, verdict: number): DatapathEvent[] {
  reader.poll(0);
  seen = [];
  expect(n.run(program, packet).retval).toBe(verdict);
  reader.poll(0);
  return seen;
}
const tc6 = (id: string) => fixture(id, TC6_FIXTURES);

describeWith(['root', 'bpffs', 'netns'], 'monitor events', () => {
  it('IPv4: a drop with its reason, a translation before and after', () => {
    const [drop] = eventsOf('tc_ingress', fixture('unknown-port').input, TcVerdict.SHOT);
    expect(drop).toMatchObject({ kind: 'drop', hook: 'ingress', reason: 'unknown_port', tuple: `${CLIENT_IP}:${CLIENT_PORT} → ${LB_IP}:8443/tcp` });
    expect(drop!.raw).toMatchObject({ family: 4, saddr: CLIENT_IP, daddr: LB_IP, sport: CLIENT_PORT, dport: 8443 });
    const [dnat] = eventsOf('tc_ingress', fixture('nodeport-local').input, TcVerdict.OK);
    expect(dnat).toMatchObject({ kind: 'trace', reason: 'fwd_local', tuple: `${CLIENT_IP}:${CLIENT_PORT} → ${NODE_IP}:30080/tcp`, out: `${CLIENT_IP}:${CLIENT_PORT} → ${LOCAL_POD}:8080` });
  });

  it('IPv6: a drop, a DNAT, its reply at egress and a rejected connection, with their addresses', () => {
    const [unknown] = eventsOf('tc_ingress', tc6('ipv6-unknown-port').input, TcVerdict.SHOT);
    expect(unknown).toMatchObject({ kind: 'drop', hook: 'ingress', reason: 'unknown_port', tuple: `[${CLIENT6}]:${CLIENT6_PORT} → [${LB6}]:82/tcp` });
    expect(unknown!.raw).toMatchObject({ family: 6, saddr: CLIENT6, daddr: LB6, sport: CLIENT6_PORT, dport: 82 });

    const [dnat] = eventsOf('tc_ingress', tc6('ipv6-lb-local').input, TcVerdict.OK);
    expect(dnat).toMatchObject({ kind: 'trace', reason: 'fwd_local6', tuple: `[${CLIENT6}]:${CLIENT6_PORT} → [${LB6}]:80/tcp`, out: `[${CLIENT6}]:${CLIENT6_PORT} → [${LOCAL_POD6}]:8080` });
    const [reply] = eventsOf('tc_egress', tc6('ipv6-local-reply').input, TcVerdict.OK);
    expect(reply).toMatchObject({ kind: 'trace', hook: 'egress', reason: 'reply_local6', tuple: `[${LOCAL_POD6}]:8080 → [${CLIENT6}]:${CLIENT6_PORT}/tcp`, out: `[${LB6}]:80 → [${CLIENT6}]:${CLIENT6_PORT}` });

    const [reject] = eventsOf('tc_ingress', tc6('ipv6-reject').input, TcVerdict.REDIRECT);
    expect(reject).toMatchObject({ kind: 'trace', reason: 'icmp_reject', tuple: `[${CLIENT6}]:${CLIENT6_PORT} → [${LB6}]:83/tcp` });
    expect(reject!.raw).toMatchObject({ outSaddr: LB6, outDaddr: CLIENT6, proto: 6 });
  });

  it('nothing for a frame of neither family (an ARP request answered: counted, no tuple), and the switch still decides', () => {
    const answered = fixture('arp-owned', ARP_FIXTURES);
    new L2AddressWriter(n.dp.maps.l2_owned).apply([{ ifindex: n.ifindex, address: ANNOUNCED, mac: NODE_MAC }], 60_000);
    expect(eventsOf('tc_ingress', tc6('ipv6-unknown-port').input, TcVerdict.SHOT)).toHaveLength(1); // a tuple noted before
    expect(eventsOf('tc_ingress', answered.input, TcVerdict.REDIRECT)).toEqual([]);
    expect(total(n.dp, 'ferry_stats', Stat.STAT_ARP_REPLY)).toBeGreaterThan(0n);
    n.dp.maps.ferry_monitor.update(0, { flags: MonitorFlags.MONITOR_DROPS });
    try {
      expect(eventsOf('tc_ingress', tc6('ipv6-lb-local').input, TcVerdict.OK)).toEqual([]); // traces not asked for
      expect(eventsOf('tc_ingress', tc6('ipv6-unknown-port').input, TcVerdict.SHOT)).toHaveLength(1);
    } finally {
      n.dp.maps.ferry_monitor.update(0, { flags: MonitorFlags.MONITOR_DROPS | MonitorFlags.MONITOR_TRACES });
    }
  });
});
