// `ferry compile`: build the BPF objects (cached by content hash).
import { Command } from 'commander';
import { relative, resolve } from 'node:path';
import { compileAll } from '../build/compile.js';

export function registerCompile(program: Command): void {
  program
    .command('compile')
    .description('compile bpf/*.bpf.c with clang into build/bpf (cached by content hash)')
    .option('--root <dir>', 'repository root', '.')
    .option('--force', 'ignore the cache')
    .option('--out-dir <dir>', 'where the objects go (default <root>/build/bpf)')
    .option('--cache-dir <dir>', 'where cached objects live (default <root>/.cache/bpf)')
    .action(async (opts: { root: string; force?: boolean; outDir?: string; cacheDir?: string }) => {
      const root = resolve(opts.root);
      const started = Date.now();
      const objects = await compileAll({ root, force: Boolean(opts.force), outDir: opts.outDir && resolve(opts.outDir), cacheDir: opts.cacheDir && resolve(opts.cacheDir) });
      for (const o of objects) {
        process.stdout.write(`${o.cached ? 'cached ' : 'built  '} ${relative(root, o.object)}\n`);
      }
      process.stdout.write(`${objects.length} object(s) in ${Date.now() - started} ms\n`);
    });
}
