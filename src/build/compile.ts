// `ferry compile`: clang on bpf/*.bpf.c (and bpf/tests/*.bpf.c) with fixed flags, cached by
// content hash. Nodes never compile: per-node values are .rodata constants set at load.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, readlinkSync, renameSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { arch } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { promisify } from 'node:util';
import { ErrorCode, FerryError } from '../errors.js';

const run = promisify(execFile);

/**
 * -nostdinc: the objects see no C library and no compiler headers, only the directories
 * systemIncludeDir() names (kernel UAPI and libbpf) and ferry's own bpf/. A libc include
 * fails here as it would on a machine without the 32-bit glibc stubs that `-target bpf`
 * drags in.
 */
export const BPF_CFLAGS = [
  '-O2', '-g', '-target', 'bpf', '-mcpu=v3',
  '-Wall', '-Werror', '-Wno-unused-function',
  '-nostdinc',
  `-D__TARGET_ARCH_${arch() === 'arm64' ? 'arm64' : 'x86'}`,
] as const;

/** The multiarch directory that holds the kernel's asm/ headers (linux-libc-dev). */
function multiarch(): string {
  return arch() === 'arm64' ? 'aarch64-linux-gnu' : 'x86_64-linux-gnu';
}

/**
 * The only system headers the BPF objects may include, as one directory of links:
 * linux/, asm/, asm-generic/ (linux-libc-dev) and bpf/ (libbpf-dev). Built under the
 * output directory; glibc's include directories are never on the search path.
 */
export function systemIncludeDir(root: string, usr = '/usr/include'): string {
  const dir = join(root, 'build', 'bpf-include');
  const links: Record<string, string> = {
    linux: join(usr, 'linux'),
    'asm-generic': join(usr, 'asm-generic'),
    asm: join(usr, multiarch(), 'asm'),
    bpf: join(usr, 'bpf'),
  };
  mkdirSync(dir, { recursive: true });
  for (const [name, target] of Object.entries(links)) {
    if (!existsSync(target)) {
      throw new FerryError({
        code: ErrorCode.Compile,
        op: 'compile bpf',
        cause: `${target} is missing`,
        hint: 'install linux-libc-dev and libbpf-dev (make setup)',
      });
    }
    const link = join(dir, name);
    let have: string | undefined;
    try {
      have = readlinkSync(link);
    } catch {
      have = undefined;
    }
    if (have === target) continue;
    rmSync(link, { force: true, recursive: true });
    symlinkSync(target, link);
  }
  return dir;
}

export interface CompileOptions {
  /** Repository root holding bpf/. */
  root: string;
  /** Where objects go (default <root>/build/bpf). */
  outDir?: string;
  /** Where cached objects live (default <root>/.cache/bpf). */
  cacheDir?: string;
  /** Ignore the cache. */
  force?: boolean;
  clang?: string;
  /** Compile only sources whose path relative to bpf/ matches. */
  filter?: (rel: string) => boolean;
}

export interface CompiledObject {
  source: string;
  object: string;
  cached: boolean;
  hash: string;
}

export interface Diagnostic {
  file: string;
  line: number;
  column: number;
  severity: 'error' | 'warning' | 'note';
  message: string;
}

/** Sources: bpf/*.bpf.c and bpf/tests/*.bpf.c. */
export function bpfSources(root: string): string[] {
  const out: string[] = [];
  for (const dir of ['bpf', 'bpf/tests']) {
    const abs = join(root, dir);
    if (!existsSync(abs)) continue;
    for (const f of readdirSync(abs).sort()) if (f.endsWith('.bpf.c')) out.push(join(abs, f));
  }
  return out;
}

/** A source's bytes, then those of the programs it includes (`#include "tc.bpf.c"`: a variant
 * build of another program), so that a change to the included one is not taken from the cache. */
