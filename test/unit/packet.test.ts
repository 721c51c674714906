import { describe, expect, it } from 'vitest';
import { buildPacket, eth, icmp, ipv4, ipv6, mssOption, payload, tcp, udp, icmp6 } from '../../src/packet/build.js';
import { checksum } from '../../src/packet/checksum.js';
import { decodePacket } from '../../src/packet/decode.js';
import { diffPackets } from '../../src/packet/diff.js';
import { ipv6Bytes, ipv6Text } from '../../src/packet/addr.js';

const fields = (p: Buffer, layer: string) => decodePacket(p).find((l) => l.name === layer)?.fields;

describe('packet builder', () => {
  it('builds a TCP SYN with valid IPv4 and TCP checksums', () => {
    const p = buildPacket([eth(), ipv4({ src: '10.0.10.2', dst: '10.0.30.21', id: 7 }), tcp({ sport: 40000, dport: 30080, flags: 'S', options: mssOption(1460) })]);
    expect(p.length).toBe(14 + 20 + 24);
    expect(fields(p, 'ipv4')).toMatchObject({ src: '10.0.10.2', dst: '10.0.30.21', totalLength: 44, protocol: 6, checksumValid: true, df: true, id: 7 });
    expect(fields(p, 'tcp')).toMatchObject({ sport: 40000, dport: 30080, flags: 'S', checksumValid: true, options: '020405b4' });
  });

  it('matches a known IPv4 header checksum (RFC 1071 example header)', () => {
    const hdr = Buffer.from('450000730000400040110000c0a80001c0a800c7', 'hex');
    expect(checksum(hdr)).toBe(0xb861);
  });

  it('builds UDP with a checksum over the pseudo-header, and never a zero checksum', () => {
    const p = buildPacket([eth(), ipv4({ src: '10.0.10.2', dst: '10.96.0.10' }), udp({ sport: 5353, dport: 53 }), payload('hello')]);
    expect(fields(p, 'udp')).toMatchObject({ length: 13, checksumValid: true });
    expect(fields(p, 'payload')).toMatchObject({ length: 5, hex: Buffer.from('hello').toString('hex') });
  });

  it('builds an ICMP fragmentation-needed error quoting the original packet', () => {
    const inner = buildPacket([ipv4({ src: '10.0.30.21', dst: '10.0.10.2' }), tcp({ sport: 30080, dport: 40000, flags: 'A' })]);
    const p = buildPacket([eth(), ipv4({ src: '10.0.10.1', dst: '10.0.30.21' }), icmp({ type: 3, code: 4, rest: 1400 }), payload(inner.subarray(0, 28))]);
    const layers = decodePacket(p);
    expect(layers.map((l) => l.name)).toEqual(['eth', 'ipv4', 'icmp', 'inner ipv4', 'inner tcp']);
    expect(fields(p, 'icmp')).toMatchObject({ type: 3, code: 4, rest: 1400, checksumValid: true });
    expect(fields(p, 'inner ipv4')).toMatchObject({ src: '10.0.30.21', dst: '10.0.10.2' });
    // The quote is cut short, so no checksum verdict is claimed for it.
    expect(fields(p, 'inner tcp')).not.toHaveProperty('checksumValid');
  });

  it('builds IPv6 with TCP and ICMPv6 checksums', () => {
    const t = buildPacket([eth(), ipv6({ src: 'fd00::1', dst: 'fd00:10::2' }), tcp({ sport: 1, dport: 2 })]);
    expect(fields(t, 'eth')).toMatchObject({ type: '0x86dd' });
    expect(fields(t, 'ipv6')).toMatchObject({ src: 'fd00::1', dst: 'fd00:10::2', payloadLength: 20, nextHeader: 6 });
    expect(fields(t, 'tcp')).toMatchObject({ checksumValid: true });
    const e = buildPacket([eth(), ipv6({ src: 'fd00::1', dst: 'fd00::2' }), icmp6({ type: 128, rest: 0x00010001 })]);
    expect(fields(e, 'icmp6')).toMatchObject({ type: 128, checksumValid: true });
  });

  it('builds IP-in-IP and decodes the inner packet with its checksums', () => {
    const p = buildPacket([eth(), ipv4({ src: '10.0.30.21', dst: '10.0.30.22' }), ipv4({ src: '10.0.10.2', dst: '10.0.100.1' }), tcp({ sport: 1000, dport: 80 })]);
    expect(fields(p, 'ipv4')).toMatchObject({ protocol: 4, totalLength: 60 });
    expect(fields(p, 'inner ipv4')).toMatchObject({ dst: '10.0.100.1', checksumValid: true });
    expect(fields(p, 'inner tcp')).toMatchObject({ dport: 80, checksumValid: true });
  });

  it('keeps explicit (wrong) checksums, so fixtures can test bad input', () => {
    const p = buildPacket([eth(), ipv4({ src: '1.2.3.4', dst: '5.6.7.8', checksum: 0x1234 }), udp({ sport: 1, dport: 2, checksum: 0x4321 })]);
    expect(fields(p, 'ipv4')).toMatchObject({ checksum: '0x1234', checksumValid: false });
    expect(fields(p, 'udp')).toMatchObject({ checksumValid: false });
  });

  it('rejects malformed addresses and flags', () => {
    expect(() => buildPacket([ipv4({ src: '10.0.0.256', dst: '1.1.1.1' })])).toThrow(/not an IPv4 address/);
    expect(() => buildPacket([eth({ src: '02:00' })])).toThrow(/not a MAC/);
    expect(() => buildPacket([ipv4({ src: '1.1.1.1', dst: '1.1.1.2' }), tcp({ sport: 1, dport: 2, flags: 'X' })])).toThrow(/tcp flag/);
  });
});

