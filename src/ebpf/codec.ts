// Typed codecs for map keys and values, and the check that binds each one to the BTF of
// the C struct it mirrors. A codec that disagrees with BTF in size, field offset, field
// size or byte order is refused with a list of every difference.
import { Btf, BtfKind } from './btf.js';
import { ErrorCode, FerryError } from '../errors.js';
import { ipv4FromString, ipv4ToString } from './ipv4.js';
import { isIPv6 } from 'node:net';
import { ipv6Bytes, ipv6Text } from '../packet/addr.js';

export { ipv4FromString, ipv4ToString };

/** Scalar field types. `be*` are network byte order in memory, host numbers in TypeScript. */
export type ScalarType = 'u8' | 'u16' | 'u32' | 'i32' | 'u64' | 'be16' | 'be32' | 'ipv4';
export type FieldSpec =
  | { type: ScalarType }
  /** `__u8 name[16]`, an IPv6 address in network order; its text form in TypeScript. */
  | { type: 'ipv6' }
  | { type: 'bytes'; length: number }
  | { type: 'u32s'; count: number }
  | { type: 'pad'; length: number }
  /** A struct member that is itself a struct (its codec: `structCodec`). */
  | { type: 'struct'; codec: Codec<unknown> };

type ValueOf<F extends FieldSpec> = F extends { type: 'struct'; codec: Codec<infer T> }
  ? T
  : F extends { type: 'u64' }
  ? bigint
  : F extends { type: 'ipv4' | 'ipv6' }
    ? string
    : F extends { type: 'bytes' }
      ? Buffer
      : F extends { type: 'u32s' }
        ? number[]
        : F extends { type: 'pad' }
        ? never
        : number;

type NonPadKeys<S extends Record<string, FieldSpec>> = {
  [K in keyof S]: S[K] extends { type: 'pad' } ? never : K;
}[keyof S];

export type Decoded<S extends Record<string, FieldSpec>> = { [K in NonPadKeys<S>]: ValueOf<S[K]> };

export interface Codec<T> {
  /** The C type this mirrors: `struct lb4_key`, or a scalar such as `__u32`. */
  readonly cName: string;
  readonly size: number;
  /** A struct's alignment (its widest member's), for a struct that holds it. */
  readonly align?: number;
  encode(value: T, into?: Buffer, offset?: number): Buffer;
  decode(buf: Buffer, offset?: number): T;
  /** A struct's field offset (undefined: no such field, or not a struct): to read one field without decoding all. */
  offsetOf?(field: string): number | undefined;
  /**
   * A reader of one numeric field of a struct at `at` (an ipv4 field as its 32-bit number):
   * walks over raw map batches read the fields they need without decoding whole entries.
   * Undefined for no such field, a u64, bytes, an array or padding.
   */
  numberReader?(field: string): ((buf: Buffer, at: number) => number) | undefined;
  /** Differences from the BTF type `typeId` (empty when they agree). */
  diff(btf: Btf, typeId: number): string[];
}

interface LaidField {
  name: string; // TypeScript name
  cName: string; // C member name
  spec: FieldSpec;
  offset: number;
  size: number;
}

const scalarSize: Record<ScalarType, number> = { u8: 1, u16: 2, u32: 4, i32: 4, u64: 8, be16: 2, be32: 4, ipv4: 4 };

function fieldSize(spec: FieldSpec): number {
  if (spec.type === 'struct') return spec.codec.size;
  if (spec.type === 'u32s') return spec.count * 4;
  if (spec.type === 'ipv6') return 16;
  return spec.type === 'bytes' || spec.type === 'pad' ? spec.length : scalarSize[spec.type];
}
function fieldAlign(spec: FieldSpec): number {
  if (spec.type === 'struct') return spec.codec.align ?? 1;
  if (spec.type === 'u32s') return 4;
  if (spec.type === 'ipv6') return 1;
  return spec.type === 'bytes' || spec.type === 'pad' ? 1 : scalarSize[spec.type];
}

