// The `ferry` command: one sub-command per concern, all sharing error output.
import { Command } from 'commander';
import { FerryError } from '../errors.js';
import { registerCompile } from './compile-command.js';
import { registerAgent } from './agent-command.js';
import { registerBgp } from './bgp-commands.js';
import { registerService } from './service-command.js';
import { registerInspect } from './inspect-commands.js';
import { registerManifests } from './manifests-command.js';
import { registerCleanupKubeProxy } from './cleanup-kube-proxy-command.js';

/**
 * Commands imported only when asked for, or for the help text: the development ones (the
 * sandbox, its test API server, testbed cleanup), so that `ferry agent` on a node never
 * loads test code; and those built on @kubernetes/client-node (the operator, `lb`,
 * `migrate`), so that the agent does not carry that library's 70 MiB.
 */
const LAZY_COMMANDS: Record<string, () => Promise<(program: Command) => void>> = {
  sandbox: async () => (await import('./sandbox-command.js')).registerSandbox,
  'test-apiserver': async () => (await import('./test-apiserver-command.js')).registerTestApiServer,
  testbed: async () => (await import('./testbed-command.js')).registerTestbed,
  operator: async () => (await import('./operator-command.js')).registerOperator,
  lb: async () => (await import('./lb-commands.js')).registerLb,
  migrate: async () => (await import('./lb-commands.js')).registerMigrate,
};

/** The lazily imported commands this command line needs: the one it names, or all for help. */
export function lazyCommandsFor(argv: readonly string[]): string[] {
  const first = argv.slice(2).find((a) => !a.startsWith('-'));
  if (first === undefined || first === 'help') return Object.keys(LAZY_COMMANDS);
  return first in LAZY_COMMANDS ? [first] : [];
}

export async function main(argv: string[]): Promise<void> {
  // `ferry … | head` closes the pipe early: that is not an error.
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE') process.exit(0);
    throw e;
  });
  const program = new Command('ferry')
    .description('eBPF kube-proxy replacement: agent, datapath tools and sandbox')
    .option('-v, --verbose', 'show full diagnostics (verifier logs, compiler output)')
    .showHelpAfterError();
  registerCompile(program);
  registerAgent(program);
  registerBgp(program);
  registerService(program);
  registerInspect(program);
  registerManifests(program);
  registerCleanupKubeProxy(program);
  try {
    for (const name of lazyCommandsFor(argv)) (await LAZY_COMMANDS[name]!())(program);
    await program.parseAsync(argv);
  } catch (e) {
    process.exitCode = reportError(e, Boolean(program.opts().verbose));
  }
}

/** Print an error as `ferry: op: cause (hint)`, with the detail when asked. */
export function reportError(e: unknown, verbose: boolean): number {
  if (e instanceof FerryError) {
    process.stderr.write(`ferry: ${e.message}\n`);
    if (e.detail && verbose) process.stderr.write(`${e.detail}\n`);
    else if (e.detail) process.stderr.write('(run with --verbose for the full diagnostics)\n');
    return 1;
  }
  process.stderr.write(`ferry: ${(e as Error)?.stack ?? String(e)}\n`);
  return 1;
}
