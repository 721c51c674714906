import { describe, expect, it } from 'vitest';
import { ipv4FromString, ipv4ToString, snakeCase, structCodec, u32Codec } from '../../src/ebpf/codec.js';

const flowKey = structCodec('test_flow_key', {
  addr: { type: 'ipv4' },
  port: { type: 'be16' },
  proto: { type: 'u8' },
  pad: { type: 'pad', length: 1 },
});

describe('struct codecs', () => {
  it('lays fields out as C does and puts byte order where the type says', () => {
    expect(flowKey.size).toBe(8);
    const b = flowKey.encode({ addr: '10.96.0.1', port: 443, proto: 6 });
    expect(b.toString('hex')).toBe('0a60000101bb0600');
    expect(flowKey.decode(b)).toEqual({ addr: '10.96.0.1', port: 443, proto: 6 });
  });

  it('IPv6 fields: 16 bytes in network order, read back in their one text form; anything else refused', () => {
    const key6 = structCodec('test_key6', { addr: { type: 'ipv6' }, port: { type: 'be16' }, pad: { type: 'pad', length: 2 } });
    expect(key6.size).toBe(20);
    const b = key6.encode({ addr: 'FD00:0:0::0010', port: 80 });
    expect(b.toString('hex')).toBe('fd000000000000000000000000000010' + '0050' + '0000');
    expect(key6.decode(b)).toEqual({ addr: 'fd00::10', port: 80 });
    expect(key6.decode(key6.encode({ addr: '::ffff:10.0.0.1', port: 1 })).addr).toBe('::ffff:a00:1');
    for (const bad of ['10.0.0.1', 'fe80::1%eth0', 'fd00::g']) expect(() => key6.encode({ addr: bad, port: 1 })).toThrow(/not an IPv6 address/);
  });

  it('encodes into a larger buffer at an offset', () => {
    const b = Buffer.alloc(20, 0xff);
    flowKey.encode({ addr: '1.2.3.4', port: 1, proto: 17 }, b, 4);
    expect(flowKey.decode(b, 4)).toEqual({ addr: '1.2.3.4', port: 1, proto: 17 });
    expect(b[11]).toBe(0); // padding is zeroed, so equal keys hash equally
  });

  it('refuses out-of-range values and short buffers', () => {
    expect(() => flowKey.encode({ addr: '10.0.0.1', port: 70000, proto: 6 })).toThrow(/70000 is out of range for be16/);
    expect(() => flowKey.encode({ addr: '10.0.0.300', port: 1, proto: 6 })).toThrow(/not an IPv4 address/);
    expect(() => flowKey.decode(Buffer.alloc(7))).toThrow(/got 7 bytes, need 8/);
    expect(() => u32Codec.encode(-1)).toThrow(/out of range/);
  });

  it('refuses implicit padding: every hole must be declared as in the C header', () => {
    expect(() => structCodec('bad', { a: { type: 'u8' }, b: { type: 'u32' } })).toThrow(/field b at offset 1 is not 4-byte aligned/);
    expect(() => structCodec('bad', { a: { type: 'u64' }, b: { type: 'u8' } })).toThrow(/size 9 is not a multiple of 8/);
  });

  it('handles u64 as bigint and raw bytes', () => {
    const c = structCodec('v', { mac: { type: 'bytes', length: 6 }, pad: { type: 'pad', length: 2 }, n: { type: 'u64' } });
    const b = c.encode({ mac: Buffer.from([1, 2, 3, 4, 5, 6]), n: 2n ** 63n });
    expect(c.decode(b)).toEqual({ mac: Buffer.from([1, 2, 3, 4, 5, 6]), n: 2n ** 63n });
  });

  it('handles __u32 arrays: 4-byte aligned, short lists filled with zeros, too long or out of range refused', () => {
    const c = structCodec('m', { n: { type: 'u16' }, pad: { type: 'pad', length: 2 }, ids: { type: 'u32s', count: 3 } });
    expect(c.size).toBe(16);
    expect(c.offsetOf!('ids')).toBe(4);
    const b = c.encode({ n: 1, ids: [7, 2 ** 32 - 1] });
    expect([...b.subarray(4)]).toEqual([7, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 0]);
    expect(c.decode(b)).toEqual({ n: 1, ids: [7, 2 ** 32 - 1, 0] });
    expect(() => c.encode({ n: 1, ids: [1, 2, 3, 4] })).toThrow(/4 numbers do not fit in 3/);
    expect(() => c.encode({ n: 1, ids: [-1] })).toThrow(/out of range/);
    expect(c.numberReader!('ids')).toBeUndefined();
    expect(() => structCodec('odd', { b: { type: 'u8' }, ids: { type: 'u32s', count: 1 } })).toThrow(/not 4-byte aligned/);
  });

  it('holds a struct in a struct: laid out at its alignment, encoded and decoded whole, a missing one zeroed', () => {
    const outer = structCodec('test_outer', { tag: { type: 'u8' }, pad: { type: 'pad', length: 3 }, key: { type: 'struct', codec: flowKey }, n: { type: 'u32' } });
    expect(outer.size).toBe(16);
    expect(outer.offsetOf!('key')).toBe(4);
    const b = outer.encode({ tag: 1, key: { addr: '10.96.0.1', port: 443, proto: 6 }, n: 5 });
    expect(b.subarray(4, 12).toString('hex')).toBe('0a60000101bb0600');
    expect(outer.decode(b)).toEqual({ tag: 1, key: { addr: '10.96.0.1', port: 443, proto: 6 }, n: 5 });
    expect(outer.decode(outer.encode({ tag: 2, n: 0 } as never)).key).toEqual({ addr: '0.0.0.0', port: 0, proto: 0 });
    // Its alignment is its widest member's: a u64 inside puts it on 8 bytes.
    const wide = structCodec('test_wide', { n: { type: 'u64' } });
    expect(() => structCodec('bad', { tag: { type: 'u32' }, w: { type: 'struct', codec: wide } })).toThrow(/field w at offset 4 is not 8-byte aligned/);
  });
});

