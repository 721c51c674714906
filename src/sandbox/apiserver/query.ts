// What a request asks of the store: label and field selectors, merge patches.
import type { KObject } from './store.js';

/** label selectors: `a`, `!a`, `a=b`, `a==b`, `a!=b`, comma-separated. */
export function matchesLabels(labels: Record<string, string> | undefined, selector: string | null): boolean {
  if (!selector) return true;
  const l = labels ?? {};
  return selector.split(',').map((s) => s.trim()).filter(Boolean).every((term) => {
    let m: RegExpExecArray | null;
    if ((m = /^!([^=!]+)$/.exec(term))) return !(m[1]! in l);
    if ((m = /^([^=!]+)!=(.*)$/.exec(term))) return l[m[1]!] !== m[2];
    if ((m = /^([^=!]+)==?(.*)$/.exec(term))) return l[m[1]!] === m[2];
    return term in l;
  });
}

/** A field selector (`a.b=v`, `a.b==v`, `a.b!=v`, comma-separated) on the object's fields. */
export function matchesFields(obj: KObject, selector: string | null): boolean {
  if (!selector) return true;
  const field = (path: string) => {
    let v: unknown = obj;
    for (const part of path.split('.')) v = v && typeof v === 'object' ? (v as Record<string, unknown>)[part] : undefined;
    return v === undefined || v === null ? '' : String(v);
  };
  return selector.split(',').every((term) => {
    const m = /^([^!=]+)(!=|==|=)(.*)$/.exec(term.trim());
    if (!m) return false;
    return m[2] === '!=' ? field(m[1]!) !== m[3] : field(m[1]!) === m[3];
  });
}

/** JSON merge patch (RFC 7386); strategic merge patches are treated the same way. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> = target && typeof target === 'object' && !Array.isArray(target) ? { ...(target as Record<string, unknown>) } : {};
  for (const [k, v] of Object.entries(patch as Record<string, unknown>)) {
    if (k === '$patch' || k.startsWith('$setElementOrder') || k.startsWith('$retainKeys') || k.startsWith('$deleteFromPrimitiveList')) continue;
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}
