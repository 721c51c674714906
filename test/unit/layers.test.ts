// The layer rules of ../shared/design.md, read off the import graph of src/: cli → agent →
// datapath → ebpf, with model and k8s beside datapath; cli → operator → ipam and k8s;
// agent → announce → ipam; model, ipam and announce do no I/O; ebpf knows no Kubernetes;
// nothing outside datapath/ writes a map; the agent's command loads no sandbox or test
// code and not @kubernetes/client-node (types only); nothing in src/ imports test/ or bench/;
// no file in src/ or bpf/ is longer than 400 lines (one concept per file).
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../harness/paths.js';

const SRC = join(REPO_ROOT, 'src');

export interface Import {
  from: string; // file, relative to src/
  to: string; // a file relative to src/, or a package / node: module
  typeOnly: boolean;
  line: number;
}

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? files(p) : p.endsWith('.ts') ? [p] : [];
  });
}

/** Static imports and re-exports of a source text (dynamic import() is not followed). */
export function importsOf(file: string, text: string): Import[] {
  const out: Import[] = [];
  const re = /^(import|export)\s+(type\s+)?(?:[^'";]*?\s+from\s+)?['"]([^'"]+)['"]/gm;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    if (m[1] === 'export' && !/\sfrom\s/.test(m[0])) continue;
    const spec = m[3]!;
    const to = spec.startsWith('.') ? relative(SRC, resolve(dirname(join(SRC, file)), spec)).replace(/\.js$/, '.ts') : spec;
    out.push({ from: file, to, typeOnly: Boolean(m[2]), line: text.slice(0, m.index).split('\n').length });
  }
  return out;
}

/** The layer a file belongs to: its first folder under src/ (or the file, at the top). */
const layerOf = (file: string) => (file.includes('/') ? file.split('/')[0]! : file.replace(/\.ts$/, ''));

/** What each layer may import from src/ (itself always). */
const ALLOWED: Record<string, string[]> = {
  errors: [],
  clock: [],
  'config-file': ['errors'],
  sys: ['errors'],
  packet: ['errors'],
  ebpf: ['packet', 'errors', 'sys'],
  model: ['packet', 'errors'],
  ipam: ['errors'],
  announce: ['ipam', 'errors'],
  k8s: ['model', 'clock', 'errors'],
  datapath: ['ebpf', 'model', 'packet', 'sys', 'errors'],
  build: ['errors'],
  deploy: ['errors'],
  agent: ['datapath', 'model', 'k8s', 'announce', 'packet', 'sys', 'clock', 'config-file', 'errors'],
  operator: ['ipam', 'announce', 'k8s', 'sys', 'clock', 'config-file', 'errors'],
  cli: ['agent', 'operator', 'ipam', 'announce', 'datapath', 'model', 'k8s', 'build', 'deploy', 'packet', 'sys', 'errors', 'sandbox'],
  sandbox: ['agent', 'operator', 'datapath', 'model', 'k8s', 'ebpf', 'packet', 'sys', 'clock', 'deploy', 'errors'],
};

/** Modules that mean I/O, kept out of the pure model. */
const IO_MODULES = /^(node:(fs|child_process|http|https|dgram|net|os|worker_threads)|koffi|@kubernetes\/client-node$)/;
const PURE_NET_HELPERS = /^import \{ (isIPv4|isIPv6|isIP)(, (isIPv4|isIPv6|isIP))* \} from 'node:net';$/;

