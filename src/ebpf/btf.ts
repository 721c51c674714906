// A reader for BTF, the kernel's type format: the single source of truth for every layout
// shared between the C datapath and TypeScript. Pure: bytes in, types out.
import { ErrorCode, FerryError } from '../errors.js';

export const BtfKind = {
  Unknown: 0, Int: 1, Ptr: 2, Array: 3, Struct: 4, Union: 5, Enum: 6, Fwd: 7, Typedef: 8,
  Volatile: 9, Const: 10, Restrict: 11, Func: 12, FuncProto: 13, Var: 14, Datasec: 15,
  Float: 16, DeclTag: 17, TypeTag: 18, Enum64: 19,
} as const;

export interface BtfMember {
  name: string;
  type: number;
  /** Offset in bits from the start of the struct. */
  bitOffset: number;
  /** Non-zero only for bitfields (kind_flag set). Shared structs must have none. */
  bitfieldSize: number;
}
export interface BtfEnumValue {
  name: string;
  value: bigint;
}
export interface BtfVarSecinfo {
  type: number;
  offset: number;
  size: number;
}

export type BtfType =
  | { kind: typeof BtfKind.Int; id: number; name: string; size: number; signed: boolean; bits: number }
  | { kind: typeof BtfKind.Ptr | typeof BtfKind.Typedef | typeof BtfKind.Volatile | typeof BtfKind.Const | typeof BtfKind.Restrict | typeof BtfKind.TypeTag; id: number; name: string; type: number }
  | { kind: typeof BtfKind.Array; id: number; name: string; elemType: number; indexType: number; nelems: number }
  | { kind: typeof BtfKind.Struct | typeof BtfKind.Union; id: number; name: string; size: number; members: BtfMember[] }
  | { kind: typeof BtfKind.Enum | typeof BtfKind.Enum64; id: number; name: string; size: number; signed: boolean; values: BtfEnumValue[] }
  | { kind: typeof BtfKind.Fwd; id: number; name: string; union: boolean }
  | { kind: typeof BtfKind.Func; id: number; name: string; type: number; linkage: number }
  | { kind: typeof BtfKind.FuncProto; id: number; name: string; returnType: number; params: { name: string; type: number }[] }
  | { kind: typeof BtfKind.Var; id: number; name: string; type: number; linkage: number }
  | { kind: typeof BtfKind.Datasec; id: number; name: string; size: number; vars: BtfVarSecinfo[] }
  | { kind: typeof BtfKind.Float; id: number; name: string; size: number }
  | { kind: typeof BtfKind.DeclTag; id: number; name: string; type: number; componentIdx: number }
  | { kind: typeof BtfKind.Unknown; id: 0; name: '' };

/** A struct or union type. */
export type BtfStruct = Extract<BtfType, { members: BtfMember[] }>;

const BTF_MAGIC = 0xeb9f;

export class Btf {
  /** types[id]; id 0 is void. */
  readonly types: BtfType[];
  private readonly byName = new Map<string, BtfType[]>();

  private constructor(types: BtfType[]) {
    this.types = types;
    for (const t of types) {
      if (!t.name) continue;
      const list = this.byName.get(t.name);
      if (list) list.push(t);
      else this.byName.set(t.name, [t]);
    }
  }

