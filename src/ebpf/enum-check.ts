// Check a TypeScript mirror of a C enum against BTF: every name must exist with the same
// value, and the C enum must have no member the mirror lacks.
import { Btf } from './btf.js';
import { ErrorCode, FerryError } from '../errors.js';

export function enumDiff(btf: Btf, cEnum: string, mirror: Record<string, number>): string[] {
  const values = btf.enumValues(cEnum);
  if (!values) return [`enum ${cEnum}: not in BTF`];
  const out: string[] = [];
  for (const [name, v] of Object.entries(mirror)) {
    const c = values.get(name);
    if (c === undefined) out.push(`enum ${cEnum}: ${name} is in TypeScript, not in C`);
    else if (c !== v) out.push(`enum ${cEnum}: ${name} is ${c} in C, ${v} in TypeScript`);
  }
  for (const name of values.keys()) if (!(name in mirror)) out.push(`enum ${cEnum}: ${name} is in C, not in TypeScript`);
  return out;
}

export function assertEnums(btf: Btf, mirrors: Record<string, Record<string, number>>): void {
  const diffs = Object.entries(mirrors).flatMap(([name, m]) => enumDiff(btf, name, m));
  if (diffs.length > 0) {
    throw new FerryError({ code: ErrorCode.Layout, op: 'check shared enums', cause: diffs.join('; '), hint: 'update the TypeScript mirror to match bpf/shared', detail: diffs.join('\n') });
  }
}
