// Leak checks for bpf/e2e tests. After every test: nothing the test itself opened is left
// open, and it leaked no BPF file descriptor (maps, programs, links, BTF). After the file:
// nothing at all is left open (resources a beforeAll opened must be closed by its afterAll).
import { readdirSync, readlinkSync } from 'node:fs';
import { afterAll, afterEach, beforeEach, expect } from 'vitest';
import { closeAll, liveResourceSet, liveResources, type Resource } from '../../src/ebpf/resources.js';

export function bpfFdCount(): number {
  let n = 0;
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      if (/^anon_inode:(bpf|btf)/.test(readlinkSync(`/proc/self/fd/${fd}`))) n++;
    } catch {
      // closed while reading
    }
  }
  return n;
}

let fdsBefore = 0;
let openBefore = new Set<Resource>();
beforeEach(() => {
  fdsBefore = bpfFdCount();
  openBefore = liveResourceSet();
});
afterEach(() => {
  const leaked = [...liveResourceSet()].filter((r) => !openBefore.has(r));
  const fds = bpfFdCount();
  for (const r of leaked) r.close();
  expect(leaked.map((r) => r.what), 'resources left open by the test').toEqual([]);
  expect(fds, 'BPF file descriptors leaked by the test').toBe(fdsBefore);
});
afterAll(() => {
  const left = liveResources();
  closeAll();
  expect(left, 'resources left open by the test file').toEqual([]);
});