/** Ways to open or write a BPF map: only datapath/ (and ebpf/ itself) may use them. */
const MAP_WRITERS = /\.(maps(\.\w+|\[[^\]]+\]))\.(update|updateBatch|updateBatchOf|delete|deleteBatch)\(|\.writable\(/;
const MAP_OPENERS = new Set(['ebpf/map.ts', 'ebpf/pinned.ts', 'ebpf/object.ts']);

export function violations(sources: Map<string, string>): string[] {
  const out: string[] = [];
  const graph = new Map<string, Import[]>();
  for (const [file, text] of sources) graph.set(file, importsOf(file, text));
  for (const [file, imports] of graph) {
    const layer = layerOf(file);
    const allowed = ALLOWED[layer];
    if (!allowed) {
      out.push(`${file}: layer "${layer}" has no rule (add it to ALLOWED)`);
      continue;
    }
    for (const i of imports) {
      if (/^(\.\.\/)+(test|bench)\//.test(i.to) || i.to.startsWith('../')) {
        out.push(`${file}:${i.line}: imports ${i.to} from outside src/`);
        continue;
      }
      if (i.to.endsWith('.ts')) {
        const target = layerOf(i.to);
        if (target !== layer && !allowed.includes(target)) out.push(`${file}:${i.line}: ${layer} may not import ${i.to}`);
        if (MAP_OPENERS.has(i.to) && layer !== 'datapath' && layer !== 'ebpf' && !i.typeOnly) out.push(`${file}:${i.line}: only datapath/ opens maps (${i.to})`);
      } else if (layer === 'ebpf' && i.to.startsWith('@kubernetes/')) {
        out.push(`${file}:${i.line}: ebpf/ knows no Kubernetes (${i.to})`);
      } else if ((layer === 'model' || layer === 'ipam' || layer === 'announce') && IO_MODULES.test(i.to) && !i.typeOnly) {
        const lineText = sources.get(file)!.split('\n')[i.line - 1]!.trim();
        if (!PURE_NET_HELPERS.test(lineText)) out.push(`${file}:${i.line}: ${layer}/ does no I/O (${i.to})`);
      }
    }
    if (layer !== 'datapath' && layer !== 'ebpf') {
      sources.get(file)!.split('\n').forEach((l, n) => {
        if (MAP_WRITERS.test(l)) out.push(`${file}:${n + 1}: only datapath/ writes maps: ${l.trim()}`);
      });
    }
  }
  // What `ferry agent` loads: the static closure of the CLI entry.
  const seen = new Set<string>();
  const walk = (f: string) => {
    if (seen.has(f) || !graph.has(f)) return;
    seen.add(f);
    for (const i of graph.get(f)!) if (i.to.endsWith('.ts') && !i.typeOnly) walk(i.to);
  };
  walk('cli/main.ts');
  for (const f of seen) if (f.startsWith('sandbox/')) out.push(`cli/main.ts loads ${f} statically: the agent's binary must not load sandbox or test code`);
  for (const f of seen) {
    for (const i of graph.get(f)!) if (i.to === '@kubernetes/client-node' && !i.typeOnly) out.push(`cli/main.ts loads @kubernetes/client-node statically through ${f}:${i.line}: the agent must not carry it (import it lazily)`);
  }
  return out;
}

const sources = new Map(files(SRC).map((f) => [relative(SRC, f), readFileSync(f, 'utf8')]));

const MAX_LINES = 400;
/** Files (path → text) longer than MAX_LINES lines. */
function oversized(texts: Map<string, string>): string[] {
  return [...texts].filter(([, t]) => t.replace(/\n$/, '').split('\n').length > MAX_LINES).map(([f, t]) => `${f}: ${t.replace(/\n$/, '').split('\n').length} lines`);
}
function bpfFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? bpfFiles(p) : /\.(c|h)$/.test(p) ? [p] : [];
  });
}

describe('layer rules', () => {
  it('src/ keeps them', () => {
    expect(violations(sources)).toEqual([]);
  });

  it('catches a wrong import, a map write outside datapath/, I/O in the model and sandbox code in the agent', () => {
    const bad = new Map(sources);
    bad.set('ebpf/oops.ts', "import { serviceOutcome } from '../model/desired.js';\nimport type { V1Service } from '@kubernetes/client-node';\n");
    bad.set('model/oops.ts', "import { readFileSync } from 'node:fs';\n");
    bad.set('agent/oops.ts', "export function f(dp: { maps: { ct4: { delete(k: unknown): void } } }) {\n  dp.maps.ct4.delete({});\n}\n");
    bad.set('cli/main.ts', `${sources.get('cli/main.ts')}\nimport { Sandbox } from '../sandbox/sandbox.js';\n`);
    bad.set('datapath/oops.ts', "import { x } from '../../test/harness/paths.js';\nimport { Reconciler } from '../agent/reconciler.js';\n");
    bad.set('agent/agent.ts', `${sources.get('agent/agent.ts')}\nimport { CoreV1Api } from '@kubernetes/client-node';\n`);
    const v = violations(bad);
    expect(v).toContainEqual('ebpf/oops.ts:1: ebpf may not import model/desired.ts');
    expect(v).toContainEqual('ebpf/oops.ts:2: ebpf/ knows no Kubernetes (@kubernetes/client-node)');
    expect(v).toContainEqual("model/oops.ts:1: model/ does no I/O (node:fs)");
    expect(v).toContainEqual('agent/oops.ts:2: only datapath/ writes maps: dp.maps.ct4.delete({});');
    expect(v).toContainEqual('cli/main.ts loads sandbox/sandbox.ts statically: the agent\'s binary must not load sandbox or test code');
    expect(v).toContainEqual('datapath/oops.ts:1: imports ../test/harness/paths.ts from outside src/');
    expect(v).toContainEqual('datapath/oops.ts:2: datapath may not import agent/reconciler.ts');
    expect(v.some((x) => x.startsWith('cli/main.ts loads @kubernetes/client-node statically through agent/agent.ts:'))).toBe(true);
  });

  it(`no file in src/ or bpf/ is longer than ${MAX_LINES} lines`, () => {
    const all = new Map([...sources].map(([f, t]) => [`src/${f}`, t]));
    for (const f of bpfFiles(join(REPO_ROOT, 'bpf'))) all.set(relative(REPO_ROOT, f), readFileSync(f, 'utf8'));
    expect(all.size).toBeGreaterThan(100);
    expect(oversized(all)).toEqual([]);
    expect(oversized(new Map([['x.ts', 'a\n'.repeat(MAX_LINES + 1)], ['y.ts', 'a\n'.repeat(MAX_LINES)]]))).toEqual([`x.ts: ${MAX_LINES + 1} lines`]);
  });

  it('reads import forms: type-only, re-exports, multi-line', () => {
    const got = importsOf('cli/x.ts', "import type { A } from './a.js';\nexport { b } from '../datapath/b.js';\nimport {\n  c,\n  d,\n} from '../model/c.js';\nexport const e = 1;\n");
    expect(got.map((i) => [i.to, i.typeOnly])).toEqual([['cli/a.ts', true], ['datapath/b.ts', false], ['model/c.ts', false]]);
  });
});
