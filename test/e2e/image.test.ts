// The OCI image from `make image` (scripts/build-image.sh): what it holds, and the agent run
// from it (runc, as a kubelet runs the DaemonSet's container: the node's network, read-only
// root, only the added capabilities) in a 2-node sandbox, serving a NodePort and an L2 LB IP;
// its FRR parses the rendered configurations the unit tests hold as golden files, and runs as
// the DaemonSet's frr container beside the agent, holding the nodes' BGP sessions through a
// peer that stops hearing a node and a bgpd that dies.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, readFileSync, readdirSync, readlinkSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { agentSecurity } from '../../src/sandbox/manifests.js';
import { Sandbox } from '../../src/sandbox/sandbox.js';
import { exec } from '../../src/sys/exec.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { eventually } from '../harness/wait.js';

const IMAGE = join(REPO_ROOT, 'build', 'image');
const version = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')).version as string;
let sb: Sandbox | undefined;

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'the ferry image', () => {
  beforeAll(() => {
    // Up to date after `make test` (which runs make image); built here when run alone.
    const r = spawnSync('bash', [join(REPO_ROOT, 'scripts', 'build-image.sh')], { encoding: 'utf8', timeout: 600_000 });
    expect(r.status, r.stderr + r.stdout).toBe(0);
  }, 600_000);
  afterAll(async () => {
    await sb?.down();
  }, 60_000);

  it('is an OCI archive of Debian trixie with node 20, libbpf 1.5 and ferry, no compiler, no package lists, a non-root default user', async () => {
    const meta = JSON.parse(readFileSync(join(IMAGE, 'ferry.json'), 'utf8')) as { digest: string; archiveBytes: number; layers: number };
    expect(statSync(join(IMAGE, 'ferry.tar')).size).toBe(meta.archiveBytes);
    const inspect = JSON.parse((await exec('skopeo', ['inspect', '--config', `oci-archive:${join(IMAGE, 'ferry.tar')}:ferry:${version}`])).stdout) as { config: { User: string; Entrypoint: string[] } };
    expect(inspect.config.User).toBe('65532:65532');
    expect(inspect.config.Entrypoint).toEqual(['node', '/opt/ferry/bin/ferry.js']);
    const rootfs = join('/run/ferry/images', 'check');
    await exec('rm', ['-rf', rootfs]);
    try {
      expect((await exec('umoci', ['unpack', '--image', `${join(IMAGE, 'oci')}:${version}`, rootfs])).code).toBe(0);
      const root = join(rootfs, 'rootfs');
      expect(readFileSync(join(root, 'etc/os-release'), 'utf8')).toMatch(/VERSION_CODENAME=trixie/);
      const chroot = (cmd: string[]) => spawnSync('chroot', [root, ...cmd], { encoding: 'utf8' });
      expect(chroot(['node', '--version']).stdout).toMatch(/^v20\./);
      expect(readdirSync(join(root, 'usr/lib/x86_64-linux-gnu')).some((f) => /^libbpf\.so\.1\.5/.test(f))).toBe(true);
      expect(chroot(['node', '/opt/ferry/bin/ferry.js', '--help']).stdout).toMatch(/Usage: ferry/);
      expect(chroot(['node', '/opt/ferry/bin/ferry.js', 'manifests', '--talos']).stdout).toMatch(/kind: DaemonSet/);
      for (const f of ['opt/ferry/build/bpf/tc.bpf.o', 'opt/ferry/build/bpf/sock.bpf.o', 'opt/ferry/build/bpf/sock_term.bpf.o', 'usr/sbin/bpftool', 'usr/lib/frr/watchfrr', 'usr/bin/ip', 'usr/sbin/iptables-nft-save', 'usr/sbin/iptables-legacy-save', 'usr/sbin/nft']) expect(existsSync(join(root, f)), f).toBe(true);
      for (const f of ['usr/bin/gcc', 'usr/bin/cc', 'usr/bin/clang', 'usr/bin/apt-get']) expect(existsSync(join(root, f)), f).toBe(false);
      const files = (dir: string) => (readdirSync(join(root, dir), { recursive: true, withFileTypes: true }) as Array<{ isDirectory(): boolean; name: string }>).filter((e) => !e.isDirectory()).map((e) => e.name);
      expect(files('var/lib/apt/lists').filter((f) => f !== 'lock')).toEqual([]);
      expect(files('var/cache')).toEqual([]);
      // koffi's library for this platform only, not its 17 others.
      expect(readdirSync(join(root, 'opt/ferry/node_modules/koffi/build/koffi'))).toEqual(['linux_x64']);
      // No test or benchmark dependency shipped.
      for (const dev of ['vitest', 'typescript', 'tsx']) expect(existsSync(join(root, 'opt/ferry/node_modules', dev)), dev).toBe(false);
      // The image's FRR (the DaemonSet's frr container: trixie's 10.x) takes every golden
      // configuration the unit tests check with this machine's FRR 8.4, and refuses a bad one.
      expect(chroot(['/usr/lib/frr/bgpd', '-v']).stdout).toMatch(/^bgpd version 10\./);
      const golden = join(REPO_ROOT, 'test', 'fixtures', 'frr');
      const goldenFiles = readdirSync(golden).filter((f) => f.endsWith('.conf'));
      expect(goldenFiles.length).toBeGreaterThanOrEqual(6);
      for (const f of goldenFiles) {
        copyFileSync(join(golden, f), join(root, 'tmp', f));
        const r = chroot(['vtysh', '-C', '-f', `/tmp/${f}`]);
        expect(r.status, `${f}: ${r.stdout}${r.stderr}`).toBe(0);
      }
      writeFileSync(join(root, 'tmp', 'bad.conf'), 'router bgp 64512\n neighbor 192.0.2.1 remote-as not-an-asn\n');
      expect(chroot(['vtysh', '-C', '-f', '/tmp/bad.conf']).status).not.toBe(0);
      // FRR's sockets are for its vty group: the DaemonSet gives the agent that group, by number.
      const group = readFileSync(join(root, 'etc/group'), 'utf8');
      const vty = /^frrvty:x:(\d+):(.*)$/m.exec(group);
      expect(vty?.[2]?.split(',')).toContain('frr');
      expect(agentSecurity().supplementalGroups).toEqual([Number(vty![1])]);
    } finally {
      await exec('rm', ['-rf', rootfs]);
    }
  });

  it('runs the agent on every node of a sandbox, and the NodePort and the L2 LoadBalancer IP serve', async () => {
    sb = await Sandbox.up({ name: 'image', nodes: 2, mode: 'snat', announce: 'l2', log: pino({ level: 'silent' }), agentImage: { layout: join(IMAGE, 'oci'), tag: version } });
    // The agent's process runs the image's node, in its own pid namespace.
    for (const node of sb.net.nodes) {
      const state = JSON.parse((await exec('runc', ['--root', `/run/ferry/runc/${sb.tb.prefix}`, 'state', `agent-${node.name}`])).stdout) as { pid: number; status: string };
      expect(state.status).toBe('running');
      const exe = statSync(`/proc/${state.pid}/exe`);
      const imageNode = statSync(`/run/ferry/images/${sb.tb.prefix}/rootfs/usr/bin/node`);
      expect([exe.dev, exe.ino]).toEqual([imageNode.dev, imageNode.ino]);
      expect(readlinkSync(`/proc/${state.pid}/ns/pid`)).not.toBe(readlinkSync('/proc/self/ns/pid'));
      // The DaemonSet's command, its ConfigMap at /etc/ferry, in-cluster credentials (no kubeconfig).
      expect(readFileSync(`/proc/${state.pid}/cmdline`, 'utf8').split('\0').filter(Boolean)).toEqual(['node', '--max-semi-space-size=4', '--expose-gc', '/opt/ferry/bin/ferry.js', 'agent', '--config', '/etc/ferry/ferry.yaml']);
      // Only the DaemonSet's capabilities: BPF(39) NET_ADMIN(12) SYS_ADMIN(21) NET_RAW(13).
      const capEff = /CapEff:\s+([0-9a-f]+)/.exec(readFileSync(`/proc/${state.pid}/status`, 'utf8'))![1]!;
      expect(BigInt(`0x${capEff}`)).toBe((1n << 39n) | (1n << 12n) | (1n << 21n) | (1n << 13n));
    }
    await sb.put('Deployment', {
      apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'web', namespace: 'default' },
      spec: { replicas: 2, selector: { matchLabels: { app: 'web' } }, template: { metadata: { labels: { app: 'web' } }, spec: { containers: [{ name: 'whoami', image: 'whoami', ports: [{ containerPort: 8080 }] }] } } },
    });
    await sb.put('Service', {
      apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'default' },
      spec: { type: 'LoadBalancer', selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080, nodePort: 30080 }] },
    });
    const curl = async (url: string) => (await sb!.net.client.exec(['curl', '-sS', '--max-time', '2', url])).stdout;
    for (const ip of ['10.0.30.21', '10.0.30.22']) expect(await eventually(() => curl(`http://${ip}:30080/`), (o) => /Hostname: web-/.test(o), 30_000)).toMatch(/Hostname: web-/);
    const svc = await eventually(async () => sb!.store.get('services', 'default', 'web') as { status?: { loadBalancer?: { ingress?: Array<{ ip: string }> } } }, (s) => Boolean(s?.status?.loadBalancer?.ingress?.[0]?.ip), 30_000);
    const lbIp = svc.status!.loadBalancer!.ingress![0]!.ip;
    expect(await eventually(() => curl(`http://${lbIp}/`), (o) => /Hostname: web-/.test(o), 30_000)).toMatch(/Hostname: web-/);
  });

  it('with BGP: FRR runs as the DaemonSet\'s frr container from the image, the agent\'s vtysh configures it, and the router learns the LoadBalancer IP from both nodes', async () => {
    await sb?.down();
    sb = await Sandbox.up({ name: 'imagebgp', nodes: 2, mode: 'snat', announce: 'bgp', log: pino({ level: 'silent' }), agentImage: { layout: join(IMAGE, 'oci'), tag: version } });
    const runcState = async (id: string) => JSON.parse((await exec('runc', ['--root', `/run/ferry/runc/${sb!.tb.prefix}`, 'state', id])).stdout) as { pid: number; status: string };
    for (const node of sb.net.nodes) {
      // The frr container's first process is the image's watchfrr (its command execs it).
      const frr = await runcState(`frr-${node.name}`);
      expect(frr.status).toBe('running');
      const exe = statSync(`/proc/${frr.pid}/exe`);
      const watchfrr = statSync(`/run/ferry/images/${sb.tb.prefix}/rootfs/usr/lib/frr/watchfrr`);
      expect([exe.dev, exe.ino]).toEqual([watchfrr.dev, watchfrr.ino]);
      // The agent runs with the pod's supplemental group (FRR's vty group), nothing more.
      const agent = await runcState(`agent-${node.name}`);
      expect(/^Groups:\s*(.*)$/m.exec(readFileSync(`/proc/${agent.pid}/status`, 'utf8'))![1]!.trim().split(/\s+/)).toEqual(agentSecurity().supplementalGroups.map(String));
    }
    await sb.put('Deployment', {
      apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'web', namespace: 'default' },
      spec: { replicas: 2, selector: { matchLabels: { app: 'web' } }, template: { metadata: { labels: { app: 'web' } }, spec: { containers: [{ name: 'whoami', image: 'whoami', ports: [{ containerPort: 8080 }] }] } } },
    });
    await sb.put('Service', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'default' }, spec: { type: 'LoadBalancer', selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080 }] } });
    const svc = await eventually(async () => sb!.store.get('services', 'default', 'web') as { status?: { loadBalancer?: { ingress?: Array<{ ip: string }> } } }, (s) => Boolean(s?.status?.loadBalancer?.ingress?.[0]?.ip), 30_000);
    const lbIp = svc.status!.loadBalancer!.ingress![0]!.ip;
    // The router (FRR 8.4 on this machine) holds a session with each node's FRR and routes the
    // address over both: what each agent applied through its own vtysh reached bgpd.
    const summary = () => sb!.frr.get('router')!.vtysh.showJson<{ ipv4Unicast?: { peers?: Record<string, { state: string }> } }>('show bgp summary json');
    const established = await eventually(summary, (j) => Object.values(j.ipv4Unicast?.peers ?? {}).filter((p) => p.state === 'Established').length === 2, 30_000);
    expect(Object.keys(established.ipv4Unicast!.peers!).sort()).toEqual(['10.0.30.21', '10.0.30.22']);
    // FRR 10.3.0 holds a session with BFD Idle while BFD is down, and this router starts BFD
    // only for an established session: the agents turn BFD on once it is (frr-quirks.ts).
    const bfdUp = async () => (await sb!.frr.get('router')!.vtysh.showJson<Array<{ peer: string; status: string }>>('show bfd peers json')).filter((p) => p.status === 'up').map((p) => p.peer).sort();
    expect(await eventually(bfdUp, (up) => up.length === 2, 30_000)).toEqual(['10.0.30.21', '10.0.30.22']);
    const nexthops = async () => [...(await sb!.net.router.exec(['ip', 'route', 'show', lbIp, 'proto', 'bgp'])).stdout.matchAll(/via (10\.0\.30\.\d+)/g)].map((m) => m[1]!).sort();
    expect(await eventually(nexthops, (h) => h.length === 2, 30_000)).toEqual(['10.0.30.21', '10.0.30.22']);
    const curl = async (url: string) => (await sb!.net.client.exec(['curl', '-sS', '--max-time', '2', url])).stdout;
    expect(await eventually(() => curl(`http://${lbIp}/`), (o) => /Hostname: web-/.test(o), 30_000)).toMatch(/Hostname: web-/);
    // The router stops hearing node-2 (its link stays up): BFD takes the path off the router.
    // On this FRR a session with BFD down is held Idle, so node-2's agent takes BFD off while
    // the session is down (and restarts the peer). Heard again, the session, the path and
    // BFD return.
    const router = (...args: string[]) => sb!.net.router.execOk(['nft', ...args]);
    await router('add table inet ferry_test');
    await router('add chain inet ferry_test in { type filter hook input priority 0; }');
    await router('add rule inet ferry_test in ip saddr 10.0.30.22 drop');
    const cutAt = Date.now();
    expect(await eventually(nexthops, (h) => h.join() === '10.0.30.21', 5000, 10)).toEqual(['10.0.30.21']);
    process.stdout.write(`image's FRR: node-2's path left the router ${Date.now() - cutAt} ms after the router stopped hearing it\n`);
    const node2Frr = async () => (await exec('runc', ['--root', `/run/ferry/runc/${sb!.tb.prefix}`, 'exec', 'frr-node-2', 'vtysh', '-c', 'show running-config'])).stdout;
    expect(await node2Frr()).toMatch(/neighbor 10\.0\.30\.1 bfd\n/);
    expect(await eventually(node2Frr, (c) => !/neighbor 10\.0\.30\.1 bfd/.test(c) && /neighbor 10\.0\.30\.1 remote-as/.test(c), 15_000)).not.toMatch(/neighbor 10\.0\.30\.1 bfd/);
    await router('delete table inet ferry_test');
    expect(await eventually(nexthops, (h) => h.length === 2, 30_000)).toEqual(['10.0.30.21', '10.0.30.22']);
    expect(await eventually(bfdUp, (up) => up.length === 2, 30_000)).toEqual(['10.0.30.21', '10.0.30.22']);
    // bgpd dies on node-1: watchfrr starts it again, empty (frr.conf holds nothing of
    // ferry's), and node-1's agent, finding its peer gone from FRR, applies everything again.
    const inFrr1 = async (script: string) => (await exec('runc', ['--root', `/run/ferry/runc/${sb!.tb.prefix}`, 'exec', 'frr-node-1', 'sh', '-c', script])).stdout.trim();
    const bgpd = await inFrr1('cat /var/run/frr/bgpd.pid');
    await inFrr1(`kill -9 ${bgpd}`);
    expect(await eventually(nexthops, (h) => !h.includes('10.0.30.21'), 10_000, 10)).toEqual(['10.0.30.22']);
    expect(await eventually(() => inFrr1('cat /var/run/frr/bgpd.pid'), (p) => p !== '' && p !== bgpd, 30_000)).not.toBe(bgpd);
    expect(await eventually(nexthops, (h) => h.length === 2, 30_000)).toEqual(['10.0.30.21', '10.0.30.22']);
    expect(await eventually(bfdUp, (up) => up.length === 2, 30_000)).toEqual(['10.0.30.21', '10.0.30.22']);
  });
});
