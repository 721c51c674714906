// The generic-netlink answers xdpFeatures reads (test/bpf/xdp-egress-device.test.ts asks a
// real kernel): attributes by type, an error message's errno, and an attribute that runs
// past the message ends the walk instead of reading beyond it.
import { describe, expect, it } from 'vitest';
import { parseAnswer } from '../../src/sys/netdev-features.js';

function message(type: number, body: Buffer): Buffer {
  const m = Buffer.alloc(16 + body.length);
  m.writeUInt32LE(m.length, 0);
  m.writeUInt16LE(type, 4);
  body.copy(m, 16);
  return m;
}

function attr(type: number, payload: Buffer): Buffer {
  const a = Buffer.alloc((4 + payload.length + 3) & ~3);
  a.writeUInt16LE(4 + payload.length, 0);
  a.writeUInt16LE(type, 2);
  payload.copy(a, 4);
  return a;
}

describe('generic-netlink answers', () => {
  it('attributes by type, padded to 4 bytes, with the nested flag masked off', () => {
    const features = Buffer.alloc(8);
    features.writeBigUInt64LE(0x47n, 0);
    const ifindex = Buffer.from([7, 0, 0, 0]);
    const name = Buffer.from('netdev\0'); // 7 bytes: padded
    const body = Buffer.concat([Buffer.from([1, 1, 0, 0]), attr(2, name), attr(1 | 0x8000, ifindex), attr(3, features)]);
    const got = parseAnswer(message(0x20, body));
    expect(got).toBeInstanceOf(Map);
    const m = got as Map<number, Buffer>;
    expect(m.get(2)!.toString()).toBe('netdev\0');
    expect(m.get(1)!.readUInt32LE(0)).toBe(7);
    expect(m.get(3)!.readBigUInt64LE(0)).toBe(0x47n);
  });

  it("an error message gives its errno", () => {
    const err = Buffer.alloc(20);
    err.writeInt32LE(-19, 0); // ENODEV
    expect(parseAnswer(message(2, err))).toBe(19);
  });

  it('an attribute longer than the message ends the walk', () => {
    const body = Buffer.concat([Buffer.from([1, 1, 0, 0]), attr(1, Buffer.from([7, 0, 0, 0]))]);
    const m = message(0x20, body);
    m.writeUInt16LE(200, 20); // the attribute's length, past the end
    expect((parseAnswer(m) as Map<number, Buffer>).size).toBe(0);
  });

  it('a message shorter than its header is no answer', () => {
    expect(parseAnswer(Buffer.alloc(8))).toBe(71);
  });
});
