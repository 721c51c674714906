// Decode packet bytes into named layers and fields, for diffs, `ferry explain` and tests.
// Checksums are decoded and also verified, so a diff shows a wrong checksum by name.
import { ipv4Text, ipv6Text, macText } from './addr.js';
import { checksum, pseudo4, pseudo6 } from './checksum.js';
import { EtherType, IpProto, tcpFlagBits } from './build.js';

export type FieldValue = string | number | boolean;

export interface DecodedLayer {
  /** eth, ipv4, ipv6, tcp, udp, icmp, icmp6, payload, or "inner ipv4" and so on inside ICMP errors and tunnels. */
  name: string;
  fields: Record<string, FieldValue>;
}

function tcpFlagText(f: number): string {
  return Object.entries(tcpFlagBits).filter(([, bit]) => f & bit).map(([c]) => c).join('') || '.';
}

/** Decode an Ethernet frame (or, with `start: 'ipv4'|'ipv6'`, a bare IP packet). */
export function decodePacket(buf: Buffer, start: 'eth' | 'ipv4' | 'ipv6' = 'eth'): DecodedLayer[] {
  const out: DecodedLayer[] = [];
  let off = 0;
  let kind: string = start;
  let prefix = '';
  let ipSrc: Buffer | undefined;
  let ipDst: Buffer | undefined;
  let v6 = false;
  /** Inside an ICMP error's quote, which is usually cut short: no checksum verdicts. */
  let quoted = false;
  let fragmented = false;
  let ipEnd = buf.length;

  const rest = () => {
    if (off < Math.min(buf.length, ipEnd)) out.push({ name: `${prefix}payload`, fields: { length: Math.min(buf.length, ipEnd) - off, hex: buf.subarray(off, Math.min(buf.length, ipEnd)).toString('hex') } });
  };

  for (let guard = 0; guard < 8; guard++) {
    if (kind === 'eth') {
      if (buf.length - off < 14) return rest(), out;
      const type = buf.readUInt16BE(off + 12);
      out.push({ name: 'eth', fields: { dst: macText(buf.subarray(off)), src: macText(buf.subarray(off + 6)), type: `0x${type.toString(16).padStart(4, '0')}` } });
      off += 14;
      kind = type === EtherType.IPv4 ? 'ipv4' : type === EtherType.IPv6 ? 'ipv6' : type === EtherType.ARP ? 'arp' : 'payload';
    } else if (kind === 'arp') {
      if (buf.length - off < 28) return rest(), out;
      out.push({
        name: 'arp',
        fields: {
          htype: buf.readUInt16BE(off), ptype: `0x${buf.readUInt16BE(off + 2).toString(16).padStart(4, '0')}`, hlen: buf[off + 4]!, plen: buf[off + 5]!,
          op: buf.readUInt16BE(off + 6), sha: macText(buf.subarray(off + 8)), spa: ipv4Text(buf.subarray(off + 14)), tha: macText(buf.subarray(off + 18)), tpa: ipv4Text(buf.subarray(off + 24)),
        },
      });
      off += 28;
      kind = 'payload';
    } else if (kind === 'ipv4') {
      if (buf.length - off < 20) return rest(), out;
      const ihl = (buf[off]! & 0x0f) * 4;
      const total = buf.readUInt16BE(off + 2);
      const proto = buf[off + 9]!;
      const hdr = buf.subarray(off, off + ihl);
      const frag = buf.readUInt16BE(off + 6);
      ipSrc = buf.subarray(off + 12, off + 16);
      ipDst = buf.subarray(off + 16, off + 20);
      v6 = false;
      out.push({
        name: `${prefix}ipv4`,
        fields: {
          src: ipv4Text(ipSrc), dst: ipv4Text(ipDst), ihl, tos: buf[off + 1]!, totalLength: total,
          id: buf.readUInt16BE(off + 4), df: (frag & 0x4000) !== 0, fragOffset: frag & 0x1fff,
          ttl: buf[off + 8]!, protocol: proto, checksum: `0x${buf.readUInt16BE(off + 10).toString(16).padStart(4, '0')}`,
          checksumValid: checksum(hdr) === 0, ...(ihl > 20 ? { options: buf.subarray(off + 20, off + ihl).toString('hex') } : {}),
        },
      });
      ipEnd = Math.min(buf.length, off + total);
      off += ihl;
      // A fragment holds part of a datagram: a later one no L4 header at all, a first one a
      // header whose checksum covers bytes it does not hold.
      fragmented = (frag & 0x3fff) !== 0;
      kind = (frag & 0x1fff) !== 0 ? 'payload' : proto === IpProto.TCP ? 'tcp' : proto === IpProto.UDP ? 'udp' : proto === IpProto.ICMP ? 'icmp' : proto === IpProto.IPIP ? 'inner-ipv4' : 'payload';
    } else if (kind === 'inner-ipv4') {
      prefix = `${prefix}inner `;
      kind = 'ipv4';
    } else if (kind === 'ipv6') {
      if (buf.length - off < 40) return rest(), out;
      const next = buf[off + 6]!;
      const plen = buf.readUInt16BE(off + 4);
      ipSrc = buf.subarray(off + 8, off + 24);
      ipDst = buf.subarray(off + 24, off + 40);
      v6 = true;
      out.push({ name: `${prefix}ipv6`, fields: { src: ipv6Text(ipSrc), dst: ipv6Text(ipDst), payloadLength: plen, nextHeader: next, hopLimit: buf[off + 7]!, flowLabel: buf.readUInt32BE(off) & 0xfffff } });
      ipEnd = Math.min(buf.length, off + 40 + plen);
      off += 40;
      kind = next === IpProto.TCP ? 'tcp' : next === IpProto.UDP ? 'udp' : next === IpProto.ICMPv6 ? 'icmp6' : 'payload';
    } else if (kind === 'tcp' || kind === 'udp' || kind === 'icmp' || kind === 'icmp6') {
      const seg = buf.subarray(off, ipEnd);
      const proto = kind === 'tcp' ? IpProto.TCP : kind === 'udp' ? IpProto.UDP : kind === 'icmp' ? IpProto.ICMP : IpProto.ICMPv6;
      const whole = !quoted && !fragmented && ipSrc && ipDst;
      const ps = kind === 'icmp' ? 0 : ipSrc && ipDst ? (v6 ? pseudo6(ipSrc, ipDst, proto, seg.length) : pseudo4(ipSrc, ipDst, proto, seg.length)) : 0;
      if (kind === 'tcp') {
        if (quoted && seg.length >= 8 && seg.length < 20) {
          // ICMP errors need only quote 8 bytes: ports and sequence number.
          out.push({ name: `${prefix}tcp`, fields: { sport: seg.readUInt16BE(0), dport: seg.readUInt16BE(2), seq: seg.readUInt32BE(4) } });
          off += 8;
          return rest(), out;
        }
        if (seg.length < 20) return rest(), out;
        const doff = (seg[12]! >> 4) * 4;
        out.push({
          name: `${prefix}tcp`,
          fields: {
            sport: seg.readUInt16BE(0), dport: seg.readUInt16BE(2), seq: seg.readUInt32BE(4), ack: seg.readUInt32BE(8),
            flags: tcpFlagText(seg[13]!), window: seg.readUInt16BE(14), checksum: `0x${seg.readUInt16BE(16).toString(16).padStart(4, '0')}`,
            ...(whole ? { checksumValid: checksum(seg, ps) === 0 } : {}),
            ...(doff > 20 ? { options: seg.subarray(20, doff).toString('hex') } : {}),
          },
        });
        off += doff;
      } else if (kind === 'udp') {
        if (seg.length < 8) return rest(), out;
        const c = seg.readUInt16BE(6);
        out.push({
          name: `${prefix}udp`,
          fields: { sport: seg.readUInt16BE(0), dport: seg.readUInt16BE(2), length: seg.readUInt16BE(4), checksum: `0x${c.toString(16).padStart(4, '0')}`, ...(whole && c !== 0 ? { checksumValid: checksum(seg, ps) === 0 } : {}) },
        });
        off += 8;
      } else {
        if (seg.length < 8) return rest(), out;
        const type = seg[0]!;
        out.push({
          name: `${prefix}${kind}`,
          fields: { type, code: seg[1]!, rest: seg.readUInt32BE(4), checksum: `0x${seg.readUInt16BE(2).toString(16).padStart(4, '0')}`, ...(!quoted ? { checksumValid: checksum(seg, ps) === 0 } : {}) },
        });
        off += 8;
        // Errors quote the offending packet: decode it as an inner layer.
        const isError = kind === 'icmp' ? [3, 4, 5, 11, 12].includes(type) : type < 128;
        if (isError && !quoted) {
          quoted = true;
          prefix = `${prefix}inner `;
          kind = kind === 'icmp' ? 'ipv4' : 'ipv6';
          ipEnd = buf.length;
          continue;
        }
      }
      return rest(), out;
    } else {
      return rest(), out;
    }
  }
  return rest(), out;
}