function sourceParts(source: string): Buffer[] {
  const text = readFileSync(source);
  const included = [...text.toString('utf8').matchAll(/^#include "([^"]+\.bpf\.c)"/gm)].map((m) => readFileSync(join(dirname(source), m[1]!)));
  return [text, ...included];
}

function walkHeaders(dir: string, out: string[]): void {
  if (!existsSync(dir)) return;
  for (const f of readdirSync(dir).sort()) {
    const p = join(dir, f);
    if (statSync(p).isDirectory()) walkHeaders(p, out);
    else if (f.endsWith('.h')) out.push(p);
  }
}

/** Where the object for a source lands: bpf/tc.bpf.c → build/bpf/tc.bpf.o. */
export function objectPath(root: string, source: string, outDir = join(root, 'build', 'bpf')): string {
  const rel = relative(join(root, 'bpf'), source);
  return join(outDir, rel.replace(/\.c$/, '.o'));
}

export function parseDiagnostics(stderr: string): Diagnostic[] {
  const out: Diagnostic[] = [];
  for (const line of stderr.split('\n')) {
    const m = /^(.+?):(\d+):(\d+): (fatal error|error|warning|note): (.*)$/.exec(line);
    if (m) out.push({ file: m[1]!, line: Number(m[2]), column: Number(m[3]), severity: (m[4] === 'fatal error' ? 'error' : m[4]) as Diagnostic['severity'], message: m[5]! });
  }
  return out;
}

async function clangVersion(clang: string): Promise<string> {
  try {
    const { stdout } = await run(clang, ['--version']);
    return stdout.split('\n')[0] ?? '';
  } catch {
    throw new FerryError({
      code: ErrorCode.Compile,
      op: 'compile bpf',
      cause: `${clang} not found`,
      hint: 'install clang and llvm (apt-get install clang llvm libbpf-dev), or run make setup; nodes running the agent do not need it',
    });
  }
}

export async function compileAll(o: CompileOptions): Promise<CompiledObject[]> {
  const clang = o.clang ?? 'clang';
  const outDir = o.outDir ?? join(o.root, 'build', 'bpf');
  const cacheDir = o.cacheDir ?? join(o.root, '.cache', 'bpf');
  const version = await clangVersion(clang);
  const system = systemIncludeDir(o.root);
  const headers: string[] = [];
  walkHeaders(join(o.root, 'bpf'), headers);
  const common = createHash('sha256');
  common.update(version).update('\0').update(BPF_CFLAGS.join(' ')).update('\0');
  for (const h of headers) common.update(relative(o.root, h)).update('\0').update(readFileSync(h)).update('\0');
  const commonDigest = common.digest('hex');

  const sources = bpfSources(o.root).filter((s) => !o.filter || o.filter(relative(join(o.root, 'bpf'), s)));
  mkdirSync(cacheDir, { recursive: true });
  const results: CompiledObject[] = [];
  const failures: { source: string; stderr: string }[] = [];
  // Two at a time: these machines have two cores.
  const queue = [...sources];
  const worker = async () => {
    for (let s = queue.shift(); s; s = queue.shift()) {
      const hash = createHash('sha256').update(commonDigest);
      for (const part of sourceParts(s)) hash.update(part);
      const digest = hash.digest('hex').slice(0, 20);
      const cached = join(cacheDir, `${digest}.o`);
      const object = objectPath(o.root, s, outDir);
      mkdirSync(dirname(object), { recursive: true });
      const hit = !o.force && existsSync(cached);
      if (!hit) {
        const tmp = `${cached}.${process.pid}.tmp`;
        try {
          await run(clang, [...BPF_CFLAGS, '-I', join(o.root, 'bpf'), '-isystem', system, '-c', s, '-o', tmp], { maxBuffer: 16 << 20 });
          renameSync(tmp, cached);
        } catch (e) {
          failures.push({ source: s, stderr: String((e as { stderr?: string }).stderr ?? (e as Error).message) });
          continue;
        }
      }
      copyFileSync(cached, object);
      results.push({ source: s, object, cached: hit, hash: digest });
    }
  };
  await Promise.all([worker(), worker()]);
  if (failures.length > 0) {
    const all = failures.flatMap((f) => parseDiagnostics(f.stderr).filter((d) => d.severity === 'error'));
    const first = all[0];
    const where = first ? `${relative(o.root, first.file)}:${first.line}:${first.column}: ${first.message}` : failures[0]!.stderr.trim().split('\n')[0];
    throw new FerryError({
      code: ErrorCode.Compile,
      op: `compile ${failures.map((f) => relative(o.root, f.source)).join(', ')}`,
      cause: where ?? 'clang failed',
      hint: `${all.length} error(s); the full compiler output follows`,
      detail: failures.map((f) => f.stderr).join('\n'),
    });
  }
  return results.sort((a, b) => a.source.localeCompare(b.source));
}
