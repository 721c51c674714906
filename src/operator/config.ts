// Operator configuration: defaults, then a YAML file, then environment (FERRY_*), then
// flags, every key checked. In a pod, POD_NAMESPACE and POD_NAME (from the downward API)
// give the Lease's namespace and this replica's identity.
import { hostname } from 'node:os';
import { booleanSetting, configError as bad, hostPortSetting, integerSetting, logLevelSetting, readConfigFile, settingsFromEnv, type LogLevel } from '../config-file.js';

export interface OperatorConfig {
  /** kubeconfig path; empty: in-cluster. */
  kubeconfig: string;
  /** Where the leader Lease lives (the agent's namespace). */
  namespace: string;
  leaseName: string;
  /** This replica in the Lease (default: $POD_NAME, else hostname_pid). */
  identity: string;
  leaseDurationSeconds: number;
  renewDeadlineSeconds: number;
  retryPeriodSeconds: number;
  /** Serve LoadBalancer Services without spec.loadBalancerClass (not only class ferry.dev/lb). */
  handleUnclassed: boolean;
  /** Status writes in flight at once. */
  statusWriteConcurrency: number;
  /** A full pass even without changes (a safety net under the watches). */
  resyncPeriodSeconds: number;
  healthzBindAddress: string;
  metricsBindAddress: string;
  logLevel: LogLevel;
}

export const DEFAULT_OPERATOR_CONFIG: OperatorConfig = {
  kubeconfig: '',
  namespace: 'kube-system',
  leaseName: 'ferry-operator',
  identity: '',
  // Failover after a crash takes at most leaseDuration + retryPeriod: 12 s.
  leaseDurationSeconds: 10,
  renewDeadlineSeconds: 7,
  retryPeriodSeconds: 2,
  handleUnclassed: true,
  statusWriteConcurrency: 32,
  resyncPeriodSeconds: 300,
  healthzBindAddress: '0.0.0.0:9254',
  metricsBindAddress: '127.0.0.1:9253',
  logLevel: 'info',
};

const NAME = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;

export function mergeOperatorConfig(base: OperatorConfig, input: Record<string, unknown>, source: string): OperatorConfig {
  const out = { ...base };
  for (const [key, value] of Object.entries(input)) {
    if (value === undefined) continue;
    const where = `${key} (from ${source})`;
    switch (key) {
      case 'kubeconfig':
      case 'identity':
        if (typeof value !== 'string' || value.length > 253) throw bad(where, `is ${JSON.stringify(value)}`, 'a string');
        out[key] = value;
        break;
      case 'namespace':
      case 'leaseName':
        if (typeof value !== 'string' || !NAME.test(value)) throw bad(where, `is ${JSON.stringify(value)}`, 'a Kubernetes object name (lower case, digits, - and .)');
        out[key] = value;
        break;
      case 'leaseDurationSeconds':
      case 'renewDeadlineSeconds':
      case 'retryPeriodSeconds':
        out[key] = integerSetting(where, value, 1, 600);
        break;
      case 'statusWriteConcurrency':
        out[key] = integerSetting(where, value, 1, 256);
        break;
      case 'resyncPeriodSeconds':
        out[key] = integerSetting(where, value, 10, 86400);
        break;
      case 'handleUnclassed':
        out[key] = booleanSetting(where, value);
        break;
      case 'healthzBindAddress':
      case 'metricsBindAddress':
        out[key] = hostPortSetting(where, value);
        break;
      case 'logLevel':
        out.logLevel = logLevelSetting(where, value);
        break;
      default:
        throw bad(key, `is not a setting (from ${source})`, `settings: ${Object.keys(DEFAULT_OPERATOR_CONFIG).join(', ')}`);
    }
  }
  // client-go's rule: the leader steps down before its lease could expire, and renews often enough to keep it.
  if (!(out.retryPeriodSeconds < out.renewDeadlineSeconds && out.renewDeadlineSeconds < out.leaseDurationSeconds)) {
    throw bad('renewDeadlineSeconds', `retry ${out.retryPeriodSeconds}s, renew deadline ${out.renewDeadlineSeconds}s, lease ${out.leaseDurationSeconds}s`, 'retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds');
  }
  return out;
}

export function loadOperatorConfig(opts: { file?: string; env?: NodeJS.ProcessEnv; flags?: Record<string, unknown> }): OperatorConfig {
  const env = opts.env ?? {};
  let cfg = DEFAULT_OPERATOR_CONFIG;
  if (env.POD_NAMESPACE) cfg = mergeOperatorConfig(cfg, { namespace: env.POD_NAMESPACE }, 'POD_NAMESPACE');
  if (env.POD_NAME) cfg = mergeOperatorConfig(cfg, { identity: env.POD_NAME }, 'POD_NAME');
  if (opts.file) cfg = mergeOperatorConfig(cfg, readConfigFile(opts.file), opts.file);
  cfg = mergeOperatorConfig(cfg, settingsFromEnv(env, Object.keys(DEFAULT_OPERATOR_CONFIG)), 'environment');
  cfg = mergeOperatorConfig(cfg, opts.flags ?? {}, 'flags');
  if (!cfg.identity) cfg = { ...cfg, identity: `${hostname()}_${process.pid}` };
  return cfg;
}
