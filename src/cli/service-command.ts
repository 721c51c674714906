// `ferry service list`: the frontends the datapath holds, decoded from the pinned maps
// (works without the agent running).
import { Command } from 'commander';
import { listFrontends } from '../datapath/inspect.js';
import { table } from './table.js';

export function registerService(program: Command): void {
  const svc = program.command('service').description('Services as the datapath holds them');
  svc.command('list')
    .description('one row per frontend, with its backends')
    .option('--pin-dir <dir>', 'the agent\'s pin directory', '/sys/fs/bpf/ferry')
    .option('-o, --output <format>', 'table or json', 'table')
    .action((o: { pinDir: string; output: string }) => {
      const rows = listFrontends(o.pinDir);
      if (o.output === 'json') {
        process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
        return;
      }
      process.stdout.write(table(
        ['ID', 'SERVICE', 'FRONTEND', 'TYPE', 'FLAGS', 'BACKENDS'],
        rows.map((r) => [r.id, r.service, r.frontend, r.type, r.flags.join(',') || '-', r.backends.map((b) => `${b.id} ${b.address} (${b.state}${b.local ? ', local' : ''})`).join('\n') || (r.flags.includes('local-policy') ? '(none: dropped)' : '(none: rejected)')]),
      ));
    });
}
