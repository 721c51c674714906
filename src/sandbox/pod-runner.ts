// A container of the rendered manifests, run on a sandbox node as a kubelet would run it:
// its command and args, its env (values, and the downward API's spec.nodeName,
// metadata.namespace, metadata.name), its ConfigMap and emptyDir volumes materialized in a
// per-pod directory, hostPath volumes as they are, and its ServiceAccount's token, CA and
// namespace where every pod has them (/var/run/secrets/kubernetes.io/serviceaccount).
//
// On this machine's own filesystem (not from the image) a container's paths are mapped:
// /opt/ferry is this build, a ConfigMap's or emptyDir's mountPath its directory (in argv and
// env), and the service account directory is bind-mounted at its real path in a private
// mount namespace (the agent and the operator read it there).
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
const IMAGE_ROOT = '/opt/ferry';

type EnvVar = { name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string } } & Record<string, unknown> };
type Mount = { name: string; mountPath: string; readOnly?: boolean; mountPropagation?: string };
type Volume = { name: string; configMap?: { name: string }; hostPath?: { path: string }; emptyDir?: object };
export type Workload = {
  kind: string;
  metadata: { name: string; namespace?: string };
  spec: { template: { spec: { serviceAccountName?: string; containers: Array<{ name: string; command?: string[]; args?: string[]; env?: EnvVar[]; volumeMounts?: Mount[] }>; volumes?: Volume[] } } };
};

export interface PodContext {
  nodeName: string;
  podName: string;
  /** The per-pod directory volumes are materialized in. */
  dir: string;
  /** The ServiceAccount's bearer token, and the cluster CA (PEM). */
  token: string;
  ca: string;
  /** ConfigMaps by name (their data), from the same manifests. */
  configMaps: Map<string, Record<string, string>>;
}

export interface PodLaunch {
  /** On this machine's filesystem (paths mapped). */
  argv: string[];
  env: Record<string, string>;
  /** As written, for a container from the image (its paths are real there). */
  container: { argv: string[]; env: Record<string, string> };
  /** Where the ServiceAccount's files are on this machine. */
  serviceAccountDir: string;
  /** Volumes by mountPath: the directory on this machine (configMap, emptyDir) or the hostPath. */
  mounts: Array<{ mountPath: string; hostPath: string; readOnly: boolean; kind: 'configMap' | 'emptyDir' | 'hostPath'; hostToContainer?: boolean }>;
}

/** What running `container` of `w` on a node takes; `root`: where /opt/ferry is on this machine. */
export function podLaunch(w: Workload, container: string, ctx: PodContext, root: string): PodLaunch {
  const pod = w.spec.template.spec;
  const c = pod.containers.find((x) => x.name === container);
  if (!c) throw new Error(`${w.kind}/${w.metadata.name}: no container ${container}`);
  const namespace = w.metadata.namespace ?? 'default';
  const sa = join(ctx.dir, 'serviceaccount');
  mkdirSync(sa, { recursive: true });
  writeFileSync(join(sa, 'token'), ctx.token, { mode: 0o600 });
  writeFileSync(join(sa, 'ca.crt'), ctx.ca);
  writeFileSync(join(sa, 'namespace'), namespace);
  const mounts: PodLaunch['mounts'] = [];
  for (const m of c.volumeMounts ?? []) {
    const v = pod.volumes?.find((x) => x.name === m.name);
    if (!v) throw new Error(`${w.metadata.name}/${container}: volumeMount ${m.name} names no volume`);
    if (v.hostPath) {
      mounts.push({ mountPath: m.mountPath, hostPath: v.hostPath.path, readOnly: Boolean(m.readOnly), kind: 'hostPath', ...(m.mountPropagation === 'HostToContainer' ? { hostToContainer: true } : {}) });
      continue;
    }
    const dir = join(ctx.dir, 'volumes', m.name);
    mkdirSync(dir, { recursive: true });
    if (v.configMap) {
      const data = ctx.configMaps.get(v.configMap.name);
      if (!data) throw new Error(`${w.metadata.name}/${container}: no ConfigMap ${v.configMap.name} in the manifests`);
      for (const [k, text] of Object.entries(data)) writeFileSync(join(dir, k), text);
      mounts.push({ mountPath: m.mountPath, hostPath: dir, readOnly: true, kind: 'configMap' });
    } else if (v.emptyDir) {
      mounts.push({ mountPath: m.mountPath, hostPath: dir, readOnly: false, kind: 'emptyDir' });
    } else {
      throw new Error(`${w.metadata.name}/${container}: volume ${m.name} is of a kind the sandbox does not run`);
    }
  }
  // On this machine's filesystem: container paths become the directories that stand for them.
  const mapped = [{ from: IMAGE_ROOT, to: root }, ...mounts.filter((m) => m.kind !== 'hostPath').map((m) => ({ from: m.mountPath, to: m.hostPath }))];
  const map = (s: string) => {
    for (const { from, to } of mapped) if (s === from || s.startsWith(`${from}/`)) return to + s.slice(from.length);
    return s;
  };
  const field = (path: string) => {
    const known: Record<string, string> = { 'spec.nodeName': ctx.nodeName, 'metadata.namespace': namespace, 'metadata.name': ctx.podName };
    if (!(path in known)) throw new Error(`${w.metadata.name}/${container}: fieldRef ${path} is not one the sandbox fills in`);
    return known[path]!;
  };
  const env: Record<string, string> = {};
  for (const e of c.env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.valueFrom?.fieldRef) env[e.name] = field(e.valueFrom.fieldRef.fieldPath);
    else throw new Error(`${w.metadata.name}/${container}: env ${e.name} comes from a source the sandbox does not fill in`);
  }
  const argv = [...(c.command ?? []), ...(c.args ?? [])];
  return {
    argv: argv.map(map),
    env: Object.fromEntries(Object.entries(env).map(([k, v]) => [k, map(v)])),
    container: { argv, env },
    serviceAccountDir: sa,
    mounts,
  };
}

/**
 * argv that runs `launch` with its service account directory bind-mounted at the real path,
 * in a mount namespace of its own (nothing is mounted on this machine's view). It is a
 * slave of this machine's: what is mounted here later still reaches it, as the
 * DaemonSet's HostToContainer volumes (the namespace pins the runtime makes under
 * /run/netns after the agent started; a private namespace never saw them).
 */
export function withServiceAccount(launch: PodLaunch, argv: readonly string[]): string[] {
  mkdirSync(SERVICE_ACCOUNT_DIR, { recursive: true }); // an empty mount point (/var/run is a tmpfs)
  const script = 'mount --bind "$0" "$1" && shift && exec "$@"';
  return ['unshare', '--mount', '--propagation', 'slave', 'sh', '-c', script, launch.serviceAccountDir, SERVICE_ACCOUNT_DIR, ...argv];
}