describe('IPv6 text', () => {
  it.each([
    ['::', '::'],
    ['fd00::1', 'fd00::1'],
    ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'],
    ['fe80::1:2', 'fe80::1:2'],
    ['1:2:3:4:5:6:7:8', '1:2:3:4:5:6:7:8'],
  ])('%s round-trips as %s', (input, text) => {
    expect(ipv6Text(ipv6Bytes(input))).toBe(text);
  });
});

describe('packet diff', () => {
  it('names each differing field by layer', () => {
    const a = buildPacket([eth(), ipv4({ src: '10.0.10.2', dst: '10.244.1.5' }), tcp({ sport: 40000, dport: 8080 })]);
    const b = buildPacket([eth(), ipv4({ src: '10.0.10.2', dst: '10.0.30.21' }), tcp({ sport: 40000, dport: 30080 })]);
    const d = diffPackets(a, b);
    expect(d.equal).toBe(false);
    expect(d.lines).toContain('ipv4.dst: expected 10.244.1.5, got 10.0.30.21');
    expect(d.lines).toContain('tcp.dport: expected 8080, got 30080');
    expect(d.lines.some((l) => l.startsWith('ipv4.checksum: '))).toBe(true);
  });

  it('reports equal packets as equal', () => {
    const a = buildPacket([eth(), ipv4({ src: '1.1.1.1', dst: '2.2.2.2' }), udp({ sport: 1, dport: 2 })]);
    expect(diffPackets(a, Buffer.from(a))).toEqual({ equal: true, lines: [] });
  });

  it('reports a missing layer', () => {
    const a = buildPacket([eth(), ipv4({ src: '1.1.1.1', dst: '2.2.2.2' }), udp({ sport: 1, dport: 2 })]);
    const d = diffPackets(a, a.subarray(0, 14));
    expect(d.lines[0]).toBe('layer 1: expected ipv4, got nothing');
  });
});

describe('fragment', () => {
  it('splits a datagram into 8-byte aligned fragments that reassemble to it', async () => {
    const { buildPacket, eth, fragment, ipv4, payload, udp } = await import('../../src/packet/build.js');
    const whole = buildPacket([eth(), ipv4({ src: '10.0.0.1', dst: '10.0.0.2', id: 77, df: false }), udp({ sport: 1, dport: 2 }), payload(Buffer.alloc(3000, 7))]);
    const parts = fragment(whole, 1500);
    expect(parts.map((p) => p.length - 14)).toEqual([1500, 1500, 68]);
    const offsets = parts.map((p) => p.readUInt16BE(14 + 6));
    expect(offsets).toEqual([0x2000, 0x2000 | 185, 370]);
    for (const p of parts) expect(decodePacket(p).find((l) => l.name === 'ipv4')!.fields.checksumValid).toBe(true);
    const data = Buffer.concat(parts.map((p) => p.subarray(14 + 20)));
    expect(data.equals(whole.subarray(14 + 20))).toBe(true);
  });
});