  static parse(raw: Buffer): Btf {
    const fail = (cause: string) =>
      new FerryError({ code: ErrorCode.Layout, op: 'parse btf', cause, hint: 'the object or pinned map carries no usable BTF; rebuild with clang -g' });
    if (raw.length < 24) throw fail('too short for a header');
    let le = true;
    if (raw.readUInt16LE(0) !== BTF_MAGIC) {
      if (raw.readUInt16BE(0) !== BTF_MAGIC) throw fail('bad magic');
      le = false;
    }
    const u32 = (o: number) => (le ? raw.readUInt32LE(o) : raw.readUInt32BE(o));
    const i32 = (o: number) => (le ? raw.readInt32LE(o) : raw.readInt32BE(o));
    const hdrLen = u32(4);
    const typeOff = hdrLen + u32(8);
    const typeLen = u32(12);
    const strOff = hdrLen + u32(16);
    const strLen = u32(20);
    if (typeOff + typeLen > raw.length || strOff + strLen > raw.length) throw fail('sections exceed the data');
    const str = (off: number): string => {
      if (off >= strLen) throw fail(`string offset ${off} out of range`);
      const start = strOff + off;
      const end = raw.indexOf(0, start);
      return raw.toString('utf8', start, end < 0 ? strOff + strLen : end);
    };

    const types: BtfType[] = [{ kind: BtfKind.Unknown, id: 0, name: '' }];
    let p = typeOff;
    const endTypes = typeOff + typeLen;
    while (p < endTypes) {
      const id = types.length;
      const name = str(u32(p));
      const info = u32(p + 4);
      const vlen = info & 0xffff;
      const kind = (info >>> 24) & 0x1f;
      const kindFlag = (info >>> 31) === 1;
      const sizeOrType = u32(p + 8);
      p += 12;
      switch (kind) {
        case BtfKind.Int: {
          const v = u32(p);
          p += 4;
          types.push({ kind, id, name, size: sizeOrType, signed: ((v >>> 24) & 0x1) !== 0, bits: v & 0xff });
          break;
        }
        case BtfKind.Ptr:
        case BtfKind.Typedef:
        case BtfKind.Volatile:
        case BtfKind.Const:
        case BtfKind.Restrict:
        case BtfKind.TypeTag:
          types.push({ kind, id, name, type: sizeOrType });
          break;
        case BtfKind.Array:
          types.push({ kind, id, name, elemType: u32(p), indexType: u32(p + 4), nelems: u32(p + 8) });
          p += 12;
          break;
        case BtfKind.Struct:
        case BtfKind.Union: {
          const members: BtfMember[] = [];
          for (let i = 0; i < vlen; i++) {
            const off = u32(p + 8);
            members.push({
              name: str(u32(p)),
              type: u32(p + 4),
              bitOffset: kindFlag ? off & 0xffffff : off,
              bitfieldSize: kindFlag ? off >>> 24 : 0,
            });
            p += 12;
          }
          types.push({ kind, id, name, size: sizeOrType, members });
          break;
        }
        case BtfKind.Enum: {
          const values: BtfEnumValue[] = [];
          for (let i = 0; i < vlen; i++) {
            values.push({ name: str(u32(p)), value: BigInt(kindFlag ? i32(p + 4) : u32(p + 4)) });
            p += 8;
          }
          types.push({ kind, id, name, size: sizeOrType, signed: kindFlag, values });
          break;
        }
        case BtfKind.Enum64: {
          const values: BtfEnumValue[] = [];
          for (let i = 0; i < vlen; i++) {
            const lo = BigInt(u32(p + 4));
            const hi = BigInt(u32(p + 8));
            let v = (hi << 32n) | lo;
            if (kindFlag) v = BigInt.asIntN(64, v);
            values.push({ name: str(u32(p)), value: v });
            p += 12;
          }
          types.push({ kind, id, name, size: sizeOrType, signed: kindFlag, values });
          break;
        }
        case BtfKind.Fwd:
          types.push({ kind, id, name, union: kindFlag });
          break;
        case BtfKind.Func:
          types.push({ kind, id, name, type: sizeOrType, linkage: vlen });
          break;
        case BtfKind.FuncProto: {
          const params: { name: string; type: number }[] = [];
          for (let i = 0; i < vlen; i++) {
            params.push({ name: str(u32(p)), type: u32(p + 4) });
            p += 8;
          }
          types.push({ kind, id, name, returnType: sizeOrType, params });
          break;
        }
        case BtfKind.Var:
          types.push({ kind, id, name, type: sizeOrType, linkage: u32(p) });
          p += 4;
          break;
        case BtfKind.Datasec: {
          const vars: BtfVarSecinfo[] = [];
          for (let i = 0; i < vlen; i++) {
            vars.push({ type: u32(p), offset: u32(p + 4), size: u32(p + 8) });
            p += 12;
          }
          types.push({ kind, id, name, size: sizeOrType, vars });
          break;
        }
        case BtfKind.Float:
          types.push({ kind, id, name, size: sizeOrType });
          break;
        case BtfKind.DeclTag:
          types.push({ kind, id, name, type: sizeOrType, componentIdx: i32(p) });
          p += 4;
          break;
        default:
          throw fail(`unknown kind ${kind} at type ${id}`);
      }
    }
    return new Btf(types);
  }

