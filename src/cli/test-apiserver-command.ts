// `ferry test-apiserver`: the in-memory test double of the Kubernetes API server, for the
// sandbox and the tests. Production talks to the real API server.
import { Command } from 'commander';
import { writeFileSync } from 'node:fs';
import { TestApiServer } from '../sandbox/apiserver/server.js';
import { testKubeconfig } from '../sandbox/apiserver/kubeconfig.js';

export function registerTestApiServer(program: Command): void {
  program
    .command('test-apiserver')
    .description('run the in-memory test double of the Kubernetes API server (tests and sandbox only)')
    .option('--host <addr>', 'listen address', '127.0.0.1')
    .option('--port <n>', 'listen port (0: any)', '0')
    .option('--kubeconfig-out <file>', 'write a kubeconfig for it here')
    .action(async (o: { host: string; port: string; kubeconfigOut?: string }) => {
      const server = new TestApiServer({ host: o.host, port: Number(o.port) });
      await server.start();
      if (o.kubeconfigOut) writeFileSync(o.kubeconfigOut, testKubeconfig(server.url));
      process.stdout.write(`test API server listening on ${server.url}\n`);
      await new Promise<void>((resolve) => {
        process.once('SIGTERM', () => resolve());
        process.once('SIGINT', () => resolve());
      });
      await server.stop();
    });
}
