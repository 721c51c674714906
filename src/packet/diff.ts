// Compare two packets layer by layer and field by field: what a failing fixture prints.
import { decodePacket, type DecodedLayer } from './decode.js';

export interface PacketDiff {
  equal: boolean;
  /** One line per difference: `ipv4.dst: expected 10.244.1.5, got 10.0.30.21`. */
  lines: string[];
}

export function diffPackets(expected: Buffer, actual: Buffer, start: 'eth' | 'ipv4' | 'ipv6' = 'eth'): PacketDiff {
  if (expected.equals(actual)) return { equal: true, lines: [] };
  const e = decodePacket(expected, start);
  const a = decodePacket(actual, start);
  const lines: string[] = [];
  const n = Math.max(e.length, a.length);
  for (let i = 0; i < n; i++) {
    const le = e[i];
    const la = a[i];
    if (!le || !la || le.name !== la.name) {
      lines.push(`layer ${i}: expected ${le?.name ?? 'nothing'}, got ${la?.name ?? 'nothing'}`);
      continue;
    }
    const keys = new Set([...Object.keys(le.fields), ...Object.keys(la.fields)]);
    for (const k of keys) {
      if (le.fields[k] !== la.fields[k]) lines.push(`${le.name}.${k}: expected ${String(le.fields[k])}, got ${String(la.fields[k])}`);
    }
  }
  if (expected.length !== actual.length) lines.push(`length: expected ${expected.length} bytes, got ${actual.length}`);
  if (lines.length === 0) lines.push(firstByteDifference(expected, actual));
  return { equal: false, lines };
}

function firstByteDifference(a: Buffer, b: Buffer): string {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    if (a[i] !== b[i]) return `byte ${i}: expected 0x${a[i]!.toString(16)}, got 0x${b[i]!.toString(16)}`;
  }
  return 'bytes differ';
}

/** Layers as readable lines, for explain output and failure messages. */
export function formatLayers(layers: DecodedLayer[]): string {
  return layers.map((l) => `${l.name}: ${Object.entries(l.fields).map(([k, v]) => `${k}=${String(v)}`).join(' ')}`).join('\n');
}
