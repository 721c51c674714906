// Hosts in network namespaces, joined by veth links, with a cgroup each: the library the
// tests and the sandbox build their networks with. It enforces the test network rules:
// everything it makes carries a per-run prefix, routers get no default route, nothing is
// routed from the root namespace, processes are ended by PID, and destroy() (or the
// cleanup command after a crash) removes all of it.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';
import { exec, execOk, type ExecResult } from '../../sys/exec.js';
import { TESTBED_PREFIX, pidAlive, removeRecord, writeRecord, type TestbedRecord } from './registry.js';

export const CGROUP2_MOUNT = process.env.FERRY_CGROUP2_MOUNT ?? '/sys/fs/cgroup/unified';

export interface HostOptions {
  /** A router forwards between its links; it never gets a default route. */
  router?: boolean;
  /** Nest this host's cgroup under another's (a pod under its node), so cgroup hooks
   * attached at the node's cgroup cover the pod too. */
  cgroupParent?: Host;
  /** Enable IPv4 forwarding (routers always do). */
  forwarding?: boolean;
}

export interface Proc {
  pid: number;
  child: ChildProcess;
  /** Output so far (stdout and stderr interleaved). */
  output(): string;
  /** Resolves with the exit code when the process ends. */
  exited: Promise<number | null>;
  /** End it by PID (SIGTERM, then SIGKILL after a grace period). */
  stop(graceMs?: number): Promise<void>;
}

export class Host {
  /** Processes started in this host and still running. */
  readonly procs = new Set<Proc>();

  constructor(
    readonly testbed: Testbed,
    readonly name: string,
    readonly netns: string,
    readonly cgroup: string,
    readonly router: boolean,
  ) {}

  /**
   * argv that runs `cmd` inside this host: its cgroup, then its network namespace. nsenter
   * (not `ip netns exec`) keeps the mount namespace, so bpffs and cgroupfs stay visible.
   */
  argv(cmd: readonly string[]): [string, string[]] {
    // sh -c SCRIPT $0 $1 ...: $0 is the cgroup, $1 the netns, then the command.
    const script = 'echo $$ > "$0/cgroup.procs" && ns="$1" && shift && exec nsenter --net="/run/netns/$ns" -- "$@"';
    return ['sh', ['-c', script, this.cgroup, this.netns, ...cmd]];
  }

  /** Run a command to completion inside the host. */
  exec(cmd: readonly string[], opts: { timeoutMs?: number; input?: string } = {}): Promise<ExecResult> {
    const [c, a] = this.argv(cmd);
    return exec(c, a, opts);
  }

  /** Run and throw on failure. */
  async execOk(cmd: readonly string[], opts: { timeoutMs?: number; input?: string } = {}): Promise<string> {
    const [c, a] = this.argv(cmd);
    return execOk(c, a, opts);
  }

  /** `ip ...` inside the host. */
  ip(...args: string[]): Promise<string> {
    return this.execOk(['ip', ...args]);
  }

  /** Start a long-lived process inside the host; the testbed ends it on destroy. */
  spawn(cmd: readonly string[], env: NodeJS.ProcessEnv = process.env, opts: { stdin?: boolean } = {}): Proc {
    const [c, a] = this.argv(cmd);
    const child = spawn(c, a, { stdio: [opts.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'], env });
    if (child.pid === undefined) throw new Error(`spawn ${cmd.join(' ')} in ${this.name}: failed`);
    const pid = child.pid;
    let out = '';
    child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr?.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    let done = false;
    void exited.then(() => (done = true));
    const proc: Proc = {
      pid,
      child,
      output: () => out,
      exited,
      stop: async (graceMs = 2000) => {
        if (done) return;
        try {
          process.kill(pid, 'SIGTERM');
        } catch {
          return;
        }
        const timer = new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), graceMs).unref());
        if ((await Promise.race([exited, timer])) === 'timeout' && !done) {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            /* already gone */
          }
          await exited;
        }
      },
    };
    this.procs.add(proc);
    void exited.then(() => this.procs.delete(proc));
    this.testbed.adopt(proc);
    return proc;
  }

  /** The host's first IPv4 address on an interface. */
  async address(ifname: string): Promise<string> {
    const out = await this.ip('-4', '-o', 'addr', 'show', 'dev', ifname);
    const m = /inet (\d+\.\d+\.\d+\.\d+)\//.exec(out);
    if (!m) throw new Error(`${this.name}: no IPv4 address on ${ifname}`);
    return m[1]!;
  }
}

