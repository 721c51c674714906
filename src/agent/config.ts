// Agent configuration: defaults, then a YAML file, then environment (FERRY_*), then flags.
// Every key is validated; an error says which key, what is wrong and what is allowed.
import { isIP, isIPv4, isIPv6 } from 'node:net';
import { booleanSetting, configError as bad, hostPortSetting, integerSetting, logLevelSetting, readConfigFile, settingsFromEnv, type LogLevel } from '../config-file.js';
import { ACCELERATIONS, DEFAULT_MAP_SIZES, DEFAULT_SNAT_PORTS, type Acceleration, type MapSizes } from '../datapath/loader.js';
import { isPrime } from '../datapath/maglev.js';
import { deviceEntryProblem } from './devices.js';
import { TC_ATTACH_SETTINGS, type TcAttachSetting } from '../datapath/tc-hooks.js';

/**
 * V8 settings the agent runs with (the DaemonSet's command, the sandbox): a small young
 * generation, and gc exposed so that the start's garbage is collected once the first sync
 * is done. Slow heap growth as well (the operator's --heap-growing-percent=20..30) took
 * more memory off at 50k Services but put major collections under load: one-change p99
 * 201 ms against 26–33 ms (bench/agent-sync.ts).
 */
export const AGENT_NODE_FLAGS = ['--max-semi-space-size=4', '--expose-gc'];

export interface AgentConfig {
  nodeName: string;
  /** kubeconfig path; empty: in-cluster (on Talos, KubePrism at localhost:7445). */
  kubeconfig: string;
  /** External devices for tc (NodePort, LB IPs, externalIPs): names or patterns; empty: the node addresses' and default routes' devices. */
  devices: string[];
  /** The address remote flows are SNATed to; default: the node's first InternalIP. */
  snatIPv4: string;
  /** ... IPv6 flows; default: the node's first IPv6 InternalIP (none: IPv6 to remote backends is dropped). */
  snatIPv6: string;
  /** Extra node addresses serving NodePorts (beyond the Node object's). */
  nodePortAddresses: string[];
  pinDir: string;
  objectsDir: string;
  cgroupRoot: string;
  /** Require the real cgroup v2 hierarchy root (false only in the sandbox). */
  cgroupMustBeRoot: boolean;
  healthzBindAddress: string;
  metricsBindAddress: string;
  /** Serve per-Service health check node ports on this address (empty: all). */
  healthCheckBindAddress: string;
  syncPeriodSeconds: number;
  /** How often a sync reads the maps back and puts right whatever differs from the desired state. */
  fullSyncPeriodSeconds: number;
  minSyncPeriodMs: number;
  ctGcIntervalSeconds: number;
  /** How often the devices are chosen again; a new one (hotplug) gets the tc programs. */
  deviceScanSeconds: number;
  hashSeed: number;
  /** Remote backends through snat, dsr, or hybrid (DSR for TCP, SNAT for UDP). */
  forwardingMode: 'snat' | 'dsr' | 'hybrid';
  /** XDP before tc on the devices: none, native (a device whose driver has none is an
   * error), or best-effort (native where the driver has it; elsewhere none, or generic XDP
   * on a device xdpDevices names). */
  acceleration: Acceleration;
  /** How the tc programs attach: auto (tcx where the kernel has it, Linux 6.6+), tcx, or clsact (tc-hooks.ts). */
  tcAttach: TcAttachSetting;
  /** Which devices get XDP (generic too, under best-effort): names or patterns among `devices`; empty: all but tunnels and stacked devices, native only (xdp-choice.ts). */
  xdpDevices: string[];
  /** Maglev for external frontends: the table size (a prime, e.g. 16381); 0 keeps the flow hash. */
  maglevTableSize: number;
  snatPortMin: number;
  snatPortMax: number;
  /** ICMP errors the datapath sends (unreachable, fragmentation needed, time exceeded), per CPU. */
  icmpRatePerSec: number;
  icmpBurst: number;
  mapSizes: MapSizes;
  /** Where the agent's Leases live (L2 heartbeats): its own namespace. */
  namespace: string;
  /** L2 announcements: a node whose heartbeat has not changed for this long is taken for dead. */
  l2LeaseDurationSeconds: number;
  l2RenewIntervalMs: number;
  /** On a clean stop the agent's addresses stay its own this long (a restart moves none). */
  l2StopHoldSeconds: number;
  /** BGP through FRR beside the agent: vtysh, and FRR's pathspace ('' for the default instance). */
  vtyshPath: string;
  frrPathspace: string;
  logLevel: LogLevel;
}