describe('field readers', () => {
  it('read one numeric field of a struct at an offset as decode() reads it (an address as its number)', () => {
    const c = structCodec('mixed', { a: { type: 'ipv4' }, b: { type: 'be16' }, c: { type: 'u8' }, d: { type: 'u8' }, g: { type: 'u32' }, e: { type: 'u16' }, pad: { type: 'pad', length: 2 }, f: { type: 'i32' }, pad2: { type: 'pad', length: 4 }, h: { type: 'u64' }, mac: { type: 'bytes', length: 8 } });
    const value = { a: '10.96.255.1', b: 65_000, c: 6, d: 255, e: 40_000, f: -7, g: 4_000_000_000, h: 5n, mac: Buffer.alloc(8, 1) };
    const buf = Buffer.alloc(c.size + 5, 0xee);
    c.encode(value, buf, 5);
    expect(c.numberReader!('a')!(buf, 5)).toBe(ipv4FromString('10.96.255.1'));
    for (const f of ['b', 'c', 'd', 'e', 'f', 'g'] as const) expect(c.numberReader!(f)!(buf, 5)).toBe(value[f]);
    // Not numbers it could read exactly, or not fields at all.
    for (const f of ['pad', 'pad2', 'h', 'mac', 'nope']) expect(c.numberReader!(f)).toBeUndefined();
  });
});

describe('helpers', () => {
  it('converts names to C style', () => {
    expect(snakeCase('revNatId')).toBe('rev_nat_id');
    expect(snakeCase('packets')).toBe('packets');
  });
  it('converts IPv4 addresses both ways', () => {
    expect(ipv4ToString(ipv4FromString('255.0.10.1'))).toBe('255.0.10.1');
    expect(ipv4FromString('10.0.0.1')).toBe(0x0a000001);
    for (const bad of ['1.2.3', '1.2.3.4.5', '1..2.3', '1234.1.1.1', '1.2.3.', '.1.2.3', ' 1.2.3.4', '1.2.3.256', '1.2.3.4a', '', '1.2.3.-4']) {
      expect(() => ipv4FromString(bad), bad).toThrow(/not an IPv4 address/);
    }
  });
});
