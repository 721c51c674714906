#!/usr/bin/env node
// The ferry command, from the TypeScript build in dist/.
import('../dist/cli/main.js').then((m) => m.main(process.argv)).catch((e) => {
  if (e && e.code === 'ERR_MODULE_NOT_FOUND') {
    process.stderr.write('ferry: not built yet (run make build)\n');
    process.exit(2);
  }
  throw e;
});
