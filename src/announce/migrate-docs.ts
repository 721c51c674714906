// What the announcement translators of `ferry migrate` share: reading another project's
// objects without trusting their shape, and making ferry's.
export type Doc = Record<string, unknown>;
export type Warn = (m: string) => void;

const API_VERSION = 'ferry.dev/v1alpha1';

export const isObj = (v: unknown): v is Doc => typeof v === 'object' && v !== null && !Array.isArray(v);
export const nameOf = (d: Doc) => String((d.metadata as { name?: unknown } | undefined)?.name ?? '');
export const specOf = (d: Doc): Doc => (isObj(d.spec) ? d.spec : {});
export const listOf = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
export const groupKind = (d: Doc) => `${String(d.apiVersion ?? '').split('/')[0]}/${String(d.kind ?? '')}`;

export function ferryDoc(kind: string, name: string, spec: Doc, from: string): Doc {
  return { apiVersion: API_VERSION, kind, metadata: { name, annotations: { 'ferry.dev/migrated-from': from } }, spec };
}