export const DEFAULT_CONFIG: AgentConfig = {
  nodeName: '',
  kubeconfig: '',
  devices: [],
  snatIPv4: '',
  snatIPv6: '',
  nodePortAddresses: [],
  pinDir: '/sys/fs/bpf/ferry',
  objectsDir: '',
  cgroupRoot: '/sys/fs/cgroup',
  cgroupMustBeRoot: true,
  healthzBindAddress: '0.0.0.0:10256',
  metricsBindAddress: '127.0.0.1:10249',
  healthCheckBindAddress: '',
  syncPeriodSeconds: 30,
  fullSyncPeriodSeconds: 3600,
  minSyncPeriodMs: 100,
  ctGcIntervalSeconds: 30,
  deviceScanSeconds: 5,
  hashSeed: 0,
  forwardingMode: 'snat',
  acceleration: 'none',
  tcAttach: 'auto',
  xdpDevices: [],
  maglevTableSize: 0,
  snatPortMin: DEFAULT_SNAT_PORTS.min,
  snatPortMax: DEFAULT_SNAT_PORTS.max,
  icmpRatePerSec: 1000,
  icmpBurst: 50,
  mapSizes: DEFAULT_MAP_SIZES,
  namespace: 'kube-system',
  l2LeaseDurationSeconds: 2,
  l2RenewIntervalMs: 500,
  l2StopHoldSeconds: 10,
  vtyshPath: '/usr/bin/vtysh',
  frrPathspace: '',
  logLevel: 'info',
};

/** Merge a partial config (from YAML, env or flags) into a full one, checking every key. */
export function mergeConfig(base: AgentConfig, input: Record<string, unknown>, source: string): AgentConfig {
  const out: AgentConfig = { ...base, mapSizes: { ...base.mapSizes } };
  for (const [key, value] of Object.entries(input)) {
    if (value === undefined) continue;
    const where = `${key} (from ${source})`;
    switch (key) {
      case 'namespace':
        if (typeof value !== 'string' || !/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(value)) throw bad(where, `is ${JSON.stringify(value)}`, 'a namespace name');
        out.namespace = value;
        break;
      case 'vtyshPath':
        if (typeof value !== 'string' || !value.startsWith('/')) throw bad(where, `is ${JSON.stringify(value)}`, 'an absolute path');
        out.vtyshPath = value;
        break;
      case 'frrPathspace':
        if (typeof value !== 'string' || (value !== '' && !/^[a-zA-Z0-9_.-]{1,64}$/.test(value))) throw bad(where, `is ${JSON.stringify(value)}`, 'an FRR pathspace name ([a-zA-Z0-9_.-]), or "" for the default instance');
        out.frrPathspace = value;
        break;
      case 'nodeName':
      case 'kubeconfig':
      case 'pinDir':
      case 'objectsDir':
      case 'cgroupRoot':
      case 'healthCheckBindAddress':
        if (typeof value !== 'string') throw bad(where, `is ${JSON.stringify(value)}`, 'a string');
        out[key] = value;
        break;
      case 'snatIPv4':
        if (typeof value !== 'string' || (value !== '' && !isIPv4(value))) throw bad(where, `is ${JSON.stringify(value)}`, 'an IPv4 address');
        out.snatIPv4 = value;
        break;
      case 'snatIPv6':
        if (typeof value !== 'string' || (value !== '' && (!isIPv6(value) || value.includes('%')))) throw bad(where, `is ${JSON.stringify(value)}`, 'an IPv6 address');
        out.snatIPv6 = value;
        break;
      case 'devices':
      case 'xdpDevices':
      case 'nodePortAddresses': {
        const list = typeof value === 'string' ? value.split(',').map((s) => s.trim()).filter(Boolean) : value;
        if (!Array.isArray(list) || list.some((x) => typeof x !== 'string')) throw bad(where, `is ${JSON.stringify(value)}`, 'a list of strings (or a comma-separated string)');
        if (key === 'nodePortAddresses' && list.some((x) => !isIP(x as string) || (x as string).includes('%'))) throw bad(where, `has an entry that is not an IP address`, 'IPv4 or IPv6 addresses, without a zone');
        const problem = key !== 'nodePortAddresses' ? list.map((x) => deviceEntryProblem(x as string)).find(Boolean) : undefined;
        if (problem) throw bad(where, `has an entry that ${problem}`, 'interface names (at most 15 characters) or patterns such as enp.*');
        out[key] = list as string[];
        break;
      }
      case 'cgroupMustBeRoot':
        out.cgroupMustBeRoot = booleanSetting(where, value);
        break;
      case 'healthzBindAddress':
      case 'metricsBindAddress':
        out[key] = hostPortSetting(where, value);
        break;
      case 'maglevTableSize': {
        const n = typeof value === 'string' ? Number(value) : value;
        if (typeof n !== 'number' || !(n === 0 || (isPrime(n) && n >= 101 && n <= 131071))) throw bad(where, `is ${JSON.stringify(value)}`, '0 (off) or a prime in 101..131071, e.g. 16381');
        out.maglevTableSize = n;
        break;
      }
      case 'l2LeaseDurationSeconds':
      case 'l2RenewIntervalMs':
      case 'l2StopHoldSeconds':
      case 'syncPeriodSeconds':
      case 'fullSyncPeriodSeconds':
      case 'minSyncPeriodMs':
      case 'ctGcIntervalSeconds':
      case 'deviceScanSeconds':
      case 'hashSeed':
      case 'snatPortMin':
      case 'snatPortMax':
      case 'icmpRatePerSec':
      case 'icmpBurst': {
        const ranges: Record<string, [number, number]> = {
          syncPeriodSeconds: [1, 86400], fullSyncPeriodSeconds: [10, 604800], minSyncPeriodMs: [0, 60000], ctGcIntervalSeconds: [1, 3600], deviceScanSeconds: [1, 3600], hashSeed: [0, 2 ** 32 - 1], snatPortMin: [1024, 65535], snatPortMax: [1024, 65535],
          icmpRatePerSec: [1, 1_000_000], icmpBurst: [1, 1_000_000],
          l2LeaseDurationSeconds: [1, 300], l2RenewIntervalMs: [100, 60_000], l2StopHoldSeconds: [0, 3600],
        };
        const [lo, hi] = ranges[key]!;
        out[key] = integerSetting(where, value, lo, hi);
        break;
      }
      case 'mapSizes': {
        if (typeof value !== 'object' || value === null) throw bad(where, `is ${JSON.stringify(value)}`, `an object with ${Object.keys(DEFAULT_MAP_SIZES).join(', ')}`);
        for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
          if (!(k in DEFAULT_MAP_SIZES)) throw bad(`mapSizes.${k} (from ${source})`, 'is not a map size', Object.keys(DEFAULT_MAP_SIZES).join(', '));
          if (typeof v !== 'number' || !Number.isInteger(v) || v < 16 || v > 16_777_216) throw bad(`mapSizes.${k} (from ${source})`, `is ${JSON.stringify(v)}`, 'an integer in 16..16777216');
          out.mapSizes[k as keyof MapSizes] = v;
        }
        break;
      }
      case 'forwardingMode':
        if (!['snat', 'dsr', 'hybrid'].includes(value as string)) throw bad(where, `is ${JSON.stringify(value)}`, 'snat, dsr or hybrid');
        out.forwardingMode = value as AgentConfig['forwardingMode'];
        break;
      case 'acceleration':
        if (!(ACCELERATIONS as readonly unknown[]).includes(value)) throw bad(where, `is ${JSON.stringify(value)}`, ACCELERATIONS.join(', '));
        out.acceleration = value as Acceleration;
        break;
      case 'tcAttach':
        if (!(TC_ATTACH_SETTINGS as readonly unknown[]).includes(value)) throw bad(where, `is ${JSON.stringify(value)}`, TC_ATTACH_SETTINGS.join(', '));
        out.tcAttach = value as TcAttachSetting;
        break;
      case 'logLevel':
        out.logLevel = logLevelSetting(where, value);
        break;
      default:
        throw bad(key, `is not a setting (from ${source})`, `settings: ${Object.keys(DEFAULT_CONFIG).join(', ')}`);
    }
  }
  if (out.l2RenewIntervalMs * 2 > out.l2LeaseDurationSeconds * 1000) throw bad('l2RenewIntervalMs', `${out.l2RenewIntervalMs} ms against a lease of ${out.l2LeaseDurationSeconds} s`, 'at most half the lease duration, so that one lost renew is not taken for death');
  if (out.snatPortMin > out.snatPortMax) throw bad('snatPortMin', `${out.snatPortMin} is above snatPortMax ${out.snatPortMax}`, 'min ≤ max');
  return out;
}