  type(id: number): BtfType {
    const t = this.types[id];
    if (!t) throw new FerryError({ code: ErrorCode.Layout, op: 'btf type', cause: `no type with id ${id}` });
    return t;
  }

  /** All types with this name, optionally of one kind. */
  find(name: string, kind?: number): BtfType[] {
    return (this.byName.get(name) ?? []).filter((t) => kind === undefined || t.kind === kind);
  }

  struct(name: string): BtfStruct | undefined {
    return this.find(name, BtfKind.Struct)[0] as BtfStruct | undefined;
  }

  /** Follow typedefs and qualifiers to the underlying type. */
  resolve(id: number): BtfType {
    let t = this.type(id);
    for (let guard = 0; guard < 64; guard++) {
      if (
        t.kind === BtfKind.Typedef || t.kind === BtfKind.Volatile || t.kind === BtfKind.Const ||
        t.kind === BtfKind.Restrict || t.kind === BtfKind.TypeTag
      ) {
        t = this.type(t.type);
      } else {
        return t;
      }
    }
    throw new FerryError({ code: ErrorCode.Layout, op: 'btf resolve', cause: `type ${id} loops` });
  }

  /** Byte size of a type, following typedefs and arrays. */
  sizeOf(id: number): number {
    const t = this.resolve(id);
    switch (t.kind) {
      case BtfKind.Int:
      case BtfKind.Struct:
      case BtfKind.Union:
      case BtfKind.Enum:
      case BtfKind.Enum64:
      case BtfKind.Float:
      case BtfKind.Datasec:
        return t.size;
      case BtfKind.Ptr:
        return 8;
      case BtfKind.Array:
        return t.nelems * this.sizeOf(t.elemType);
      default:
        return 0;
    }
  }

  /** A readable name for a type: `__be32`, `struct lb4_key`, `__u8[6]`. */
  describe(id: number): string {
    const t = this.type(id);
    switch (t.kind) {
      case BtfKind.Unknown:
        return 'void';
      case BtfKind.Struct:
        return `struct ${t.name || '(anon)'}`;
      case BtfKind.Union:
        return `union ${t.name || '(anon)'}`;
      case BtfKind.Enum:
      case BtfKind.Enum64:
        return `enum ${t.name || '(anon)'}`;
      case BtfKind.Array:
        return `${this.describe(t.elemType)}[${t.nelems}]`;
      case BtfKind.Ptr:
        return `${this.describe(t.type)} *`;
      case BtfKind.Const:
        return `const ${this.describe(t.type)}`;
      case BtfKind.Volatile:
        return `volatile ${this.describe(t.type)}`;
      default:
        return t.name || `(kind ${t.kind})`;
    }
  }

  /** Enumerators of a named enum, as a name → value map (numbers, since ours fit). */
  enumValues(name: string): Map<string, number> | undefined {
    const e = this.find(name).find((t) => t.kind === BtfKind.Enum || t.kind === BtfKind.Enum64);
    if (!e || (e.kind !== BtfKind.Enum && e.kind !== BtfKind.Enum64)) return undefined;
    return new Map(e.values.map((v) => [v.name, Number(v.value)]));
  }
}
