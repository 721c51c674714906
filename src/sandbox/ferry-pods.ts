// ferry's pods on the sandbox's nodes, started from the rendered manifests (the generic
// overlay, pointed at the sandbox's API server): the DaemonSet's agent container on every
// node, the operator Deployment's container on the first two, each as its ServiceAccount.
// The nodes share one kernel, which a real cluster's do not, so each agent also gets its own
// pin directory and cgroup (FERRY_PIN_DIR, FERRY_CGROUP_ROOT, FERRY_CGROUP_MUST_BE_ROOT) and,
// with BGP, the pathspace of its node's FRR on this machine, or, with the image, the
// DaemonSet's frr container beside it. Tests add settings (env) and flags on top.
import { dirname, join } from 'node:path';
import type { ContainerImage } from './container.js';
import type { ClusterIdentity } from './cluster-identity.js';
import { AGENT_USER, OPERATOR_USER } from './cluster-identity.js';
import { containerCapabilities, daemonSetSecurity } from './manifests.js';
import type { Host, Proc } from './netns/testbed.js';
import { SERVICE_ACCOUNT_DIR, podLaunch, withServiceAccount, type PodContext, type Workload } from './pod-runner.js';

export interface AgentStart {
  /** Another build's ferry command (bin/ferry.js): an upgrade test's previous release. */
  bin?: string;
  env?: Record<string, string | undefined>;
  /** --devices (names or patterns); absent: the ConfigMap's (chosen on the node). */
  devices?: string;
  /** The only capabilities it has (e.g. ['bpf', 'net_admin']); absent: all of root's. */
  capabilities?: string[];
}

export class FerryPods {
  constructor(
    private readonly identity: ClusterIdentity,
    /** Where each pod's volumes and service account files go. */
    private readonly dir: string,
    private readonly ferryRoot: string,
    private readonly image: ContainerImage | undefined,
  ) {}

  private workload(kind: string, name: string): Workload {
    const w = this.identity.objects.find((o) => o.kind === kind && o.metadata.name === name);
    if (!w) throw new Error(`the manifests have no ${kind} ${name}`);
    return w as unknown as Workload;
  }

  private context(nodeName: string, podName: string, user: string): PodContext {
    const configMaps = new Map(this.identity.objects.filter((o) => o.kind === 'ConfigMap').map((o) => [o.metadata.name, (o as unknown as { data: Record<string, string> }).data]));
    return { nodeName, podName, dir: join(this.dir, 'pods', podName), token: this.identity.tokenOf(user), ca: this.identity.ca, configMaps };
  }

  /** The agent container of the DaemonSet, on `host` (node `nodeName`). */
  async agent(host: Host, nodeName: string, settings: Record<string, string>, o: AgentStart): Promise<Proc> {
    const root = o.bin ? join(dirname(o.bin), '..') : this.ferryRoot;
    const launch = podLaunch(this.workload('DaemonSet', 'ferry'), 'agent', this.context(nodeName, `ferry-${nodeName}`, AGENT_USER), root);
    const flags = o.devices ? ['--devices', o.devices] : [];
    const extra = { ...settings, ...definedOnly(o.env ?? {}) };
    if (this.image && !o.bin) {
      const security = daemonSetSecurity('agent', this.identity.objects); // as rendered: what the pod starts from
      const c = launch.container;
      return this.image.run(host, `agent-${nodeName}`, {
        args: [...c.argv, ...flags],
        env: { ...c.env, ...extra },
        capabilities: o.capabilities ?? containerCapabilities(security),
        uid: security.runAsUser,
        groups: security.supplementalGroups,
        workingDir: '/opt/ferry',
        binds: [
          ...launch.mounts.map((m) => ({ path: m.mountPath, source: m.hostPath, readOnly: m.readOnly, ...(m.hostToContainer ? { propagation: 'HostToContainer' as const } : {}) })),
          { path: SERVICE_ACCOUNT_DIR, source: launch.serviceAccountDir, readOnly: true },
        ],
      });
    }
    // Root keeps only what the bounding set allows across exec, as in a container without privileged.
    const limit = o.capabilities ? ['setpriv', `--bounding-set=-all,${o.capabilities.map((c) => `+${c}`).join(',')}`, '--'] : [];
    return host.spawn(withServiceAccount(launch, [...limit, ...nodeBinary(launch.argv), ...flags]), { PATH: process.env.PATH, ...launch.env, ...extra });
  }

  /**
   * The DaemonSet's frr container from the image, on `host` (node `nodeName`): FRR as a real
   * node runs it, sharing its emptyDir volumes (FRR's sockets and configuration) with the
   * node's agent container.
   */
  async frr(host: Host, nodeName: string): Promise<Proc> {
    if (!this.image) throw new Error('the frr container runs from the image only (agentImage)');
    const launch = podLaunch(this.workload('DaemonSet', 'ferry'), 'frr', this.context(nodeName, `ferry-${nodeName}`, AGENT_USER), this.ferryRoot);
    const security = daemonSetSecurity('frr', this.identity.objects);
    return this.image.run(host, `frr-${nodeName}`, {
      args: launch.container.argv,
      env: launch.container.env,
      capabilities: containerCapabilities(security),
      uid: security.runAsUser,
      groups: security.supplementalGroups,
      binds: launch.mounts.map((m) => ({ path: m.mountPath, source: m.hostPath, readOnly: m.readOnly })),
    });
  }

  /** The operator Deployment's container, as the replica `podName` on `host`. */
  operator(host: Host, nodeName: string, podName: string, env: Record<string, string>): Proc {
    const launch = podLaunch(this.workload('Deployment', 'ferry-operator'), 'operator', this.context(nodeName, podName, OPERATOR_USER), this.ferryRoot);
    return host.spawn(withServiceAccount(launch, nodeBinary(launch.argv)), { PATH: process.env.PATH, ...launch.env, ...env });
  }
}

/** `node …` as this process's node (the build was made for it). */
const nodeBinary = (argv: string[]) => (argv[0] === 'node' ? [process.execPath, ...argv.slice(1)] : argv);

const definedOnly = (env: Record<string, string | undefined>) => Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined));
