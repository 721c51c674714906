// A packet builder for fixtures, `ferry explain`, benchmarks and the agent's gratuitous
// ARP: Ethernet, ARP, IPv4, IPv6, TCP, UDP, ICMP and ICMPv6, with lengths and checksums
// filled in unless given explicitly.
import { ipv4Bytes, ipv6Bytes, macBytes } from './addr.js';
import { checksum, pseudo4, pseudo6 } from './checksum.js';

export const EtherType = { IPv4: 0x0800, IPv6: 0x86dd, ARP: 0x0806 } as const;
export const IpProto = { ICMP: 1, TCP: 6, UDP: 17, IPIP: 4, ICMPv6: 58, SCTP: 132 } as const;

export interface EthLayer { layer: 'eth'; src?: string; dst?: string; type?: number }
export interface Ipv4Layer {
  layer: 'ipv4'; src: string; dst: string; ttl?: number; id?: number; tos?: number;
  /** Don't-fragment flag (default set, as Linux sends TCP). */
  df?: boolean; protocol?: number; checksum?: number; totalLength?: number;
  /** IPv4 options, padded to a multiple of 4 bytes. */
  options?: Buffer;
}
export interface Ipv6Layer { layer: 'ipv6'; src: string; dst: string; hopLimit?: number; nextHeader?: number; flowLabel?: number; payloadLength?: number }
export interface TcpLayer {
  layer: 'tcp'; sport: number; dport: number; seq?: number; ack?: number;
  /** Any of "SAFRPU", e.g. "S" for SYN, "SA" for SYN-ACK. */
  flags?: string; window?: number; checksum?: number;
  /** Raw TCP options, padded to a multiple of 4 bytes (e.g. an MSS option). */
  options?: Buffer;
}
export interface UdpLayer { layer: 'udp'; sport: number; dport: number; checksum?: number; length?: number }
export interface IcmpLayer {
  layer: 'icmp'; type: number; code?: number;
  /** Echo id/sequence, or for "fragmentation needed" the next-hop MTU in the low 16 bits. */
  rest?: number; checksum?: number;
}
export interface Icmp6Layer { layer: 'icmp6'; type: number; code?: number; rest?: number; checksum?: number }
export interface PayloadLayer { layer: 'payload'; data: Buffer | string }
/** ARP for IPv4 over Ethernet (RFC 826): op 1 request, 2 reply. */
export interface ArpLayer { layer: 'arp'; op: 1 | 2; sha: string; spa: string; tha?: string; tpa: string }

export const ArpOp = { Request: 1, Reply: 2 } as const;

export type Layer = EthLayer | ArpLayer | Ipv4Layer | Ipv6Layer | TcpLayer | UdpLayer | IcmpLayer | Icmp6Layer | PayloadLayer;

export const tcpFlagBits: Record<string, number> = { F: 0x01, S: 0x02, R: 0x04, P: 0x08, A: 0x10, U: 0x20 };

function tcpFlags(s: string | undefined): number {
  let f = 0;
  for (const c of s ?? '') {
    const bit = tcpFlagBits[c];
    if (bit === undefined) throw new Error(`tcp flag "${c}": use any of SAFRPU`);
    f |= bit;
  }
  return f;
}

/** The MSS TCP option (kind 2), padded. */
export function mssOption(mss: number): Buffer {
  const b = Buffer.alloc(4);
  b[0] = 2;
  b[1] = 4;
  b.writeUInt16BE(mss, 2);
  return b;
}

function pad4(b: Buffer | undefined): Buffer {
  if (!b || b.length === 0) return Buffer.alloc(0);
  const n = Math.ceil(b.length / 4) * 4;
  const out = Buffer.alloc(n); // zero padding is End-of-Options / NOPs-free
  b.copy(out);
  return out;
}

const nextProto: Record<string, number> = { tcp: IpProto.TCP, udp: IpProto.UDP, icmp: IpProto.ICMP, icmp6: IpProto.ICMPv6, ipv4: IpProto.IPIP };

/** Build the bytes of a stack of layers, outermost first. */
export function buildPacket(layers: readonly Layer[]): Buffer {
  return buildFrom(layers, 0);
}