export function snakeCase(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

function codecError(op: string, cause: string): FerryError {
  return new FerryError({ code: ErrorCode.Codec, op, cause });
}

/** What a BTF scalar must look like to match a codec field. */
function expectScalar(btf: Btf, typeId: number, spec: FieldSpec): string | undefined {
  // Byte order lives in the typedef name (`__be16`), so look before resolving.
  const names: string[] = [];
  let t = btf.type(typeId);
  for (let i = 0; i < 16 && (t.kind === BtfKind.Typedef || t.kind === BtfKind.Const || t.kind === BtfKind.Volatile); i++) {
    if (t.kind === BtfKind.Typedef) names.push(t.name);
    t = btf.type(t.type);
  }
  const described = btf.describe(typeId);
  const bigEndian = names.some((n) => /^__be(16|32|64)$/.test(n));
  switch (spec.type) {
    case 'pad':
      // Padding may be declared as `__u8 pad` or `__u8 pad[3]`; only its size matters.
      if (t.kind === BtfKind.Int && !t.signed) return undefined;
      if (t.kind === BtfKind.Array) return undefined;
      return `expected padding bytes, BTF has ${described}`;
    case 'ipv6':
    case 'bytes': {
      if (t.kind !== BtfKind.Array) return `expected a byte array, BTF has ${described}`;
      const elem = btf.resolve(t.elemType);
      if (elem.kind !== BtfKind.Int || elem.size !== 1) return `expected a byte array, BTF has ${described}`;
      return undefined;
    }
    case 'u32s': {
      const elem = t.kind === BtfKind.Array ? btf.resolve(t.elemType) : undefined;
      if (!elem || elem.kind !== BtfKind.Int || elem.size !== 4 || elem.signed) return `expected a __u32 array, BTF has ${described}`;
      return undefined;
    }
    case 'be16':
    case 'be32':
    case 'ipv4':
      if (!bigEndian) return `expected big-endian (__be${scalarSize[spec.type] * 8}), BTF has ${described}`;
      break;
    default:
      if (bigEndian) return `expected host byte order (${spec.type}), BTF has ${described}`;
  }
  if (t.kind !== BtfKind.Int && t.kind !== BtfKind.Enum && t.kind !== BtfKind.Enum64) {
    return `expected an integer, BTF has ${described}`;
  }
  const signed = t.signed;
  if (spec.type === 'i32' && !signed) return `expected signed, BTF has ${described}`;
  if (spec.type !== 'i32' && signed && t.kind === BtfKind.Int) return `expected unsigned, BTF has ${described}`;
  return undefined;
}

/**
 * A codec for a C struct. Field order and names follow the C declaration (camelCase here,
 * snake_case in C); padding is declared explicitly, as it is in the C header.
 */
export function structCodec<S extends Record<string, FieldSpec>>(cStruct: string, spec: S): Codec<Decoded<S>> {
  const fields: LaidField[] = [];
  let offset = 0;
  let maxAlign = 1;
  for (const [name, f] of Object.entries(spec)) {
    const align = fieldAlign(f);
    maxAlign = Math.max(maxAlign, align);
    if (offset % align !== 0) {
      throw codecError(`define codec struct ${cStruct}`, `field ${name} at offset ${offset} is not ${align}-byte aligned: declare the padding explicitly`);
    }
    const size = fieldSize(f);
    fields.push({ name, cName: snakeCase(name), spec: f, offset, size });
    offset += size;
  }
  if (offset % maxAlign !== 0) {
    throw codecError(`define codec struct ${cStruct}`, `size ${offset} is not a multiple of ${maxAlign}: declare the tail padding explicitly`);
  }
  const size = offset;
  const cName = `struct ${cStruct}`;
  // One writer per field, made once: the writer encodes hundreds of thousands of entries
  // in a first sync, and each encode must allocate nothing.
  const writers = fields.map((f) => fieldWriter(f, `${cName}.${f.cName}`));

  return {
    cName,
    size,
    align: maxAlign,
    offsetOf: (name) => fields.find((f) => f.name === name)?.offset,
    numberReader(name) {
      const f = fields.find((x) => x.name === name);
      return f ? numberReader(f) : undefined;
    },
    encode(value, into, at = 0) {
      const buf = into ?? Buffer.alloc(size);
      if (buf.length - at < size) throw codecError(`encode ${cName}`, `buffer of ${buf.length - at} bytes, need ${size}`);
      const v = value as Record<string, unknown>;
      for (let i = 0; i < writers.length; i++) writers[i]!(buf, at, v);
      return buf;
    },
    decode(buf, at = 0) {
      if (buf.length - at < size) throw codecError(`decode ${cName}`, `got ${buf.length - at} bytes, need ${size}`);
      const out: Record<string, unknown> = {};
      for (const f of fields) {
        const o = at + f.offset;
        switch (f.spec.type) {
          case 'pad':
            break;
          case 'struct':
            out[f.name] = f.spec.codec.decode(buf, o);
            break;
          case 'bytes':
            out[f.name] = Buffer.from(buf.subarray(o, o + f.size));
            break;
          case 'u32s':
            out[f.name] = Array.from({ length: f.size / 4 }, (_, i) => buf.readUInt32LE(o + 4 * i));
            break;
          case 'u64':
            out[f.name] = buf.readBigUInt64LE(o);
            break;
          case 'ipv4':
            out[f.name] = ipv4ToString(buf.readUInt32BE(o));
            break;
          case 'ipv6':
            out[f.name] = ipv6Text(buf.subarray(o, o + 16));
            break;
          default:
            out[f.name] = readScalar(buf, o, f.spec.type);
        }
      }
      return out as Decoded<S>;
    },
    diff(btf, typeId) {
      const t = btf.resolve(typeId);
      if (t.kind !== BtfKind.Struct) return [`expected ${cName}, BTF has ${btf.describe(typeId)}`];
      const out: string[] = [];
      if (t.name !== cStruct) out.push(`name: BTF has struct ${t.name}, codec has ${cName}`);
      if (t.size !== size) out.push(`size: BTF ${t.size} bytes, codec ${size}`);
      const members = new Map(t.members.map((m) => [m.name, m]));
      for (const f of fields) {
        const m = members.get(f.cName);
        if (!m) {
          out.push(`field ${f.cName}: in the codec, missing from BTF`);
          continue;
        }
        members.delete(f.cName);
        if (m.bitfieldSize) out.push(`field ${f.cName}: a bitfield in BTF; shared structs must not use bitfields`);
        const btfOffset = m.bitOffset / 8;
        if (btfOffset !== f.offset) out.push(`field ${f.cName}: offset BTF ${btfOffset}, codec ${f.offset}`);
        const btfSize = btf.sizeOf(m.type);
        if (btfSize !== f.size) out.push(`field ${f.cName}: size BTF ${btfSize}, codec ${f.size}`);
        if (f.spec.type === 'struct') {
          for (const why of f.spec.codec.diff(btf, m.type)) out.push(`field ${f.cName}: ${why}`);
          continue;
        }
        const why = expectScalar(btf, m.type, f.spec);
        if (why) out.push(`field ${f.cName}: ${why}`);
      }
      for (const name of members.keys()) out.push(`field ${name}: in BTF, missing from the codec`);
      return out;
    },
  };
}

type FieldWriter = (buf: Buffer, at: number, v: Record<string, unknown>) => void;

/** Reads and writes of the scalar types held as numbers (u64 is a bigint: apart). */
const numberIo: Partial<Record<ScalarType, { read(buf: Buffer, o: number): number; write(buf: Buffer, x: number, o: number): void }>> = {
  u8: { read: (b, o) => b[o]!, write: (b, x, o) => void b.writeUInt8(x, o) },
  u16: { read: (b, o) => b.readUInt16LE(o), write: (b, x, o) => void b.writeUInt16LE(x, o) },
  u32: { read: (b, o) => b.readUInt32LE(o), write: (b, x, o) => void b.writeUInt32LE(x, o) },
  i32: { read: (b, o) => b.readInt32LE(o), write: (b, x, o) => void b.writeInt32LE(x, o) },
  be16: { read: (b, o) => b.readUInt16BE(o), write: (b, x, o) => void b.writeUInt16BE(x, o) },
  be32: { read: (b, o) => b.readUInt32BE(o), write: (b, x, o) => void b.writeUInt32BE(x, o) },
};

function numberReader(f: LaidField): ((buf: Buffer, at: number) => number) | undefined {
  const io = numberIo[(f.spec.type === 'ipv4' ? 'be32' : f.spec.type) as ScalarType];
  const o = f.offset;
  return io && ((buf, at) => io.read(buf, at + o));
}

/** The encoder of one struct field at its offset from the struct's start. */
function fieldWriter(f: LaidField, what: string): FieldWriter {
  const { name, offset, size } = f;
  const t = f.spec.type;
  switch (t) {
    case 'pad':
      return (buf, at) => void buf.fill(0, at + offset, at + offset + size);
    case 'struct': {
      const codec = (f.spec as { codec: Codec<unknown> }).codec;
      return (buf, at, v) => void codec.encode(v[name] ?? {}, buf, at + offset);
    }
    case 'bytes':
      return (buf, at, v) => {
        const b = v[name] as Buffer | undefined;
        buf.fill(0, at + offset, at + offset + size);
        if (b) {
          if (b.length > size) throw codecError(`encode ${what}`, `${b.length} bytes do not fit in ${size}`);
          b.copy(buf, at + offset);
        }
      };
    case 'u32s': {
      const write = checkedScalarWriter('u32', what);
      return (buf, at, v) => {
        const xs = (v[name] as readonly number[] | undefined) ?? [];
        if (xs.length > size / 4) throw codecError(`encode ${what}`, `${xs.length} numbers do not fit in ${size / 4}`);
        for (let i = 0; i < size / 4; i++) write(buf, xs[i] ?? 0, at + offset + 4 * i);
      };
    }
    case 'u64':
      return (buf, at, v) => void buf.writeBigUInt64LE(BigInt((v[name] as bigint | number | undefined) ?? 0n), at + offset);
    case 'ipv4':
      return (buf, at, v) => {
        const x = v[name] as string | undefined;
        buf.writeUInt32BE(x === undefined ? 0 : ipv4FromString(x), at + offset);
      };
    case 'ipv6':
      return (buf, at, v) => {
        const x = v[name] as string | undefined;
        if (x !== undefined && (!isIPv6(x) || x.includes('%'))) throw codecError(`encode ${what}`, `"${x}" is not an IPv6 address`);
        (x === undefined ? Buffer.alloc(16) : ipv6Bytes(x)).copy(buf, at + offset);
      };
  }
  const write = checkedScalarWriter(t, what);
  return (buf, at, v) => write(buf, (v[name] as number | undefined) ?? 0, at + offset);
}

/** A scalar's encoder that refuses a value its type cannot hold. */
function checkedScalarWriter(t: ScalarType, what: string): (buf: Buffer, x: number, o: number) => void {
  const min = t === 'i32' ? -(2 ** 31) : 0;
  const max = t === 'i32' ? 2 ** 31 - 1 : 2 ** (scalarSize[t] * 8) - 1;
  const write = scalarWriter(t);
  return (buf, x, o) => {
    if (!Number.isInteger(x) || x < min || x > max) throw codecError(`encode ${what}`, `${x} is out of range for ${t}`);
    write(buf, x, o);
  };
}

function scalarWriter(t: ScalarType): (buf: Buffer, x: number, o: number) => void {
  const io = numberIo[t];
  if (!io) throw codecError('define codec', `unexpected scalar type ${t}`);
  return io.write;
}

function readScalar(buf: Buffer, o: number, t: ScalarType): number {
  const io = numberIo[t];
  if (!io) throw codecError('decode', `unexpected type ${t}`);
  return io.read(buf, o);
}

/** A codec for a bare scalar key or value, such as the `__u32` index of an array map. */
export function scalarCodec(type: 'u8' | 'u16' | 'u32' | 'u64'): Codec<number | bigint> {
  const size = scalarSize[type];
  const write = type === 'u64' ? undefined : checkedScalarWriter(type, `__${type}`);
  return {
    cName: `__${type}`,
    size,
    encode(value, into, at = 0) {
      const buf = into ?? Buffer.alloc(size);
      if (!write) buf.writeBigUInt64LE(BigInt(value), at);
      else write(buf, Number(value), at);
      return buf;
    },
    decode(buf, at = 0) {
      return type === 'u64' ? buf.readBigUInt64LE(at) : readScalar(buf, at, type);
    },
    diff(btf, typeId) {
      const t = btf.resolve(typeId);
      if ((t.kind !== BtfKind.Int && t.kind !== BtfKind.Enum) || t.size !== size) {
        return [`expected ${this.cName}, BTF has ${btf.describe(typeId)}`];
      }
      return [];
    },
  };
}

export const u8Codec = scalarCodec('u8') as Codec<number>;
export const u16Codec = scalarCodec('u16') as Codec<number>;
export const u32Codec = scalarCodec('u32') as Codec<number>;
export const u64Codec = scalarCodec('u64') as Codec<bigint>;

/** A bare `__be32` IPv4 address key or value, as a dotted string. */
export const ipv4Codec: Codec<string> = {
  cName: '__be32',
  size: 4,
  encode(value, into, at = 0) {
    const buf = into ?? Buffer.alloc(4);
    buf.writeUInt32BE(ipv4FromString(value), at);
    return buf;
  },
  decode(buf, at = 0) {
    return ipv4ToString(buf.readUInt32BE(at));
  },
  diff(btf, typeId) {
    const why = expectScalar(btf, typeId, { type: 'ipv4' });
    return why ? [why] : [];
  },
};
