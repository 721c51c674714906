// Run ferry from its OCI image as a kubelet would run a hostNetwork pod's container: runc,
// the image's root filesystem read-only, the node's network namespace, new pid/ipc/mount
// namespaces, only the capabilities the securityContext adds, and hostPath mounts (bpffs,
// cgroupfs, the sandbox's kubeconfig). The sandbox uses it to prove the built image works.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { exec, execOk } from '../sys/exec.js';
import type { Host, Proc, Testbed } from './netns/testbed.js';

/** An image unpacked once per testbed (umoci unpack), shared read-only by its containers. */
export class ContainerImage {
  private constructor(
    private readonly tb: Testbed,
    readonly rootfs: string,
    /** The image's environment (PATH, NODE_ENV…), as a runtime passes it on. */
    readonly env: string[],
  ) {}

  /** Unpack `layout:tag` (an OCI layout directory) for this testbed. */
  static async unpack(tb: Testbed, layout: string, tag: string): Promise<ContainerImage> {
    if (!existsSync(join(layout, 'index.json'))) throw new Error(`container image: no OCI layout at ${layout} (make image)`);
    const bundle = join('/run/ferry/images', tb.prefix);
    tb.ownPath(bundle);
    await execOk('umoci', ['unpack', '--image', `${layout}:${tag}`, bundle], { timeoutMs: 180_000 });
    const spec = JSON.parse(readFileSync(join(bundle, 'config.json'), 'utf8')) as { process?: { env?: string[] } };
    return new ContainerImage(tb, join(bundle, 'rootfs'), spec.process?.env ?? []);
  }

  /**
   * Start a container in `host` (its network namespace is the container's: hostNetwork).
   * Ended through runc, so stop() reaches the process inside, not only `runc run`.
   */
  async run(host: Host, id: string, c: ContainerSpec): Promise<Proc> {
    const root = join('/run/ferry/runc', this.tb.prefix);
    const bundle = join(root, 'bundles', id);
    mkdirSync(bundle, { recursive: true });
    this.tb.ownPath(root);
    this.tb.ownContainer(root, id);
    // A container of this id that ended on its own (a crash) is still known to runc.
    await exec('runc', ['--root', root, 'delete', '--force', id]);
    writeFileSync(join(bundle, 'config.json'), JSON.stringify(runtimeSpec(this, host, c), null, 1));
    const p = host.spawn(['runc', '--root', root, 'run', '--bundle', bundle, id], { PATH: process.env.PATH });
    const runcStop = p.stop;
    // SIGKILL on `runc run` would leave the container running; runc kill reaches its init.
    p.stop = async (graceMs = 2000) => {
      const timer = new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), graceMs).unref());
      await execOk('runc', ['--root', root, 'kill', id, 'TERM']).catch(() => undefined);
      if ((await Promise.race([p.exited, timer])) === 'timeout') await execOk('runc', ['--root', root, 'kill', id, 'KILL']).catch(() => undefined);
      await runcStop(1000);
      await execOk('runc', ['--root', root, 'delete', '--force', id]).catch(() => undefined);
    };
    return p;
  }
}

export interface ContainerSpec {
  args: string[];
  env: Record<string, string>;
  /** Linux capability names without CAP_ (securityContext.capabilities.add after drop ALL). */
  capabilities: string[];
  /** Mounts at `path` inside of `source` (default: the same path) on this machine. */
  binds: Array<{ path: string; source?: string; readOnly?: boolean; propagation?: 'HostToContainer' | 'None' }>;
  workingDir?: string;
  /** runAsUser (the agent runs as root; see deploy/kubernetes). */
  uid?: number;
  /** The pod's supplementalGroups. */
  groups?: number[];
}

function runtimeSpec(image: ContainerImage, host: Host, c: ContainerSpec): unknown {
  const caps = c.capabilities.map((n) => `CAP_${n.toUpperCase()}`);
  const env = new Map(image.env.map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
  for (const [k, v] of Object.entries(c.env)) env.set(k, v);
  return {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid: c.uid ?? 0, gid: c.uid ?? 0, ...(c.groups?.length ? { additionalGids: c.groups } : {}) },
      args: c.args,
      env: [...env].map(([k, v]) => `${k}=${v}`),
      cwd: c.workingDir ?? '/',
      // containerd gives a root container its added capabilities in all three sets.
      capabilities: { bounding: caps, effective: caps, permitted: caps },
      noNewPrivileges: true,
    },
    root: { path: image.rootfs, readonly: true },
    hostname: host.name,
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc' },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
      { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620'] },
      { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'] },
      { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
      // Where the image's programs write (a container's own writable layer would take it).
      { destination: '/tmp', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=1777'] },
      { destination: '/var/tmp', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=1777'] },
      { destination: '/run', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=755'] },
      ...c.binds.map((b) => ({
        destination: b.path,
        type: 'bind',
        source: b.source ?? b.path,
        options: ['rbind', b.readOnly ? 'ro' : 'rw', b.propagation === 'HostToContainer' ? 'rslave' : 'rprivate'],
      })),
    ],
    linux: {
      // hostNetwork: the node's namespace; the rest new, as for any pod (no hostPID, no hostIPC).
      namespaces: [{ type: 'pid' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }, { type: 'network', path: `/run/netns/${host.netns}` }],
      maskedPaths: ['/proc/kcore', '/proc/keys', '/proc/timer_list', '/sys/firmware'],
      readonlyPaths: ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'],
    },
  };
}