export interface LinkEnd {
  host: Host;
  ifname: string;
  /** CIDR, e.g. 10.0.10.2/24. */
  address?: string;
}

/**
 * ECMP as a router on its own box hashes: the packet's 5-tuple (`fib_multipath_hash_fields`:
 * addresses, protocol, ports), nothing else. Layer-4 hashing (policy 1) would take the hash a
 * client socket on this same kernel put on its packets, which TCP draws again at every
 * retransmission timeout: a retransmitted SYN, or a flow after an RTO, would move to another
 * node, which no router across a wire does.
 */
const ROUTER_ECMP_HASH = ['net.ipv4.fib_multipath_hash_policy=3', 'net.ipv4.fib_multipath_hash_fields=0x0037'];

/** The network rules: a private test range only, never a default route on a router. */
function checkRoute(host: Host, dest: string): void {
  if (host.router && (dest === 'default' || dest === '0.0.0.0/0')) {
    throw new Error(`route on ${host.name}: routers get no default route (test network rules)`);
  }
}

export class Testbed {
  readonly prefix: string;
  private readonly hosts = new Map<string, Host>();
  private readonly procs = new Set<Proc>();
  private readonly paths: string[] = [];
  private readonly containers: Array<{ root: string; id: string }> = [];
  private readonly cgroupRoot: string;
  private destroyed = false;

  private constructor(prefix: string) {
    this.prefix = prefix;
    this.cgroupRoot = join(CGROUP2_MOUNT, prefix);
  }

  /** A new, empty testbed with a fresh per-run prefix (`fy` + 6 hex digits by default). */
  static async create(opts: { prefix?: string } = {}): Promise<Testbed> {
    const prefix = opts.prefix ?? `${TESTBED_PREFIX}${randomBytes(3).toString('hex')}`;
    if (!prefix.startsWith(TESTBED_PREFIX) || !/^[a-z0-9-]{3,20}$/.test(prefix)) {
      throw new Error(`testbed prefix "${prefix}": must start with "${TESTBED_PREFIX}" and use [a-z0-9-], at most 20 characters`);
    }
    if (!existsSync(CGROUP2_MOUNT)) throw new Error(`testbed: no cgroup v2 mount at ${CGROUP2_MOUNT} (set FERRY_CGROUP2_MOUNT)`);
    const tb = new Testbed(prefix);
    mkdirSync(tb.cgroupRoot, { recursive: true });
    tb.save();
    return tb;
  }

  private record(): TestbedRecord {
    return {
      prefix: this.prefix,
      ownerPid: process.pid,
      createdAt: new Date().toISOString(),
      namespaces: [...this.hosts.values()].map((h) => h.netns),
      cgroups: [this.cgroupRoot, ...[...this.hosts.values()].map((h) => h.cgroup)],
      pids: [...this.procs].map((p) => p.pid),
      paths: [...this.paths],
      containers: [...this.containers],
    };
  }

  private save(): void {
    writeRecord(this.record());
  }

  adopt(p: Proc): void {
    this.procs.add(p);
    void p.exited.then(() => this.procs.delete(p));
    this.save();
  }

  /** Remove this file or directory (a pin directory, say) with the testbed, even after a crash. */
  ownPath(path: string): void {
    if (!this.paths.includes(path)) this.paths.push(path);
    this.save();
  }

  /** Delete this runc container (killing what runs in it) with the testbed, even after a crash. */
  ownContainer(root: string, id: string): void {
    if (!this.containers.some((c) => c.root === root && c.id === id)) this.containers.push({ root, id });
    this.save();
  }

  host(name: string): Host {
    const h = this.hosts.get(name);
    if (!h) throw new Error(`testbed ${this.prefix}: no host ${name}`);
    return h;
  }

  allHosts(): Host[] {
    return [...this.hosts.values()];
  }

  /** A new host: a network namespace with loopback up, and its own cgroup. */
  async addHost(name: string, opts: HostOptions = {}): Promise<Host> {
    if (!/^[a-z][a-z0-9-]{0,30}$/.test(name)) throw new Error(`host name "${name}": use [a-z0-9-]`);
    if (this.hosts.has(name)) throw new Error(`testbed ${this.prefix}: host ${name} exists`);
    const netns = `${this.prefix}-${name}`;
    const cgroup = join(opts.cgroupParent?.cgroup ?? this.cgroupRoot, name);
    await execOk('ip', ['netns', 'add', netns]);
    mkdirSync(cgroup, { recursive: true });
    const h = new Host(this, name, netns, cgroup, Boolean(opts.router));
    this.hosts.set(name, h);
    this.save();
    await h.ip('link', 'set', 'lo', 'up');
    if (opts.router || opts.forwarding) await h.execOk(['sysctl', '-qw', 'net.ipv4.ip_forward=1']);
    if (opts.router) await h.execOk(['sysctl', '-qw', ...ROUTER_ECMP_HASH]);
    return h;
  }