function buildFrom(layers: readonly Layer[], i: number): Buffer {
  const l = layers[i];
  if (!l) return Buffer.alloc(0);
  const rest = () => buildFrom(layers, i + 1);
  const next = layers[i + 1];
  switch (l.layer) {
    case 'eth': {
      const h = Buffer.alloc(14);
      macBytes(l.dst ?? '02:00:00:00:00:02').copy(h, 0);
      macBytes(l.src ?? '02:00:00:00:00:01').copy(h, 6);
      h.writeUInt16BE(l.type ?? (next?.layer === 'ipv6' ? EtherType.IPv6 : next?.layer === 'arp' ? EtherType.ARP : EtherType.IPv4), 12);
      return Buffer.concat([h, rest()]);
    }
    case 'ipv4': {
      const opts = pad4(l.options);
      const body = rest();
      const h = Buffer.alloc(20 + opts.length);
      h[0] = 0x40 | ((20 + opts.length) / 4);
      h[1] = l.tos ?? 0;
      h.writeUInt16BE(l.totalLength ?? h.length + body.length, 2);
      h.writeUInt16BE(l.id ?? 0, 4);
      h.writeUInt16BE(l.df === false ? 0 : 0x4000, 6);
      h[8] = l.ttl ?? 64;
      h[9] = l.protocol ?? (next ? nextProto[next.layer] ?? 0 : 0);
      ipv4Bytes(l.src).copy(h, 12);
      ipv4Bytes(l.dst).copy(h, 16);
      opts.copy(h, 20);
      h.writeUInt16BE(l.checksum ?? checksum(h), 10);
      return Buffer.concat([h, transportChecksum(h, body, next)]);
    }
    case 'ipv6': {
      const body = rest();
      const h = Buffer.alloc(40);
      h.writeUInt32BE((6 << 28) | ((l.flowLabel ?? 0) & 0xfffff), 0);
      h.writeUInt16BE(l.payloadLength ?? body.length, 4);
      h[6] = l.nextHeader ?? (next ? nextProto[next.layer] ?? 59 : 59);
      h[7] = l.hopLimit ?? 64;
      ipv6Bytes(l.src).copy(h, 8);
      ipv6Bytes(l.dst).copy(h, 24);
      return Buffer.concat([h, transportChecksum(h, body, next)]);
    }
    case 'tcp': {
      const opts = pad4(l.options);
      const h = Buffer.alloc(20 + opts.length);
      h.writeUInt16BE(l.sport, 0);
      h.writeUInt16BE(l.dport, 2);
      h.writeUInt32BE((l.seq ?? 1) >>> 0, 4);
      h.writeUInt32BE((l.ack ?? 0) >>> 0, 8);
      h[12] = ((20 + opts.length) / 4) << 4;
      h[13] = tcpFlags(l.flags ?? 'S');
      h.writeUInt16BE(l.window ?? 64240, 14);
      h.writeUInt16BE(l.checksum ?? 0, 16);
      opts.copy(h, 20);
      return Buffer.concat([h, rest()]);
    }
    case 'udp': {
      const body = rest();
      const h = Buffer.alloc(8);
      h.writeUInt16BE(l.sport, 0);
      h.writeUInt16BE(l.dport, 2);
      h.writeUInt16BE(l.length ?? 8 + body.length, 4);
      h.writeUInt16BE(l.checksum ?? 0, 6);
      return Buffer.concat([h, body]);
    }
    case 'icmp':
    case 'icmp6': {
      const body = rest();
      const h = Buffer.alloc(8);
      h[0] = l.type;
      h[1] = l.code ?? 0;
      h.writeUInt32BE((l.rest ?? 0) >>> 0, 4);
      const msg = Buffer.concat([h, body]);
      if (l.layer === 'icmp') msg.writeUInt16BE(l.checksum ?? checksum(msg), 2);
      else if (l.checksum !== undefined) msg.writeUInt16BE(l.checksum, 2);
      return msg;
    }
    case 'arp': {
      const h = Buffer.alloc(28);
      h.writeUInt16BE(1, 0); // Ethernet
      h.writeUInt16BE(EtherType.IPv4, 2);
      h[4] = 6;
      h[5] = 4;
      h.writeUInt16BE(l.op, 6);
      macBytes(l.sha).copy(h, 8);
      ipv4Bytes(l.spa).copy(h, 14);
      macBytes(l.tha ?? '00:00:00:00:00:00').copy(h, 18);
      ipv4Bytes(l.tpa).copy(h, 24);
      return Buffer.concat([h, rest()]);
    }
    case 'payload':
      return Buffer.concat([typeof l.data === 'string' ? Buffer.from(l.data) : l.data, rest()]);
  }
}

/**
 * A gratuitous ARP announcing that `ip` is at `mac`: a broadcast request whose sender and
 * target address are both `ip` (the form Linux and most routers update their caches from).
 */
export function gratuitousArp(mac: string, ip: string): Buffer {
  return buildPacket([{ layer: 'eth', src: mac, dst: 'ff:ff:ff:ff:ff:ff', type: EtherType.ARP }, { layer: 'arp', op: ArpOp.Request, sha: mac, spa: ip, tha: '00:00:00:00:00:00', tpa: ip }]);
}

