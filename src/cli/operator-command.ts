// `ferry operator`: LB-IPAM for LoadBalancer Services (run as a Deployment, 2 replicas).
import { Command } from 'commander';
import { loadOperatorConfig } from '../operator/config.js';
import { Operator, operatorLogger } from '../operator/operator.js';

export function registerOperator(program: Command): void {
  program
    .command('operator')
    .description('run the operator: give LoadBalancer Services addresses from LoadBalancerIPPools (leader-elected)')
    .option('--config <file>', 'YAML configuration file')
    .option('--kubeconfig <file>', 'kubeconfig (default: in-cluster)')
    .option('--namespace <ns>', 'namespace of the leader Lease (default: $POD_NAMESPACE, else kube-system)')
    .option('--identity <id>', 'this replica in the Lease (default: $POD_NAME, else hostname_pid)')
    .option('--no-handle-unclassed', 'leave Services without spec.loadBalancerClass alone (serve only class ferry.dev/lb)')
    .option('--healthz-bind-address <addr>', 'health server, /healthz and /readyz (HOST:PORT)')
    .option('--metrics-bind-address <addr>', 'metrics and /status (HOST:PORT)')
    .option('--log-level <level>', 'trace, debug, info, warn or error')
    .action(async (o: Record<string, string | boolean | undefined>) => {
      const flags: Record<string, unknown> = {
        kubeconfig: o.kubeconfig, namespace: o.namespace, identity: o.identity, healthzBindAddress: o.healthzBindAddress, metricsBindAddress: o.metricsBindAddress, logLevel: o.logLevel,
        // commander sets handleUnclassed=true unless --no-handle-unclassed: only the "no" is a flag.
        handleUnclassed: o.handleUnclassed === false ? false : undefined,
      };
      const cfg = loadOperatorConfig({ file: o.config as string | undefined, env: process.env, flags });
      const log = operatorLogger(cfg.logLevel);
      const operator = await Operator.start(cfg, log);
      await new Promise<void>((resolve) => {
        const stop = (signal: string) => {
          log.info({ signal }, 'stopping; giving the lease up');
          resolve();
        };
        process.once('SIGTERM', () => stop('SIGTERM'));
        process.once('SIGINT', () => stop('SIGINT'));
      });
      await operator.stop();
      process.exit(0);
    });
}
