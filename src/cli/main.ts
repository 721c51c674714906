// The `ferry` command: one sub-command per concern, all sharing error output.
import { Command } from 'commander';
import { FerryError } from '../errors.js';
import { registerCompile } from './compile-command.js';
import { registerAgent } from './agent-command.js';
import { registerOperator } from './operator-command.js';
import { registerLb } from './lb-commands.js';
import { registerBgp } from './bgp-commands.js';
import { registerService } from './service-command.js';
import { registerInspect } from './inspect-commands.js';

/**
 * Commands for development machines only (the sandbox, its test API server, testbed
 * cleanup). They are imported only when asked for, or for the help text, so that
 * `ferry agent` on a node never loads test code.
 */
const DEV_COMMANDS: Record<string, () => Promise<(program: Command) => void>> = {
  sandbox: async () => (await import('./sandbox-command.js')).registerSandbox,
  'test-apiserver': async () => (await import('./test-apiserver-command.js')).registerTestApiServer,
  testbed: async () => (await import('./testbed-command.js')).registerTestbed,
};

/** The dev commands this command line needs: the one it names, or all for help. */
export function devCommandsFor(argv: readonly string[]): string[] {
  const first = argv.slice(2).find((a) => !a.startsWith('-'));
  if (first === undefined || first === 'help') return Object.keys(DEV_COMMANDS);
  return first in DEV_COMMANDS ? [first] : [];
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
  registerOperator(program);
  registerLb(program);
  registerBgp(program);
  registerService(program);
  registerInspect(program);
  try {
    for (const name of devCommandsFor(argv)) (await DEV_COMMANDS[name]!())(program);
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
