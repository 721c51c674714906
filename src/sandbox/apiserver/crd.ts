// CustomResourceDefinitions in the test API server, as a real API server serves them: a
// CRD makes its resource appear at its paths (with the status subresource when it has one),
// and every object of it is checked against the version's openAPIV3Schema before it is
// stored — types, required fields, enums, formats, bounds, patterns — with defaults
// applied and unknown fields pruned. A bad object is refused with 422 Invalid.
import { isIPv4, isIPv6 } from 'node:net';
import { StoreError, type KObject } from './store.js';

export interface JSONSchema {
  type?: 'object' | 'array' | 'string' | 'integer' | 'number' | 'boolean';
  properties?: Record<string, JSONSchema>;
  required?: string[];
  additionalProperties?: boolean | JSONSchema;
  items?: JSONSchema;
  enum?: unknown[];
  format?: string;
  pattern?: string;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  default?: unknown;
  nullable?: boolean;
  oneOf?: JSONSchema[];
  anyOf?: JSONSchema[];
  'x-kubernetes-preserve-unknown-fields'?: boolean;
  'x-kubernetes-int-or-string'?: boolean;
}

export interface PrinterColumn {
  name: string;
  type: string;
  jsonPath: string;
  description?: string;
  priority?: number;
}

export interface ResourceDef {
  group: string; // '' for core
  version: string;
  plural: string;
  kind: string;
  namespaced: boolean;
  shortNames?: string[];
  /** Served from a CustomResourceDefinition. */
  schema?: JSONSchema;
  statusSubresource?: boolean;
  printerColumns?: PrinterColumn[];
}

const invalid = (what: string, errors: string[]) => new StoreError(422, 'Invalid', `${what} is invalid: ${errors.join(', ')}`);

/** The resources a CRD serves, one per served version; a malformed CRD is refused. */
export function crdResources(crd: KObject): ResourceDef[] {
  const spec = (crd.spec ?? {}) as { group?: string; scope?: string; names?: { plural?: string; kind?: string; shortNames?: string[]; singular?: string }; versions?: Array<{ name?: string; served?: boolean; storage?: boolean; schema?: { openAPIV3Schema?: JSONSchema }; subresources?: { status?: object }; additionalPrinterColumns?: PrinterColumn[] }> };
  const errors: string[] = [];
  const plural = spec.names?.plural;
  const kind = spec.names?.kind;
  if (!spec.group) errors.push('spec.group: Required value');
  if (!plural) errors.push('spec.names.plural: Required value');
  if (!kind) errors.push('spec.names.kind: Required value');
  if (spec.scope !== 'Namespaced' && spec.scope !== 'Cluster') errors.push(`spec.scope: Unsupported value: ${JSON.stringify(spec.scope)}: supported values: "Cluster", "Namespaced"`);
  if (crd.metadata.name !== `${plural}.${spec.group}`) errors.push(`metadata.name: Invalid value: ${JSON.stringify(crd.metadata.name)}: must be spec.names.plural+"."+spec.group`);
  const versions = spec.versions ?? [];
  if (versions.filter((v) => v.storage).length !== 1) errors.push('spec.versions: Invalid value: must have exactly one version marked as storage version');
  versions.forEach((v, i) => {
    if (!v.name) errors.push(`spec.versions[${i}].name: Required value`);
    if (v.schema?.openAPIV3Schema?.type !== 'object') errors.push(`spec.versions[${i}].schema.openAPIV3Schema.type: Required value: must be object at the root`);
  });
  if (errors.length) throw invalid(`CustomResourceDefinition.apiextensions.k8s.io ${JSON.stringify(crd.metadata.name)}`, errors);
  return versions.filter((v) => v.served !== false).map((v) => ({
    group: spec.group!,
    version: v.name!,
    plural: plural!,
    kind: kind!,
    namespaced: spec.scope === 'Namespaced',
    ...(spec.names?.shortNames ? { shortNames: spec.names.shortNames } : {}),
    schema: v.schema!.openAPIV3Schema!,
    statusSubresource: Boolean(v.subresources?.status),
    ...(v.additionalPrinterColumns ? { printerColumns: v.additionalPrinterColumns } : {}),
  }));
}

const FORMATS: Record<string, (s: string) => boolean> = {
  ipv4: (s) => isIPv4(s),
  ipv6: (s) => isIPv6(s),
  cidr: (s) => {
    const [a, b, ...rest] = s.split('/');
    const max = isIPv4(a ?? '') ? 32 : isIPv6(a ?? '') ? 128 : -1;
    return rest.length === 0 && max > 0 && /^\d{1,3}$/.test(b ?? '') && Number(b) <= max;
  },
  'date-time': (s) => !Number.isNaN(Date.parse(s)) && /^\d{4}-\d{2}-\d{2}T/.test(s),
  hostname: (s) => /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/.test(s) && s.length <= 253,
};

const typeOf = (v: unknown) => (v === null ? 'null' : Array.isArray(v) ? 'array' : Number.isInteger(v) ? 'integer' : typeof v);

/**
 * Check `value` against `schema` at `path`; returns the value with defaults applied and
 * unknown fields pruned. Problems go to `errors` in the API server's words.
 */
