// Structural comparison of two BTF types, such as a pinned map's key and the key the
// freshly compiled object expects. Names, sizes and offsets must all agree.
import { Btf, BtfKind } from './btf.js';

export function layoutDiff(a: Btf, aId: number, b: Btf, bId: number, path = ''): string[] {
  const ta = a.resolve(aId);
  const tb = b.resolve(bId);
  const where = path ? `field ${path}` : 'type';
  if (ta.kind !== tb.kind) return [`${where}: pinned ${a.describe(aId)}, object ${b.describe(bId)}`];
  const out: string[] = [];
  const sa = a.sizeOf(aId);
  const sb = b.sizeOf(bId);
  if (sa !== sb) out.push(`${where}: size pinned ${sa}, object ${sb}`);
  if ((ta.kind === BtfKind.Struct || ta.kind === BtfKind.Union) && (tb.kind === BtfKind.Struct || tb.kind === BtfKind.Union)) {
    const mb = new Map(tb.members.map((m) => [m.name, m]));
    for (const m of ta.members) {
      const other = mb.get(m.name);
      const field = path ? `${path}.${m.name}` : m.name;
      if (!other) {
        out.push(`field ${field}: in the pinned map, missing from the object`);
        continue;
      }
      mb.delete(m.name);
      if (m.bitOffset !== other.bitOffset) out.push(`field ${field}: offset pinned ${m.bitOffset / 8}, object ${other.bitOffset / 8}`);
      out.push(...layoutDiff(a, m.type, b, other.type, field));
    }
    for (const name of mb.keys()) out.push(`field ${path ? `${path}.${name}` : name}: in the object, missing from the pinned map`);
  } else if (ta.kind === BtfKind.Array && tb.kind === BtfKind.Array) {
    if (ta.nelems !== tb.nelems) out.push(`${where}: ${ta.nelems} elements pinned, ${tb.nelems} in the object`);
    out.push(...layoutDiff(a, ta.elemType, b, tb.elemType, `${path}[]`));
  } else if (ta.kind === BtfKind.Int && tb.kind === BtfKind.Int) {
    if (ta.signed !== tb.signed) out.push(`${where}: signedness differs`);
  }
  return out;
}