  /** A veth pair between two hosts, addressed and up. */
  async link(a: LinkEnd, b: LinkEnd, opts: { mtu?: number } = {}): Promise<void> {
    for (const end of [a, b]) {
      if (!/^[a-z][a-z0-9_.-]{0,14}$/.test(end.ifname)) throw new Error(`interface name "${end.ifname}": at most 15 characters`);
    }
    await execOk('ip', ['link', 'add', a.ifname, 'netns', a.host.netns, ...(opts.mtu ? ['mtu', String(opts.mtu)] : []), 'type', 'veth', 'peer', 'name', b.ifname, 'netns', b.host.netns, ...(opts.mtu ? ['mtu', String(opts.mtu)] : [])]);
    for (const end of [a, b]) {
      if (end.address) await end.host.ip('addr', 'add', end.address, 'dev', end.ifname);
      await end.host.ip('link', 'set', end.ifname, 'up');
    }
  }

  /** A route inside a host (`dest` a CIDR or `default`; `via` a gateway). */
  async route(host: Host, dest: string, via: string, opts: { dev?: string } = {}): Promise<void> {
    checkRoute(host, dest);
    await host.ip('route', 'replace', dest, 'via', via, ...(opts.dev ? ['dev', opts.dev] : []));
  }

  /** ECMP route on a router: one destination, several next hops. */
  async multipathRoute(host: Host, dest: string, vias: string[]): Promise<void> {
    checkRoute(host, dest);
    if (vias.length === 1) return this.route(host, dest, vias[0]!);
    await host.ip('route', 'replace', dest, ...vias.flatMap((v) => ['nexthop', 'via', v]));
  }

  /** Remove one host: its processes (by PID), its namespace (and so its links), its cgroup. */
  async removeHost(name: string): Promise<void> {
    const h = this.hosts.get(name);
    if (!h) return;
    await Promise.all([...h.procs].map((p) => p.stop(1000)));
    killCgroup(h.cgroup);
    await exec('ip', ['netns', 'del', h.netns]);
    for (let i = 0; i < 50 && existsSync(h.cgroup); i++) {
      try {
        rmdirSync(h.cgroup);
      } catch {
        await new Promise((res) => setTimeout(res, 20));
      }
    }
    this.hosts.delete(name);
    this.save();
  }

  /** Processes started in this testbed and still running. */
  runningPids(): number[] {
    return [...this.procs].map((p) => p.pid).filter(pidAlive);
  }

  /** End every process, delete every namespace and cgroup, forget the record. */
  async destroy(): Promise<void> {
    if (this.destroyed) return;
    this.destroyed = true;
    await Promise.all([...this.procs].map((p) => p.stop(1000)));
    await destroyResources(this.record());
    this.hosts.clear();
  }
}

/** Remove what a testbed record names: processes by PID, namespaces, cgroups (leaves first). */
export async function destroyResources(r: TestbedRecord): Promise<void> {
  for (const pid of r.pids) {
    if (pidAlive(pid)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
  }
  // A container's processes live in runc's cgroup, not the host's: runc kills and removes them.
  for (const c of r.containers ?? []) await exec('runc', ['--root', c.root, 'delete', '--force', c.id]);
  // Anything still inside the host cgroups was started there by this testbed.
  for (const cg of [...r.cgroups].reverse()) killCgroup(cg);
  for (const ns of r.namespaces) await exec('ip', ['netns', 'del', ns]);
  for (const p of r.paths ?? []) rmSync(p, { recursive: true, force: true });
  for (const cg of [...r.cgroups].reverse()) {
    for (let i = 0; i < 50 && existsSync(cg); i++) {
      try {
        rmdirSync(cg);
      } catch {
        await new Promise((res) => setTimeout(res, 20));
      }
    }
  }
  removeRecord(r.prefix);
}

function killCgroup(cg: string): void {
  const procs = join(cg, 'cgroup.procs');
  if (!existsSync(procs)) return;
  for (const line of readFileSync(procs, 'utf8').split('\n')) {
    const pid = Number(line);
    if (pid > 0) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
  }
}
