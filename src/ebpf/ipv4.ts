// IPv4 addresses between their dotted form and their 32-bit number (host order), as the
// codecs encode and decode them.
import { ErrorCode, FerryError } from '../errors.js';

function notIpv4(s: string): FerryError {
  return new FerryError({ code: ErrorCode.Codec, op: 'encode ipv4', cause: `"${s}" is not an IPv4 address` });
}

export function ipv4ToString(n: number): string {
  return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}
export function ipv4FromString(s: string): number {
  // By hand, character by character: the writer encodes hundreds of thousands of these.
  let n = 0;
  let part = 0;
  let digits = 0;
  let dots = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 48 && c <= 57) {
      part = part * 10 + (c - 48);
      if (++digits > 3 || part > 255) throw notIpv4(s);
    } else if (c === 46 && digits > 0 && dots < 3) {
      n = n * 256 + part;
      part = 0;
      digits = 0;
      dots++;
    } else {
      throw notIpv4(s);
    }
  }
  if (dots !== 3 || digits === 0) throw notIpv4(s);
  return n * 256 + part;
}
