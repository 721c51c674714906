// Kubernetes objects checked against the API's OpenAPI schemas, offline, from npm:
// kubernetes-models 4.5.1 (Kubernetes 1.33.0) and 4.4.2 (1.27.1) ship a validator compiled
// from each schema (types, required fields, enums, formats) and TypeScript types generated
// from the same schema. The validators let unknown fields pass, so strictness (a misspelt
// field, which an API server drops or refuses) comes from the types: the objects are
// written out as object literals typed with them and compiled with tsc, whose excess
// property check names every field the schema does not have. No npm package ships 1.31's
// schemas; a field accepted by both 1.27 and 1.33 is one 1.31 has too.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { REPO_ROOT } from './paths.js';

export const SCHEMA_PACKAGES = { '1.33': 'kubernetes-models', '1.27': 'kubernetes-models-1.27' } as const;
export type SchemaVersion = keyof typeof SCHEMA_PACKAGES;

type Obj = { apiVersion: string; kind: string; metadata?: { name?: string } };
const require = createRequire(import.meta.url);

/** The module path of a kind in a kubernetes-models package: v1/Service, apps/v1/DaemonSet… */
function modelPath(apiVersion: string, kind: string): string {
  return apiVersion.includes('/') ? `${apiVersion}/${kind}` : `v1/${kind}`;
}

const label = (o: Obj) => `${o.kind}/${o.metadata?.name ?? '?'}`;

/** Problems the compiled validator finds (not unknown fields), one line each. */
export function schemaProblems(objects: Obj[], version: SchemaVersion): string[] {
  const out: string[] = [];
  for (const o of objects) {
    let Model: new (data: unknown) => { validate(): void };
    try {
      Model = (require(`${SCHEMA_PACKAGES[version]}/${modelPath(o.apiVersion, o.kind)}`) as Record<string, typeof Model>)[o.kind]!;
    } catch {
      out.push(`${label(o)}: ${o.apiVersion} ${o.kind} is not in Kubernetes ${version}`);
      continue;
    }
    try {
      new Model(o).validate();
    } catch (e) {
      out.push(`${label(o)}: ${(e as Error).message}`);
    }
  }
  return out;
}

/** Fields the schema does not have (and wrong types), as tsc reports them: `Kind/name: message`. */
export function unknownFields(objects: Obj[], version: SchemaVersion): string[] {
  const dir = mkdtempSync(join(REPO_ROOT, 'build', 'schema-check-'));
  try {
    const lines = objects.map((o, i) => {
      const type = `I${o.kind}`;
      return `import type { ${type} as T${i} } from '${SCHEMA_PACKAGES[version]}/${modelPath(o.apiVersion, o.kind)}';\nexport const o${i}: T${i} = ${JSON.stringify(o, null, 1)};\n`;
    });
    writeFileSync(join(dir, 'objects.ts'), lines.join('\n'));
    writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({
      compilerOptions: { strict: true, noEmit: true, module: 'node16', moduleResolution: 'node16', skipLibCheck: true, types: [], typeRoots: [join(REPO_ROOT, 'node_modules')], baseUrl: REPO_ROOT, paths: { '*': [join(REPO_ROOT, 'node_modules', '*')] } },
      files: ['objects.ts'],
    }));
    const r = spawnSync(process.execPath, [join(REPO_ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', dir], { encoding: 'utf8', cwd: dir });
    if (r.status === 0) return [];
    // objects.ts(LINE,COL): error TSxxxx: message — mapped back to the object it is in.
    const starts = lines.reduce<number[]>((acc, l, i) => [...acc, (acc[i] ?? 1) + l.split('\n').length], [1]);
    const problems = [...r.stdout.matchAll(/^objects\.ts\((\d+),\d+\): error TS\d+: (.*)$/gm)].map((m) => {
      const line = Number(m[1]);
      const i = starts.findLastIndex((s) => s <= line);
      return `${label(objects[i]!)}: ${m[2]}`;
    });
    if (problems.length === 0) throw new Error(`tsc failed without a located error:\n${r.stdout}${r.stderr}`);
    return problems;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