/** Fill the TCP/UDP/ICMPv6 checksum of `body` (whose checksum field is zero unless given). */
function transportChecksum(ipHeader: Buffer, body: Buffer, next: Layer | undefined): Buffer {
  if (!next || body.length === 0) return body;
  const v6 = (ipHeader[0]! >> 4) === 6;
  const src = v6 ? ipHeader.subarray(8, 24) : ipHeader.subarray(12, 16);
  const dst = v6 ? ipHeader.subarray(24, 40) : ipHeader.subarray(16, 20);
  const ps = (proto: number) => (v6 ? pseudo6(src, dst, proto, body.length) : pseudo4(src, dst, proto, body.length));
  const out = Buffer.from(body);
  if (next.layer === 'tcp' && next.checksum === undefined) {
    out.writeUInt16BE(checksum(out, ps(IpProto.TCP)), 16);
  } else if (next.layer === 'udp' && next.checksum === undefined) {
    const c = checksum(out, ps(IpProto.UDP));
    out.writeUInt16BE(c === 0 ? 0xffff : c, 6);
  } else if (next.layer === 'icmp6' && next.checksum === undefined) {
    out.writeUInt16BE(checksum(out, ps(IpProto.ICMPv6)), 2);
  }
  return out;
}

// Shorthands that read like the packet: eth(), ipv4(...), tcp(...).
export const eth = (o: Omit<EthLayer, 'layer'> = {}): EthLayer => ({ layer: 'eth', ...o });
export const ipv4 = (o: Omit<Ipv4Layer, 'layer'>): Ipv4Layer => ({ layer: 'ipv4', ...o });
export const ipv6 = (o: Omit<Ipv6Layer, 'layer'>): Ipv6Layer => ({ layer: 'ipv6', ...o });
export const tcp = (o: Omit<TcpLayer, 'layer'>): TcpLayer => ({ layer: 'tcp', ...o });
export const udp = (o: Omit<UdpLayer, 'layer'>): UdpLayer => ({ layer: 'udp', ...o });
export const icmp = (o: Omit<IcmpLayer, 'layer'>): IcmpLayer => ({ layer: 'icmp', ...o });
export const icmp6 = (o: Omit<Icmp6Layer, 'layer'>): Icmp6Layer => ({ layer: 'icmp6', ...o });
export const payload = (data: Buffer | string): PayloadLayer => ({ layer: 'payload', data });
export const arp = (o: Omit<ArpLayer, 'layer'>): ArpLayer => ({ layer: 'arp', ...o });

/**
 * Split an Ethernet + IPv4 frame into IPv4 fragments (RFC 791) whose IP packets fit
 * `mtu`: each with the original header (options too, on every fragment, as the copied
 * options ferry uses are), offsets in 8-byte units, MF on all but the last, checksums fixed.
 */
export function fragment(frame: Buffer, mtu: number): Buffer[] {
  const eth = frame.subarray(0, 14);
  const ihl = (frame[14]! & 0x0f) * 4;
  const header = frame.subarray(14, 14 + ihl);
  const data = frame.subarray(14 + ihl);
  const step = Math.floor((mtu - ihl) / 8) * 8;
  if (step <= 0) throw new Error(`fragment: MTU ${mtu} leaves no room after a ${ihl}-byte header`);
  const out: Buffer[] = [];
  for (let off = 0; off < data.length; off += step) {
    const part = data.subarray(off, Math.min(off + step, data.length));
    const h = Buffer.from(header);
    const more = off + step < data.length;
    h.writeUInt16BE(ihl + part.length, 2);
    h.writeUInt16BE((more ? 0x2000 : 0) | (off / 8), 6); // DF cleared: it is fragmented
    h.writeUInt16BE(0, 10);
    h.writeUInt16BE(checksum(h), 10);
    out.push(Buffer.concat([eth, h, part]));
  }
  return out;
}

/**
 * Split an Ethernet + IPv6 frame (no extension headers) into fragments (RFC 8200 4.5)
 * whose IPv6 packets fit `mtu`: each the original header with next header 44, then a
 * Fragment header (the original next header, the offset in 8-byte units, M on all but the
 * last, identification `id`), then its part of the original payload.
 */
export function fragment6(frame: Buffer, mtu: number, id: number): Buffer[] {
  const eth = frame.subarray(0, 14);
  const header = frame.subarray(14, 54);
  const data = frame.subarray(54);
  const step = Math.floor((mtu - 48) / 8) * 8;
  if (step <= 0) throw new Error(`fragment6: MTU ${mtu} leaves no room after the headers`);
  const out: Buffer[] = [];
  for (let off = 0; off < data.length; off += step) {
    const part = data.subarray(off, Math.min(off + step, data.length));
    const h = Buffer.from(header);
    h.writeUInt16BE(8 + part.length, 4);
    h[6] = 44;
    const f = Buffer.alloc(8);
    f[0] = header[6]!;
    f.writeUInt16BE(off | (off + step < data.length ? 1 : 0), 2);
    f.writeUInt32BE(id >>> 0, 4);
    out.push(Buffer.concat([eth, h, f, part]));
  }
  return out;
}
