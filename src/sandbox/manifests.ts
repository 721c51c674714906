// What the shipped manifests (deploy/kubernetes/) say about the DaemonSet's containers (the
// agent, FRR), read the way a kubelet would, so the sandbox runs them as the DaemonSet would.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';

const PACKAGE_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const AGENT_MANIFEST = join(PACKAGE_ROOT, 'deploy', 'kubernetes', 'base', 'agent.yaml');

export interface ContainerSecurity {
  privileged: boolean;
  hostPID: boolean;
  runAsUser: number | undefined;
  drop: string[];
  /** Capability names as the manifest spells them (BPF, NET_ADMIN…). */
  add: string[];
  /** The pod's supplementalGroups: every container's process has them. */
  supplementalGroups: number[];
}

interface PodSpec {
  hostPID?: boolean;
  securityContext?: { runAsUser?: number; supplementalGroups?: number[] };
  containers: Array<{ name: string; securityContext?: { privileged?: boolean; runAsUser?: number; capabilities?: { add?: string[]; drop?: string[] } } }>;
}

/** containerd's default capabilities: what a container has before its securityContext's drop and add. */
const RUNTIME_DEFAULT_CAPABILITIES = ['CHOWN', 'DAC_OVERRIDE', 'FSETID', 'FOWNER', 'MKNOD', 'NET_RAW', 'SETGID', 'SETUID', 'SETFCAP', 'SETPCAP', 'NET_BIND_SERVICE', 'SYS_CHROOT', 'KILL', 'AUDIT_WRITE'];

/** The capabilities a container of these settings runs with (names without CAP_). */
export function containerCapabilities(sc: Pick<ContainerSecurity, 'drop' | 'add'>): string[] {
  const base = sc.drop.includes('ALL') ? [] : RUNTIME_DEFAULT_CAPABILITIES.filter((c) => !sc.drop.includes(c));
  return [...new Set([...base, ...sc.add])];
}

/** A container's security settings in the DaemonSet among `objects` (default: the base manifest's). */
export function daemonSetSecurity(container: string, objects: readonly unknown[] = parseAllDocuments(readFileSync(AGENT_MANIFEST, 'utf8')).map((d) => d.toJSON())): ContainerSecurity {
  const docs = objects as Array<{ kind?: string; spec?: { template?: { spec?: PodSpec } } } | null>;
  const pod = docs.find((d) => d?.kind === 'DaemonSet')?.spec?.template?.spec;
  const c = pod?.containers.find((x) => x.name === container);
  if (!pod || !c) throw new Error(`the manifests have no DaemonSet with a ${container} container`);
  const sc = c.securityContext ?? {};
  return {
    privileged: sc.privileged ?? false,
    hostPID: pod.hostPID ?? false,
    runAsUser: sc.runAsUser ?? pod.securityContext?.runAsUser,
    drop: sc.capabilities?.drop ?? [],
    add: sc.capabilities?.add ?? [],
    supplementalGroups: pod.securityContext?.supplementalGroups ?? [],
  };
}

/** The agent container's security settings in the DaemonSet among `objects` (default: the base manifest's). */
export const agentSecurity = (objects?: readonly unknown[]): ContainerSecurity => daemonSetSecurity('agent', objects);
