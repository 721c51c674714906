import { defineConfig } from 'vitest/config';

// Three layers: unit (pure TypeScript), bpf (real kernel objects, PROG_TEST_RUN) and e2e
// (network namespaces with real traffic). bpf and e2e need root; under CI=true they fail
// rather than skip when the machine cannot run them.
export default defineConfig({
  test: {
    globalSetup: ['test/harness/global-setup.ts'],
    reporters: ['verbose'],
    projects: [
      // Timeouts here bound a hang, not a speed: some unit tests start CLI processes, and a
      // slow machine under make test's load takes seconds for those.
      { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts'], testTimeout: 20_000 } },
      {
        extends: true,
        test: { name: 'bpf', include: ['test/bpf/**/*.test.ts'], setupFiles: ['test/harness/leak-check.ts'], testTimeout: 60_000, hookTimeout: 60_000 },
      },
      {
        extends: true,
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          setupFiles: ['test/harness/leak-check.ts'],
          testTimeout: 120_000,
          hookTimeout: 120_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
