// IPv4 addresses as unsigned 32-bit integers, for address arithmetic in pools.
import { isIPv4 } from 'node:net';

export function ipToInt(ip: string): number {
  return ip.split('.').reduce((a, x) => a * 256 + Number(x), 0);
}

export function intToIp(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

/** `10.0.100.0/24` → [first, last], or why it is not an IPv4 network. */
export function parseCidr4(cidr: string): { range: [number, number] } | { error: string } {
  const m = /^(\d+\.\d+\.\d+\.\d+)\/(\d{1,2})$/.exec(cidr.trim());
  if (!m || !isIPv4(m[1]!) || Number(m[2]) > 32) return { error: `"${cidr}" is not an IPv4 CIDR` };
  const bits = Number(m[2]);
  const base = ipToInt(m[1]!);
  const size = 2 ** (32 - bits);
  if (base % size !== 0) return { error: `"${cidr}" is not a network: host bits are set (did you mean ${intToIp(base - (base % size))}/${bits}?)` };
  return { range: [base, base + size - 1] };
}

/** Addresses of [a, b] whose last octet is 0 or 255 (each /24's first and last). */
export function edgeAddresses(a: number, b: number): number {
  const count = (x: number, r: number) => (x < r ? 0 : Math.floor((x - r) / 256) + 1); // in [0, x] with x % 256 == r
  const between = (r: number) => count(b, r) - (a > 0 ? count(a - 1, r) : 0);
  return between(0) + between(255);
}

export const isEdge = (n: number) => (n & 255) === 0 || (n & 255) === 255;
