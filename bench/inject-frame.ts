// The settings of bpf/tests/xdp_inject.bpf.c (bench/pps-node.ts's packet source): the
// frame's constant parts, with the checksums precomputed so that the program only adds
// each frame's source port.
import { ipv4Bytes, macBytes } from '../src/packet/addr.js';

export interface InjectedFlow {
  proto: 'udp' | 'tcp';
  srcMac: string;
  dstMac: string;
  saddr: string;
  daddr: string;
  dport: number;
}

/** The frame is 60 bytes: Ethernet 14, IPv4 20, and 26 of L4 header and zeros. */
export const FRAME_LEN = 60;
const L4_LEN = FRAME_LEN - 14 - 20;

/** One's complement sum of big-endian 16-bit words, folded to 16 bits. */
export function onesSum(buf: Buffer, start = 0): number {
  let s = start;
  for (let i = 0; i + 1 < buf.length; i += 2) s += buf.readUInt16BE(i);
  if (buf.length % 2) s += buf[buf.length - 1]! << 8;
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}

/** A __be32 / __be16 .rodata constant: the number whose little-endian bytes are the network order ones. */
export const be32Constant = (ip: string): number => ipv4Bytes(ip).readUInt32LE(0);
export const be16Constant = (n: number): number => Buffer.from([n >> 8, n & 255]).readUInt16LE(0);

/** The IPv4 header and the L4 header (source port 0, checksum 0) every frame shares. */
export function frameTemplate(f: InjectedFlow): { ip: Buffer; l4: Buffer } {
  const ip = Buffer.alloc(20);
  ip[0] = 0x45;
  ip.writeUInt16BE(20 + L4_LEN, 2);
  ip[8] = 64;
  ip[9] = f.proto === 'udp' ? 17 : 6;
  ipv4Bytes(f.saddr).copy(ip, 12);
  ipv4Bytes(f.daddr).copy(ip, 16);
  ip.writeUInt16BE(~onesSum(ip) & 0xffff, 10);
  const l4 = Buffer.alloc(L4_LEN);
  l4.writeUInt16BE(f.dport, 2);
  if (f.proto === 'udp') {
    l4.writeUInt16BE(L4_LEN, 4);
  } else {
    l4[12] = 5 << 4; // data offset: 5 words
    l4[13] = 0x02; // SYN
    l4.writeUInt16BE(64240, 14);
  }
  return { ip, l4 };
}

/** The program's .rodata constants for a flow. */
export function injectorSettings(f: InjectedFlow): Record<string, number | Buffer> {
  const { ip, l4 } = frameTemplate(f);
  const pseudo = Buffer.alloc(12);
  ip.copy(pseudo, 0, 12, 20);
  pseudo[9] = ip[9]!;
  pseudo.writeUInt16BE(L4_LEN, 10);
  return {
    dst_mac: macBytes(f.dstMac),
    src_mac: macBytes(f.srcMac),
    saddr: be32Constant(f.saddr),
    daddr: be32Constant(f.daddr),
    dport: be16Constant(f.dport),
    proto: ip[9]!,
    ip_check: be16Constant(ip.readUInt16BE(10)),
    l4_sum_base: be16Constant(onesSum(l4, onesSum(pseudo))),
  };
}
