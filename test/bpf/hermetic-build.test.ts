// The BPF objects depend on no C library header: they compile in a mount namespace where
// glibc's include directories are hidden by empty tmpfs mounts, as on a machine without
// the multilib stubs that `-target bpf` would otherwise pull in.
import { mkdtempSync, readdirSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { bpfSources, objectPath } from '../../src/build/compile.js';
import { exec } from '../../src/sys/exec.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';

const GLIBC_DIRS = [
  '/usr/include/x86_64-linux-gnu/gnu',
  '/usr/include/x86_64-linux-gnu/sys',
  '/usr/include/x86_64-linux-gnu/bits',
  '/usr/include/aarch64-linux-gnu/gnu',
  '/usr/include/aarch64-linux-gnu/sys',
  '/usr/include/aarch64-linux-gnu/bits',
  '/usr/include/gnu',
  '/usr/include/sys',
  '/usr/include/bits',
];

const work = mkdtempSync(join(tmpdir(), 'ferry-hermetic-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** Run a shell script in a private mount namespace with glibc's headers hidden. */
function hidden(script: string) {
  const dirs = GLIBC_DIRS.filter((d) => existsSync(d));
  const hide = dirs.map((d) => `mount -t tmpfs -o ro,size=4k none ${d}`).join(' && ');
  // The first line out is how many files the hidden directories still show (0).
  return exec('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', `${hide} && find ${dirs.join(' ')} -mindepth 1 | wc -l; ${script}`], { timeoutMs: 120_000 });
}

describeWith(['root'], 'hermetic BPF build', () => {
  it('every object compiles with glibc\'s include directories hidden', async () => {
    const out = join(work, 'objects');
    const r = await hidden(`exec node ${join(REPO_ROOT, 'bin', 'ferry.js')} compile --root ${REPO_ROOT} --force --out-dir ${out} --cache-dir ${join(work, 'cache')}`);
    expect(r.stderr, r.stdout).toBe('');
    expect(r.code).toBe(0);
    // The hidden directories really were empty in there.
    expect(r.stdout.split('\n')[0]!.trim()).toBe('0');
    for (const s of bpfSources(REPO_ROOT)) expect(existsSync(objectPath(REPO_ROOT, s, out)), s).toBe(true);
    expect(readdirSync(out).length).toBeGreaterThan(0);
  });

  it('the hidden headers are what glibc needs: a libc include fails in there', async () => {
    const r = await hidden('echo "#include <sys/socket.h>" | cc -x c -fsyntax-only - 2>&1; echo "exit=$?"');
    expect(r.stdout).toMatch(/exit=[1-9]/);
  });
});
