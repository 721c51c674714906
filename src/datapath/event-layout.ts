// The records `ferry monitor` reads from the ferry_events ring buffer (struct ferry_event,
// bpf/shared/events.h; its codec is checked against the objects' BTF by the contract
// test), and the addresses in them as text.
import { structCodec, ipv4ToString } from '../ebpf/codec.js';
import { ipv6Text } from '../packet/addr.js';
import { ErrorCode, FerryError } from '../errors.js';

const address16 = { type: 'bytes', length: 16 } as const;

/** An address of either family: IPv6 whole, IPv4 in the first 4 bytes (`family` says which). */
export const eventCodec = structCodec('ferry_event', {
  tsNs: { type: 'u64' },
  type: { type: 'u32' },
  reason: { type: 'u32' },
  saddr: address16,
  daddr: address16,
  outSaddr: address16,
  outDaddr: address16,
  sport: { type: 'be16' },
  dport: { type: 'be16' },
  outSport: { type: 'be16' },
  outDport: { type: 'be16' },
  proto: { type: 'u8' },
  hook: { type: 'u8' },
  family: { type: 'u8' },
  pad: { type: 'pad', length: 1 },
  ifindex: { type: 'u32' },
  verdict: { type: 'u32' },
  pad2: { type: 'pad', length: 4 },
});
export type FerryEvent = ReturnType<typeof eventCodec.decode>;

/** The record of datapaths before IPv6 events (to 2026-12-07): IPv4 only, 56 bytes. A
 * monitor of this build on a node whose agent is older reads those. */
const eventV1Codec = structCodec('ferry_event', {
  tsNs: { type: 'u64' },
  type: { type: 'u32' },
  reason: { type: 'u32' },
  saddr: { type: 'bytes', length: 4 },
  daddr: { type: 'bytes', length: 4 },
  sport: { type: 'be16' },
  dport: { type: 'be16' },
  proto: { type: 'u8' },
  hook: { type: 'u8' },
  pad: { type: 'pad', length: 2 },
  outSaddr: { type: 'bytes', length: 4 },
  outDaddr: { type: 'bytes', length: 4 },
  outSport: { type: 'be16' },
  outDport: { type: 'be16' },
  ifindex: { type: 'u32' },
  verdict: { type: 'u32' },
  pad2: { type: 'pad', length: 4 },
});

const widened = (b: Buffer) => Buffer.concat([b, Buffer.alloc(12)]);

/** One ring buffer record, of this layout or the one before. */
export function decodeEvent(data: Buffer): FerryEvent {
  if (data.length === eventCodec.size) return eventCodec.decode(data);
  if (data.length === eventV1Codec.size) {
    const e = eventV1Codec.decode(data);
    return { ...e, saddr: widened(e.saddr), daddr: widened(e.daddr), outSaddr: widened(e.outSaddr), outDaddr: widened(e.outDaddr), family: 4 };
  }
  throw new FerryError({ code: ErrorCode.Codec, op: 'decode a datapath event', cause: `a record of ${data.length} bytes, not ${eventCodec.size}`, hint: 'the agent and this ferry are of builds too far apart: use the ferry of the agent\'s image' });
}

/** An event's address as text, by its family. */
export function addressText(family: number, addr: Buffer): string {
  return family === 6 ? ipv6Text(addr) : ipv4ToString(addr.readUInt32BE(0));
}

/** An event's address and port as text: `10.0.0.1:80`, `[fd00::1]:80`. */
export function endpointText(family: number, addr: Buffer, port: number): string {
  return family === 6 ? `[${ipv6Text(addr)}]:${port}` : `${addressText(family, addr)}:${port}`;
}
