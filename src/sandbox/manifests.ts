// What the shipped manifests (deploy/kubernetes/) say about the agent's container, read the
// way a kubelet would, so the sandbox runs the agent as the DaemonSet would.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';

const PACKAGE_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const AGENT_MANIFEST = join(PACKAGE_ROOT, 'deploy', 'kubernetes', 'base', 'agent.yaml');

export interface AgentSecurity {
  privileged: boolean;
  hostPID: boolean;
  runAsUser: number | undefined;
  drop: string[];
  /** Capability names as the manifest spells them (BPF, NET_ADMIN…). */
  add: string[];
}

interface PodSpec {
  hostPID?: boolean;
  securityContext?: { runAsUser?: number };
  containers: Array<{ name: string; securityContext?: { privileged?: boolean; runAsUser?: number; capabilities?: { add?: string[]; drop?: string[] } } }>;
}

/** The agent container's security settings in the DaemonSet among `objects` (default: the base manifest's). */
export function agentSecurity(objects: readonly unknown[] = parseAllDocuments(readFileSync(AGENT_MANIFEST, 'utf8')).map((d) => d.toJSON())): AgentSecurity {
  const docs = objects as Array<{ kind?: string; spec?: { template?: { spec?: PodSpec } } } | null>;
  const pod = docs.find((d) => d?.kind === 'DaemonSet')?.spec?.template?.spec;
  const agent = pod?.containers.find((c) => c.name === 'agent');
  if (!pod || !agent) throw new Error('the manifests have no DaemonSet with an agent container');
  const sc = agent.securityContext ?? {};
  return {
    privileged: sc.privileged ?? false,
    hostPID: pod.hostPID ?? false,
    runAsUser: sc.runAsUser ?? pod.securityContext?.runAsUser,
    drop: sc.capabilities?.drop ?? [],
    add: sc.capabilities?.add ?? [],
  };
}
