import { mkdtempSync, mkdirSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { compileAll, parseDiagnostics } from '../../src/build/compile.js';
import { FerryError } from '../../src/errors.js';

const root = mkdtempSync(join(tmpdir(), 'ferry-compile-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function source(name: string, text: string): void {
  mkdirSync(join(root, 'bpf'), { recursive: true });
  writeFileSync(join(root, 'bpf', name), text);
}

const ok = `#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("tc") int pass(struct __sk_buff *skb) { return 0; }
char LICENSE[] SEC("license") = "GPL";
`;

describe('ferry compile', () => {
  it('compiles, then serves the same source from the cache', async () => {
    source('ok.bpf.c', ok);
    const first = await compileAll({ root });
    expect(first.map((o) => [o.object.replace(root, ''), o.cached])).toEqual([['/build/bpf/ok.bpf.o', false]]);
    expect(existsSync(first[0]!.object)).toBe(true);
    const second = await compileAll({ root });
    expect(second[0]!.cached).toBe(true);
    expect(second[0]!.hash).toBe(first[0]!.hash);
  });

  it('rebuilds when a header under bpf/ changes', async () => {
    source('ok.bpf.c', ok);
    const before = await compileAll({ root });
    writeFileSync(join(root, 'bpf', 'extra.h'), '#define X 1\n');
    const after = await compileAll({ root });
    expect(after[0]!.hash).not.toBe(before[0]!.hash);
    expect(after[0]!.cached).toBe(false);
    rmSync(join(root, 'bpf', 'extra.h'));
  });

  it('rebuilds a variant build when the program it includes changes (tc_compat.bpf.c includes tc.bpf.c)', async () => {
    source('ok.bpf.c', ok);
    source('variant.bpf.c', '#define VARIANT\n#include "ok.bpf.c"\n');
    const variantOf = (r: Awaited<ReturnType<typeof compileAll>>) => r.find((o) => o.object.endsWith('variant.bpf.o'))!;
    const before = variantOf(await compileAll({ root }));
    source('ok.bpf.c', ok.replace('return 0;', 'return 1;'));
    const after = variantOf(await compileAll({ root }));
    expect(after.hash).not.toBe(before.hash);
    expect(after.cached).toBe(false);
    rmSync(join(root, 'bpf', 'variant.bpf.c'));
    source('ok.bpf.c', ok);
  });

  it('reports the first error as file:line:col with the full output as detail', async () => {
    source('bad.bpf.c', 'int broken(void) { return undefined_symbol; }\n');
    const err = await compileAll({ root }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FerryError);
    const fe = err as FerryError;
    expect(fe.code).toBe('FERRY_COMPILE');
    expect(fe.message).toMatch(/^compile bpf\/bad\.bpf\.c: bpf\/bad\.bpf\.c:1:27: use of undeclared identifier 'undefined_symbol'/);
    expect(fe.detail).toContain('error:');
    rmSync(join(root, 'bpf', 'bad.bpf.c'));
  });

  it('treats warnings as errors (-Wall -Werror)', async () => {
    source('warn.bpf.c', `${ok}\nstatic int unused_var_fn(void) { int x; return 0; }\nint use(void) { return unused_var_fn(); }\n`);
    await expect(compileAll({ root })).rejects.toThrow(/unused variable 'x'/);
    rmSync(join(root, 'bpf', 'warn.bpf.c'));
  });

  it('refuses C library headers: the flags allow only kernel UAPI, libbpf and bpf/', async () => {
    source('libc.bpf.c', `#include <stdio.h>\n${ok}`);
    const err = await compileAll({ root }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FerryError);
    expect((err as FerryError).message).toMatch(/libc\.bpf\.c:1:10: 'stdio\.h' file not found/);
    rmSync(join(root, 'bpf', 'libc.bpf.c'));
  });

  it('parses clang diagnostics', () => {
    expect(parseDiagnostics('a.c:3:5: error: boom\nnoise\nb.h:1:1: warning: careful\nc.h:7:11: fatal error: gone')).toEqual([
      { file: 'a.c', line: 3, column: 5, severity: 'error', message: 'boom' },
      { file: 'b.h', line: 1, column: 1, severity: 'warning', message: 'careful' },
      { file: 'c.h', line: 7, column: 11, severity: 'error', message: 'gone' },
    ]);
  });

  it('says how to install clang when it is missing', async () => {
    await expect(compileAll({ root, clang: '/nonexistent/clang' })).rejects.toThrow(/apt-get install clang/);
  });
});