function check(schema: JSONSchema, value: unknown, path: string, errors: string[]): unknown {
  if (value === null || value === undefined) {
    if (value === null && !schema.nullable) errors.push(`${path}: Invalid value: "null": ${path} in body must be of type ${schema.type ?? 'object'}: "null"`);
    return value;
  }
  const t = typeOf(value);
  const want = schema.type;
  if (schema['x-kubernetes-int-or-string']) {
    if (t !== 'integer' && t !== 'string') errors.push(`${path}: Invalid value: ${JSON.stringify(value)}: ${path} in body must be of type integer or string`);
    return value;
  }
  if (want && !(t === want || (want === 'number' && t === 'integer'))) {
    errors.push(`${path}: Invalid value: ${JSON.stringify(t)}: ${path} in body must be of type ${want}: ${JSON.stringify(t)}`);
    return value;
  }
  if (schema.enum && !schema.enum.some((e) => e === value)) errors.push(`${path}: Unsupported value: ${JSON.stringify(value)}: supported values: ${schema.enum.map((e) => JSON.stringify(e)).join(', ')}`);
  for (const sub of ['oneOf', 'anyOf'] as const) {
    const alts = schema[sub];
    if (!alts) continue;
    const ok = alts.filter((a) => {
      const e: string[] = [];
      check({ ...a, type: a.type ?? want }, value, path, e);
      return e.length === 0;
    }).length;
    if (sub === 'oneOf' ? ok !== 1 : ok === 0) errors.push(`${path}: Invalid value: ${JSON.stringify(value)}: ${path} in body must match ${sub === 'oneOf' ? 'exactly one' : 'at least one'} schema in ${sub}`);
  }
  if (t === 'string') {
    const s = value as string;
    if (schema.format && FORMATS[schema.format] && !FORMATS[schema.format]!(s)) errors.push(`${path}: Invalid value: ${JSON.stringify(s)}: ${path} in body must be of type ${schema.format}: ${JSON.stringify(s)}`);
    if (schema.pattern && !new RegExp(schema.pattern).test(s)) errors.push(`${path}: Invalid value: ${JSON.stringify(s)}: ${path} in body should match '${schema.pattern}'`);
    if (schema.minLength !== undefined && s.length < schema.minLength) errors.push(`${path}: Invalid value: ${JSON.stringify(s)}: ${path} in body should be at least ${schema.minLength} chars long`);
    if (schema.maxLength !== undefined && s.length > schema.maxLength) errors.push(`${path}: Too long: may not be longer than ${schema.maxLength}`);
    return s;
  }
  if (t === 'integer' || t === 'number') {
    const n = value as number;
    if (schema.minimum !== undefined && n < schema.minimum) errors.push(`${path}: Invalid value: ${n}: ${path} in body should be greater than or equal to ${schema.minimum}`);
    if (schema.maximum !== undefined && n > schema.maximum) errors.push(`${path}: Invalid value: ${n}: ${path} in body should be less than or equal to ${schema.maximum}`);
    return n;
  }
  if (t === 'array') {
    const a = value as unknown[];
    if (schema.minItems !== undefined && a.length < schema.minItems) errors.push(`${path}: Invalid value: ${a.length}: ${path} in body should have at least ${schema.minItems} items`);
    if (schema.maxItems !== undefined && a.length > schema.maxItems) errors.push(`${path}: Too many: ${a.length}: must have at most ${schema.maxItems} items`);
    return schema.items ? a.map((x, i) => check(schema.items!, x, `${path}[${i}]`, errors)) : a;
  }
  if (t === 'object') {
    const o = value as Record<string, unknown>;
    const out: Record<string, unknown> = {};
    const props = schema.properties ?? {};
    for (const [k, sub] of Object.entries(props)) {
      if (o[k] === undefined && sub.default !== undefined) out[k] = structuredClone(sub.default);
      else if (o[k] !== undefined) out[k] = check(sub, o[k], path ? `${path}.${k}` : k, errors);
    }
    for (const r of schema.required ?? []) if (o[r] === undefined && out[r] === undefined) errors.push(`${path ? `${path}.` : ''}${r}: Required value`);
    for (const [k, v] of Object.entries(o)) {
      if (k in props) continue;
      if (typeof schema.additionalProperties === 'object') out[k] = check(schema.additionalProperties, v, path ? `${path}.${k}` : k, errors);
      else if (schema['x-kubernetes-preserve-unknown-fields'] || schema.additionalProperties === true) out[k] = v;
      // else: pruned, as a structural schema prunes unknown fields
    }
    return out;
  }
  return value;
}

/**
 * An object of a custom resource, checked and normalised (defaults, pruning). apiVersion,
 * kind and metadata are the server's, never pruned.
 */
export function validateCustom(def: ResourceDef, obj: KObject): KObject {
  const errors: string[] = [];
  const { apiVersion, kind, metadata, ...rest } = obj;
  const body = check({ ...def.schema!, properties: { ...def.schema!.properties } }, rest, '', errors) as Record<string, unknown>;
  delete body.apiVersion;
  delete body.kind;
  delete body.metadata;
  if (errors.length) throw invalid(`${def.kind}.${def.group} ${JSON.stringify(metadata?.name ?? '')}`, errors);
  return { apiVersion, kind, metadata, ...body };
}
