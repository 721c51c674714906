// The FFI layer builds libbpf's opts structs by hand. Compile a C probe against the
// installed libbpf headers and compare every offset and size it relies on.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BATCH_OPTS, MAP_CREATE_OPTS, TC_HOOK_SIZE, TC_OPTS_SIZE } from '../../src/ebpf/libbpf.js';
import { TEST_RUN_OPTS } from '../../src/ebpf/test-run.js';

const probe = `#include <stdio.h>
#include <stddef.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#define F(s, f) printf("%s.%s %zu\\n", #s, #f, offsetof(struct s, f))
#define S(s) printf("%s %zu\\n", #s, sizeof(struct s))
int main(void) {
  S(bpf_test_run_opts);
  F(bpf_test_run_opts, sz); F(bpf_test_run_opts, data_in); F(bpf_test_run_opts, data_out);
  F(bpf_test_run_opts, data_size_in); F(bpf_test_run_opts, data_size_out);
  F(bpf_test_run_opts, ctx_in); F(bpf_test_run_opts, ctx_out);
  F(bpf_test_run_opts, ctx_size_in); F(bpf_test_run_opts, ctx_size_out);
  F(bpf_test_run_opts, retval); F(bpf_test_run_opts, repeat); F(bpf_test_run_opts, duration);
  F(bpf_test_run_opts, flags); F(bpf_test_run_opts, cpu); F(bpf_test_run_opts, batch_size);
  S(bpf_map_batch_opts); F(bpf_map_batch_opts, sz); F(bpf_map_batch_opts, elem_flags); F(bpf_map_batch_opts, flags);
  S(bpf_tc_hook); S(bpf_tc_opts);
  S(bpf_map_create_opts); F(bpf_map_create_opts, sz); F(bpf_map_create_opts, map_flags);
  return 0;
}
`;

describe('libbpf ABI as declared in the FFI layer', () => {
  it('matches bpf/bpf.h offset for offset', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ferry-abi-'));
    try {
      writeFileSync(join(dir, 'probe.c'), probe);
      execFileSync('cc', ['-o', join(dir, 'probe'), join(dir, 'probe.c')]);
      const got = Object.fromEntries(
        execFileSync(join(dir, 'probe'), { encoding: 'utf8' }).trim().split('\n').map((l) => {
          const [k, v] = l.split(' ');
          return [k!, Number(v)];
        }),
      );
      const want: Record<string, number> = { bpf_test_run_opts: TEST_RUN_OPTS.size, bpf_map_batch_opts: BATCH_OPTS.size, bpf_tc_hook: TC_HOOK_SIZE, bpf_tc_opts: TC_OPTS_SIZE };
      for (const [f, off] of Object.entries(TEST_RUN_OPTS)) if (f !== 'size') want[`bpf_test_run_opts.${f}`] = off;
      for (const [f, off] of Object.entries(BATCH_OPTS)) if (f !== 'size') want[`bpf_map_batch_opts.${f}`] = off;
      want.bpf_map_create_opts = MAP_CREATE_OPTS.size;
      for (const [f, off] of Object.entries(MAP_CREATE_OPTS)) if (f !== 'size') want[`bpf_map_create_opts.${f}`] = off;
      expect(got).toEqual(want);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
