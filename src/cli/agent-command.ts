// `ferry agent`: run in place of kube-proxy on this node.
import { Command } from 'commander';
import { Agent, agentLogger } from '../agent/agent.js';
import { loadConfig } from '../agent/config.js';

export function registerAgent(program: Command): void {
  program
    .command('agent')
    .description('run the node agent (replaces kube-proxy): watch Services and EndpointSlices, program the datapath')
    .option('--config <file>', 'YAML configuration file')
    .option('--node-name <name>', 'this node (default: $NODE_NAME)')
    .option('--kubeconfig <file>', 'kubeconfig (default: in-cluster)')
    .option('--devices <list>', 'external devices for tc, comma-separated')
    .option('--pin-dir <dir>', 'bpffs directory for pinned maps and links')
    .option('--cgroup-root <dir>', 'cgroup v2 root for the socket hooks')
    .option('--healthz-bind-address <addr>', 'proxy health server (HOST:PORT)')
    .option('--metrics-bind-address <addr>', 'metrics server (HOST:PORT)')
    .option('--log-level <level>', 'trace, debug, info, warn or error')
    .action(async (o: Record<string, string | undefined>) => {
      const flags: Record<string, unknown> = {
        nodeName: o.nodeName, kubeconfig: o.kubeconfig, devices: o.devices, pinDir: o.pinDir, cgroupRoot: o.cgroupRoot,
        healthzBindAddress: o.healthzBindAddress, metricsBindAddress: o.metricsBindAddress, logLevel: o.logLevel,
      };
      const cfg = loadConfig({ file: o.config, env: process.env, flags });
      const log = agentLogger(cfg.logLevel);
      const agent = await Agent.start(cfg, log);
      await new Promise<void>((resolve) => {
        const stop = (sig: string) => {
          log.info({ signal: sig }, 'stopping; the datapath stays in place for the next agent');
          resolve();
        };
        process.once('SIGTERM', () => stop('SIGTERM'));
        process.once('SIGINT', () => stop('SIGINT'));
      });
      await agent.stop();
      // Informer HTTP keep-alive sockets would hold the process open: leave now.
      process.exit(0);
    });
}
