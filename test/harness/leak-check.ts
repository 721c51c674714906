// After every bpf/e2e test: no ferry resource left open, and no more BPF file descriptors
// (maps, programs, links, BTF) than before the test.
import { readdirSync, readlinkSync } from 'node:fs';
import { afterEach, beforeEach, expect } from 'vitest';
import { closeAll, liveResources } from '../../src/ebpf/resources.js';

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

let before = 0;
beforeEach(() => {
  before = bpfFdCount();
});
afterEach(() => {
  const live = liveResources();
  const after = bpfFdCount();
  closeAll();
  expect(live, 'resources left open by the test').toEqual([]);
  expect(after, 'BPF file descriptors leaked by the test').toBe(before);
});
