// The `ferry` command: one sub-command per concern, all sharing error output.
import { Command } from 'commander';
import { FerryError } from '../ebpf/errors.js';
import { registerCompile } from './compile-command.js';
import { registerTestbed } from './testbed-command.js';
import { registerAgent } from './agent-command.js';
import { registerTestApiServer } from './test-apiserver-command.js';
import { registerSandbox } from './sandbox-command.js';
import { registerService } from './service-command.js';
import { registerInspect } from './inspect-commands.js';

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
  registerTestbed(program);
  registerAgent(program);
  registerTestApiServer(program);
  registerSandbox(program);
  registerService(program);
  registerInspect(program);
  try {
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