/** FERRY_NODE_NAME=… → nodeName, and so on. */
export function configFromEnv(env: NodeJS.ProcessEnv): Record<string, unknown> {
  return settingsFromEnv(env, Object.keys(DEFAULT_CONFIG), ['mapSizes']);
}

export function loadConfig(opts: { file?: string; env?: NodeJS.ProcessEnv; flags?: Record<string, unknown> }): AgentConfig {
  let cfg = DEFAULT_CONFIG;
  // In a pod, its namespace (downward API) is where the agent's Leases go, unless set.
  if (opts.env?.POD_NAMESPACE) cfg = mergeConfig(cfg, { namespace: opts.env.POD_NAMESPACE }, 'POD_NAMESPACE');
  if (opts.file) cfg = mergeConfig(cfg, readConfigFile(opts.file), opts.file);
  cfg = mergeConfig(cfg, configFromEnv(opts.env ?? {}), 'environment');
  cfg = mergeConfig(cfg, opts.flags ?? {}, 'flags');
  // NODE_NAME, as DaemonSets usually pass spec.nodeName, is the fallback.
  if (!cfg.nodeName && opts.env?.NODE_NAME) cfg = { ...cfg, nodeName: opts.env.NODE_NAME };
  if (!cfg.nodeName) throw bad('nodeName', 'is not set', 'set --node-name, FERRY_NODE_NAME or NODE_NAME (the DaemonSet passes spec.nodeName)');
  return cfg;
}
