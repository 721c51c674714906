// The monitor's records as text: IPv4 and IPv6 tuples from this layout, IPv4 ones from an
// older agent's 56-byte records, and a record of neither size refused.
import { expect, it } from 'vitest';
import { decodeEvent, eventCodec } from '../../src/datapath/event-layout.js';
import { DropReason, EventType, Hook, Stat } from '../../src/datapath/layouts.js';
import { describeEvent } from '../../src/datapath/monitor.js';
import { ipv4Bytes, ipv6Bytes } from '../../src/packet/addr.js';
import { FerryError } from '../../src/errors.js';

const v4 = (s: string) => Buffer.concat([ipv4Bytes(s), Buffer.alloc(12)]);

it('an IPv6 trace and an IPv4 drop of this layout', () => {
  const trace = eventCodec.encode({
    tsNs: 5n, type: EventType.EVENT_TRACE, reason: Stat.STAT_FWD_LOCAL6, family: 6, proto: 6, hook: Hook.HOOK_TC_INGRESS, ifindex: 2, verdict: 0,
    saddr: ipv6Bytes('fd00:10::2'), daddr: ipv6Bytes('fd00:100::10'), sport: 20000, dport: 80,
    outSaddr: ipv6Bytes('fd00:10::2'), outDaddr: ipv6Bytes('fd00:244:1::5'), outSport: 20000, outDport: 8080,
  });
  expect(describeEvent(decodeEvent(trace))).toMatchObject({
    kind: 'trace', hook: 'ingress', reason: 'fwd_local6', tuple: '[fd00:10::2]:20000 → [fd00:100::10]:80/tcp', out: '[fd00:10::2]:20000 → [fd00:244:1::5]:8080',
    raw: { family: 6, saddr: 'fd00:10::2', outDaddr: 'fd00:244:1::5' },
  });
  const drop = eventCodec.encode({
    tsNs: 6n, type: EventType.EVENT_DROP, reason: DropReason.DROP_UNKNOWN_PORT, family: 4, proto: 17, hook: Hook.HOOK_XDP, ifindex: 2, verdict: 2,
    saddr: v4('10.0.10.2'), daddr: v4('10.0.100.10'), sport: 7000, dport: 54, outSaddr: Buffer.alloc(16), outDaddr: Buffer.alloc(16), outSport: 0, outDport: 0,
  });
  expect(describeEvent(decodeEvent(drop))).toMatchObject({ kind: 'drop', hook: 'xdp', reason: 'unknown_port', tuple: '10.0.10.2:7000 → 10.0.100.10:54/udp', raw: { saddr: '10.0.10.2', daddr: '10.0.100.10' } });
});

it("an older agent's IPv4 record (56 bytes, before IPv6 events) reads as before", () => {
  const old = Buffer.alloc(56);
  old.writeBigUInt64LE(7n, 0);
  old.writeUInt32LE(EventType.EVENT_TRACE, 8);
  old.writeUInt32LE(Stat.STAT_FWD_REMOTE, 12);
  ipv4Bytes('10.0.10.2').copy(old, 16);
  ipv4Bytes('10.0.30.21').copy(old, 20);
  old.writeUInt16BE(20000, 24);
  old.writeUInt16BE(30080, 26);
  old.writeUInt8(6, 28);
  old.writeUInt8(Hook.HOOK_TC_INGRESS, 29);
  ipv4Bytes('10.0.30.21').copy(old, 32);
  ipv4Bytes('10.244.2.7').copy(old, 36);
  old.writeUInt16BE(20000, 40);
  old.writeUInt16BE(8080, 42);
  old.writeUInt32LE(3, 44);
  old.writeUInt32LE(7, 48);
  expect(describeEvent(decodeEvent(old))).toMatchObject({
    kind: 'trace', reason: 'fwd_remote', tuple: '10.0.10.2:20000 → 10.0.30.21:30080/tcp', out: '10.0.30.21:20000 → 10.244.2.7:8080',
    raw: { family: 4, ifindex: 3, verdict: 7 },
  });
});

it('a record of another size is refused, saying why', () => {
  expect(() => decodeEvent(Buffer.alloc(60))).toThrow(FerryError);
  expect(() => decodeEvent(Buffer.alloc(60))).toThrow(/a record of 60 bytes, not 104.*the ferry of the agent's image/);
});
