// Internet checksums (RFC 1071) and the pseudo-headers TCP, UDP and ICMPv6 use.

/** One's-complement sum of 16-bit words, not yet folded or inverted. */
export function sum16(buf: Uint8Array, initial = 0): number {
  let s = initial;
  const n = buf.length & ~1;
  for (let i = 0; i < n; i += 2) s += (buf[i]! << 8) | buf[i + 1]!;
  if (buf.length & 1) s += buf[buf.length - 1]! << 8;
  return s;
}

export function fold(s: number): number {
  while (s > 0xffff) s = (s & 0xffff) + Math.floor(s / 0x10000);
  return s;
}

/** The checksum to store: folded and inverted. */
export function checksum(buf: Uint8Array, initial = 0): number {
  return ~fold(sum16(buf, initial)) & 0xffff;
}

/** Pseudo-header sum for IPv4 (src, dst, protocol, length). */
export function pseudo4(src: Buffer, dst: Buffer, protocol: number, length: number): number {
  return sum16(src) + sum16(dst) + protocol + length;
}

/** Pseudo-header sum for IPv6 (src, dst, upper-layer length, next header). */
export function pseudo6(src: Buffer, dst: Buffer, nextHeader: number, length: number): number {
  return sum16(src) + sum16(dst) + Math.floor(length / 0x10000) + (length & 0xffff) + nextHeader;
}
