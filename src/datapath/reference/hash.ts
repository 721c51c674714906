// The backend-selection hash, exactly as bpf/lib/hash.h computes it: raw network-order
// words read as little-endian integers, lookup3's final() mix, a cluster-wide seed.

const HASH_INIT = 0xdeadbeef;

const rol32 = (w: number, s: number) => ((w << s) | (w >>> (32 - s))) >>> 0;

export function hashFinal(a: number, b: number, c: number): number {
  a >>>= 0;
  b >>>= 0;
  c >>>= 0;
  c = (c ^ b) >>> 0; c = (c - rol32(b, 14)) >>> 0;
  a = (a ^ c) >>> 0; a = (a - rol32(c, 11)) >>> 0;
  b = (b ^ a) >>> 0; b = (b - rol32(a, 25)) >>> 0;
  c = (c ^ b) >>> 0; c = (c - rol32(b, 16)) >>> 0;
  a = (a ^ c) >>> 0; a = (a - rol32(c, 4)) >>> 0;
  b = (b ^ a) >>> 0; b = (b - rol32(a, 14)) >>> 0;
  c = (c ^ b) >>> 0; c = (c - rol32(b, 24)) >>> 0;
  return c;
}

/** The u32 a CPU reads from an IPv4 address's 4 network-order bytes (little-endian host). */
export function rawAddr(ip: string): number {
  const p = ip.split('.').map(Number);
  return (p[0]! | (p[1]! << 8) | (p[2]! << 16) | (p[3]! << 24)) >>> 0;
}

/** The u16 a CPU reads from a port's 2 network-order bytes. */
export function rawPort(port: number): number {
  return ((port >>> 8) | ((port & 0xff) << 8)) & 0xffff;
}

export function flowHash4(saddr: string, daddr: string, sport: number, dport: number, proto: number, seed: number): number {
  const init = (HASH_INIT + seed) >>> 0;
  return hashFinal(
    (rawAddr(saddr) + init) >>> 0,
    (rawAddr(daddr) + init) >>> 0,
    ((rawPort(sport) | (rawPort(dport) << 16)) + proto + init) >>> 0,
  );
}
