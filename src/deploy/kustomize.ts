// The part of kustomize that deploy/kubernetes uses, so that `ferry manifests` renders the
// overlays without kubectl: `resources` (files, or directories with a kustomization.yaml)
// and `patches` given as JSON 6902 operations (add, replace, remove) with a kind/name target
// (whole-string regular expressions, as kustomize reads them). Anything else in a
// kustomization is refused rather than ignored. test/unit/manifests.test.ts holds the output
// equal to `kubectl kustomize` for every overlay.
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { parse, parseAllDocuments } from 'yaml';
import { ErrorCode, FerryError } from '../errors.js';

export type KObject = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string } } & Record<string, unknown>;

interface Kustomization {
  apiVersion?: string;
  kind?: string;
  resources?: string[];
  patches?: Array<{ path: string; target: { kind?: string; name?: string } }>;
}
type Operation = { op: 'add' | 'replace' | 'remove'; path: string; value?: unknown };

const KNOWN_FIELDS = new Set(['apiVersion', 'kind', 'resources', 'patches']);

const fail = (cause: string, hint?: string) => new FerryError({ code: ErrorCode.Config, op: 'render manifests', cause, hint });

/** The objects the kustomization in `dir` produces, in the order of its resources. */
export function kustomize(dir: string): KObject[] {
  const file = join(dir, 'kustomization.yaml');
  if (!existsSync(file)) throw fail(`${dir}: no kustomization.yaml`);
  const k = parse(readFileSync(file, 'utf8')) as Kustomization;
  const unknown = Object.keys(k).filter((f) => !KNOWN_FIELDS.has(f));
  if (unknown.length) throw fail(`${file}: ${unknown.join(', ')} not supported`, 'ferry manifests renders resources and JSON 6902 patches only');
  const objects: KObject[] = [];
  for (const r of k.resources ?? []) {
    const path = join(dir, r);
    if (statSync(path).isDirectory()) objects.push(...kustomize(path));
    else objects.push(...readObjects(path));
  }
  for (const p of k.patches ?? []) {
    const ops = parse(readFileSync(join(dir, p.path), 'utf8')) as Operation[];
    if (!Array.isArray(ops)) throw fail(`${join(dir, p.path)}: not a list of JSON 6902 operations`, 'strategic-merge patches are not supported');
    const matches = objects.filter((o) => matchesTarget(o, p.target));
    if (matches.length === 0) throw fail(`${join(dir, p.path)}: its target matches no object`);
    for (const o of matches) for (const op of ops) applyOperation(o, op);
  }
  return objects;
}

export function readObjects(file: string): KObject[] {
  return parseAllDocuments(readFileSync(file, 'utf8'))
    .map((d) => d.toJSON() as KObject | null)
    .filter((o): o is KObject => o !== null);
}

function matchesTarget(o: KObject, t: { kind?: string; name?: string }): boolean {
  const whole = (re: string | undefined, s: string) => re === undefined || new RegExp(`^(?:${re})$`).test(s);
  return whole(t.kind, o.kind) && whole(t.name, o.metadata.name);
}

/** RFC 6902 add, replace, remove at a JSON pointer (RFC 6901). */
export function applyOperation(doc: unknown, op: Operation): void {
  if (!['add', 'replace', 'remove'].includes(op.op)) throw fail(`${String(op.op)} ${op.path}: operation not supported`);
  const tokens = op.path.split('/').slice(1).map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
  if (tokens.length === 0) throw fail(`${op.op} ${op.path}: the whole document cannot be patched`);
  let parent: unknown = doc;
  for (const t of tokens.slice(0, -1)) {
    parent = Array.isArray(parent) ? parent[Number(t)] : (parent as Record<string, unknown> | undefined)?.[t];
    if (parent === undefined || parent === null || typeof parent !== 'object') throw fail(`${op.op} ${op.path}: ${t} does not exist`);
  }
  const last = tokens.at(-1)!;
  if (Array.isArray(parent)) {
    const index = last === '-' ? parent.length : Number(last);
    if (!Number.isInteger(index) || index < 0 || index > parent.length || (op.op !== 'add' && index >= parent.length)) throw fail(`${op.op} ${op.path}: no element ${last}`);
    if (op.op === 'add') parent.splice(index, 0, structuredClone(op.value));
    else if (op.op === 'replace') parent[index] = structuredClone(op.value);
    else parent.splice(index, 1);
    return;
  }
  const obj = parent as Record<string, unknown>;
  if (op.op !== 'add' && !(last in obj)) throw fail(`${op.op} ${op.path}: ${last} does not exist`);
  if (op.op === 'remove') delete obj[last];
  else obj[last] = structuredClone(op.value);
}
