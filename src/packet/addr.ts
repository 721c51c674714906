// Address text ↔ bytes for packets: MAC, IPv4, IPv6.
import { isIPv4, isIPv6 } from 'node:net';

export function macBytes(mac: string): Buffer {
  const parts = mac.split(':');
  if (parts.length !== 6 || parts.some((p) => !/^[0-9a-fA-F]{2}$/.test(p))) throw new Error(`"${mac}" is not a MAC address`);
  return Buffer.from(parts.map((p) => parseInt(p, 16)));
}

export function macText(b: Uint8Array): string {
  return [...b.subarray(0, 6)].map((x) => x.toString(16).padStart(2, '0')).join(':');
}

export function ipv4Bytes(ip: string): Buffer {
  if (!isIPv4(ip)) throw new Error(`"${ip}" is not an IPv4 address`);
  return Buffer.from(ip.split('.').map(Number));
}

export function ipv4Text(b: Uint8Array): string {
  return [...b.subarray(0, 4)].join('.');
}

export function ipv6Bytes(ip: string): Buffer {
  // No zone (fe80::1%eth0 names an interface, not an address of a Service).
  if (!isIPv6(ip) || ip.includes('%')) throw new Error(`"${ip}" is not an IPv6 address`);
  // An IPv4 tail (::ffff:10.0.0.1) is its two last groups.
  const dotted = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(ip);
  if (dotted) {
    const v4 = ipv4Bytes(dotted[2]!);
    ip = `${dotted[1]}${v4.readUInt16BE(0).toString(16)}:${v4.readUInt16BE(2).toString(16)}`;
  }
  const [head, tail] = ip.includes('::') ? ip.split('::') : [ip, undefined];
  const h = head ? head.split(':') : [];
  const t = tail !== undefined && tail !== '' ? tail.split(':') : [];
  const groups = tail === undefined ? h : [...h, ...Array(8 - h.length - t.length).fill('0'), ...t];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  return out;
}

export function ipv6Text(b: Uint8Array): string {
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((b[i]! << 8) | b[i + 1]!).toString(16));
  // Compress the longest run of zero groups, as RFC 5952 asks.
  let best = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== '0') {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === '0') j++;
    if (j - i > bestLen && j - i > 1) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  if (best < 0) return groups.join(':');
  return `${groups.slice(0, best).join(':')}::${groups.slice(best + bestLen).join(':')}`;
}

/** Is an IPv4 address inside an IPv4 CIDR (`10.0.0.0/8`)? */
export function ipv4InCidr(ip: string, cidr: string): boolean {
  const [net, bits] = cidr.split('/');
  const n = Number(bits ?? 32);
  const toInt = (a: string) => a.split('.').reduce((acc, x) => acc * 256 + Number(x), 0);
  const mask = n === 0 ? 0 : (0xffffffff << (32 - n)) >>> 0;
  return ((toInt(ip) & mask) >>> 0) === ((toInt(net!) & mask) >>> 0);
}

/** An IPv6 address with the bits past `bits` cleared. */
export function ipv6Masked(ip: string, bits: number): Buffer {
  const b = ipv6Bytes(ip);
  for (let i = 0; i < 16; i++) {
    const keep = Math.max(0, Math.min(8, bits - i * 8));
    b[i]! &= (0xff << (8 - keep)) & 0xff;
  }
  return b;
}

/** Is an IPv6 address inside an IPv6 CIDR (`fd00::/8`)? */
export function ipv6InCidr(ip: string, cidr: string): boolean {
  const [net, bits] = cidr.split('/');
  const n = Number(bits ?? 128);
  return ipv6Masked(ip, n).equals(ipv6Masked(net!, n));
}
