// `ferry sandbox`: a multi-node cluster in network namespaces on this machine.
import { ACCELERATIONS, type Acceleration } from '../datapath/loader.js';
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command } from 'commander';
import { parseAllDocuments } from 'yaml';
import { pino } from 'pino';
import { pidAlive } from '../sandbox/netns/registry.js';
import { CGROUP_ANNOTATION, NETNS_ANNOTATION } from '../sandbox/controllers/workloads.js';
import { SandboxApi } from '../sandbox/api-client.js';
import { FERRY_BIN, Sandbox, stateDir, validateSandboxName, type AnnounceMode, type ForwardingMode, type SandboxState } from '../sandbox/sandbox.js';
import { POD_NETWORKS, nodeRouteArgs, type PodNetwork } from '../sandbox/network.js';
import { execOk } from '../sys/exec.js';

const DEFAULT_NAME = 'ferry';

function readState(name: string): SandboxState | undefined {
  const f = join(stateDir(name), 'state.json');
  if (!existsSync(f)) return undefined;
  return JSON.parse(readFileSync(f, 'utf8')) as SandboxState;
}

function liveState(name: string): SandboxState {
  const s = readState(name);
  if (!s || !pidAlive(s.pid)) throw new Error(`sandbox "${name}" is not running (ferry sandbox up --name ${name})`);
  return s;
}

function manifests(file: string): Array<Record<string, unknown>> {
  const text = file === '-' ? readFileSync(0, 'utf8') : readFileSync(file, 'utf8');
  return parseAllDocuments(text).map((d) => d.toJSON() as Record<string, unknown>).filter((d) => d && typeof d === 'object');
}

export function registerSandbox(program: Command): void {
  const sb = program.command('sandbox').description('a multi-node cluster in network namespaces, with the real datapath');

  sb.command('up')
    .description('create the sandbox (idempotent per name)')
    .option('--name <name>', 'sandbox name', DEFAULT_NAME)
    .option('--nodes <n>', 'number of nodes', '3')
    .option('--mode <mode>', 'forwarding mode: snat, dsr or hybrid', 'snat')
    .option('--announce <how>', 'how LoadBalancer addresses reach the nodes: bgp (the router learns 10.0.100.0/24 from the nodes, ECMP, BFD), l2 (a pool in the node subnet, 10.0.30.200-250, answered by ARP) or routes (static routes the sandbox keeps)', 'bgp')
    .option('--acceleration <mode>', 'the agents\' XDP: none, native (veth runs it when the switch is a bridge) or best-effort (on a macvlan switch: generic XDP)', 'none')
    .option('--pod-network <kind>', 'how pods of different nodes reach each other: routed (across the node network) or vxlan (a Flannel-style overlay, flannel.1 on each node, one of the agents\' devices)', 'routed')
    .action(async (o: { name: string; nodes: string; mode: string; announce: string; acceleration: string; podNetwork: string }) => {
      validateSandboxName(o.name);
      if (!['bgp', 'l2', 'routes'].includes(o.announce)) throw new Error(`--announce ${o.announce}: use bgp, l2 or routes`);
      if (!(ACCELERATIONS as readonly string[]).includes(o.acceleration)) throw new Error(`--acceleration ${o.acceleration}: use ${ACCELERATIONS.join(', ')}`);
      if (!(POD_NETWORKS as readonly string[]).includes(o.podNetwork)) throw new Error(`--pod-network ${o.podNetwork}: use ${POD_NETWORKS.join(' or ')}`);
      const have = readState(o.name);
      if (have && pidAlive(have.pid) && have.ready) {
        process.stdout.write(`sandbox "${o.name}" is already up\n`);
        printSummary(have);
        return;
      }
      const log = join('/tmp', `ferry-sandbox-${o.name}.log`);
      const fd = openSync(log, 'w');
      const child = spawn(process.execPath, [FERRY_BIN, 'sandbox', 'run', '--name', o.name, '--nodes', o.nodes, '--mode', o.mode, '--announce', o.announce, '--acceleration', o.acceleration, '--pod-network', o.podNetwork], { detached: true, stdio: ['ignore', fd, fd] });
      closeSync(fd);
      child.unref();
      const deadline = Date.now() + 120_000;
      for (;;) {
        const s = readState(o.name);
        if (s?.ready && s.pid === child.pid) {
          printSummary(s);
          process.stdout.write(`log: ${log}\n`);
          return;
        }
        if (child.exitCode !== null || !pidAlive(child.pid!) || Date.now() > deadline) {
          throw new Error(`sandbox "${o.name}" did not come up; see ${log}:\n${readFileSync(log, 'utf8').slice(-3000)}`);
        }
        await new Promise((r) => setTimeout(r, 200));
      }
    });

  sb.command('run', { hidden: true })
    .description('run a sandbox in the foreground (what `up` starts in the background)')
    .option('--name <name>', 'sandbox name', DEFAULT_NAME)
    .option('--nodes <n>', 'number of nodes', '3')
    .option('--mode <mode>', 'forwarding mode', 'snat')
    .option('--announce <how>', 'bgp, l2 or routes', 'bgp')
    .option('--acceleration <mode>', 'none, native or best-effort', 'none')
    .option('--pod-network <kind>', 'routed or vxlan', 'routed')
    .action(async (o: { name: string; nodes: string; mode: string; announce: string; acceleration: string; podNetwork: string }) => {
      const log = pino({ level: 'info', base: { component: 'ferry-sandbox', sandbox: o.name } });
      const s = await Sandbox.up({ name: o.name, nodes: Number(o.nodes), mode: o.mode as ForwardingMode, log, announce: o.announce as AnnounceMode, acceleration: o.acceleration as Acceleration, podNetwork: o.podNetwork as PodNetwork });
      log.info({ prefix: s.tb.prefix }, 'sandbox up');
      await new Promise<void>((resolve) => {
        process.once('SIGTERM', () => resolve());
        process.once('SIGINT', () => resolve());
      });
      log.info('sandbox going down');
      await s.down();
    });

  sb.command('down')
    .description('remove the sandbox and everything it made')
    .option('--name <name>', 'sandbox name', DEFAULT_NAME)
    .action(async (o: { name: string }) => {
      const s = readState(o.name);
      if (!s || !pidAlive(s.pid)) {
        process.stdout.write(`sandbox "${o.name}" is not running; removing any leftovers\n`);
        spawnSync(process.execPath, [FERRY_BIN, 'testbed', 'cleanup'], { stdio: 'inherit' });
        return;
      }
      process.kill(s.pid, 'SIGTERM');
      for (let i = 0; i < 300 && pidAlive(s.pid); i++) await new Promise((r) => setTimeout(r, 100));
      if (pidAlive(s.pid)) {
        process.kill(s.pid, 'SIGKILL');
        spawnSync(process.execPath, [FERRY_BIN, 'testbed', 'cleanup'], { stdio: 'inherit' });
      }
      process.stdout.write(`sandbox "${o.name}" is down\n`);
    });

  sb.command('status')
    .description('what the sandbox holds')
    .option('--name <name>', 'sandbox name', DEFAULT_NAME)
    .action(async (o: { name: string }) => {
      const s = liveState(o.name);
      printSummary(s);
      const api = new SandboxApi(s.apiUrl);
      const pods = ((await api.call('GET', '/api/v1/pods')).json.items ?? []) as Array<{ metadata: { name: string; namespace: string }; spec: { nodeName?: string }; status?: { podIP?: string; conditions?: { type: string; status: string }[] } }>;
      const svcs = ((await api.call('GET', '/api/v1/services')).json.items ?? []) as Array<{ metadata: { name: string; namespace: string }; spec: { type: string; clusterIP: string; ports?: { port: number; nodePort?: number; protocol?: string }[] }; status?: { loadBalancer?: { ingress?: { ip?: string }[] } } }>;
      process.stdout.write('\npods:\n');
      for (const p of pods) process.stdout.write(`  ${p.metadata.namespace}/${p.metadata.name}  ${p.spec.nodeName ?? '-'}  ${p.status?.podIP ?? '-'}  ready=${p.status?.conditions?.find((c) => c.type === 'Ready')?.status ?? 'False'}\n`);
      process.stdout.write('services:\n');
      for (const v of svcs) {
        const ports = (v.spec.ports ?? []).map((p) => `${p.port}${p.nodePort ? `:${p.nodePort}` : ''}/${p.protocol ?? 'TCP'}`).join(',');
        process.stdout.write(`  ${v.metadata.namespace}/${v.metadata.name}  ${v.spec.type}  ${v.spec.clusterIP}  ${ports}  ${v.status?.loadBalancer?.ingress?.[0]?.ip ?? ''}\n`);
      }
    });

  for (const verb of ['apply', 'delete'] as const) {
    sb.command(verb)
      .description(`${verb} Kubernetes YAML (Service, Pod, Deployment)`)
      .requiredOption('-f, --filename <file>', 'YAML file (- for stdin)')
      .option('--name <name>', 'sandbox name', DEFAULT_NAME)
      .action(async (o: { filename: string; name: string }) => {
        const api = new SandboxApi(liveState(o.name).apiUrl);
        for (const doc of manifests(o.filename)) {
          const kind = String(doc.kind ?? '');
          const meta = (doc.metadata ?? {}) as { name?: string; namespace?: string };
          const ns = meta.namespace ?? 'default';
          const what = `${kind.toLowerCase()}/${meta.name}`;
          if (verb === 'delete') {
            const r = await api.call('DELETE', api.url(kind, ns, meta.name));
            process.stdout.write(r.status < 300 ? `${what} deleted\n` : `${what}: ${String(r.json.message)}\n`);
            continue;
          }
          let r = await api.call('POST', api.url(kind, ns), doc);
          if (r.status === 409) {
            const cur = await api.call('GET', api.url(kind, ns, meta.name));
            const rv = (cur.json.metadata as { resourceVersion?: string })?.resourceVersion;
            r = await api.call('PUT', api.url(kind, ns, meta.name), { ...doc, metadata: { ...meta, namespace: ns, resourceVersion: rv } });
            process.stdout.write(r.status < 300 ? `${what} configured\n` : `${what}: ${String(r.json.message)}\n`);
          } else {
            process.stdout.write(r.status < 300 ? `${what} created\n` : `${what}: ${String(r.json.message)}\n`);
          }
          if (r.status >= 300) process.exitCode = 1;
        }
      });
  }

  sb.command('pod <action> <pod>')
    .description('ready | unready | terminate | delete a pod (namespace/name or name in default)')
    .option('--name <name>', 'sandbox name', DEFAULT_NAME)
    .action(async (action: string, pod: string, o: { name: string }) => {
      const api = new SandboxApi(liveState(o.name).apiUrl);
      const [ns, name] = pod.includes('/') ? (pod.split('/') as [string, string]) : ['default', pod];
      const url = api.url('Pod', ns, name);
      const cur = await api.call('GET', url);
      if (cur.status !== 200) throw new Error(`pod ${ns}/${name}: ${String(cur.json.message)}`);
      if (action === 'delete') await api.call('DELETE', url);
      else if (action === 'terminate') await api.call('PATCH', url, { metadata: { deletionTimestamp: new Date().toISOString() } });
      else if (action === 'ready' || action === 'unready') {
        const status = (cur.json.status ?? {}) as { conditions?: { type: string; status: string }[] };
        const conditions = (status.conditions ?? []).filter((c) => c.type !== 'Ready');
        conditions.push({ type: 'Ready', status: action === 'ready' ? 'True' : 'False' });
        await api.call('PUT', `${url}/status`, { ...cur.json, status: { ...status, conditions } });
      } else throw new Error(`pod action "${action}": use ready, unready, terminate or delete`);
      process.stdout.write(`pod ${ns}/${name}: ${action}\n`);
    });

  sb.command('link <state> <node>')
    .description('cut a node off the node network (down) or put it back (up): its switch port, as a pulled cable')
    .option('--name <name>', 'sandbox name', DEFAULT_NAME)
    .action(async (state: string, nodeName: string, o: { name: string }) => {
      if (state !== 'up' && state !== 'down') throw new Error(`link ${state}: use up or down`);
      const s = liveState(o.name);
      const node = s.nodes.find((n) => n.name === nodeName);
      if (!node) throw new Error(`no node "${nodeName}" (nodes: ${s.nodes.map((n) => n.name).join(', ')})`);
      const ip = (netns: string, args: string[]) => execOk('ip', ['-n', netns, ...args]);
      if (s.nodeSwitch.kind === 'bridge') await ip(s.nodeSwitch.netns, ['link', 'set', s.nodeSwitch.ports[nodeName]!, state]);
      else {
        await ip(node.netns, ['link', 'set', 'eth0', state]);
        // A macvlan member's own link went down and took its routes along.
        if (state === 'up') for (const args of nodeRouteArgs(node, s.nodes, s.podNetwork)) await ip(node.netns, args);
      }
      process.stdout.write(`${nodeName}: link ${state}\n`);
    });

  sb.command('exec <target> [cmd...]')
    .description('run a command in client, router, node-N or pod/NAME')
    .option('--name <name>', 'sandbox name', DEFAULT_NAME)
    .action(async (target: string, cmd: string[], o: { name: string }) => {
      const s = liveState(o.name);
      let where: { netns: string; cgroup: string } | undefined;
      if (target.startsWith('pod/')) {
        const api = new SandboxApi(s.apiUrl);
        const [ns, name] = target.slice(4).includes('/') ? (target.slice(4).split('/') as [string, string]) : ['default', target.slice(4)];
        const pod = await api.call('GET', api.url('Pod', ns, name));
        const ann = ((pod.json.metadata as { annotations?: Record<string, string> })?.annotations ?? {});
        if (!ann[NETNS_ANNOTATION]) throw new Error(`pod ${ns}/${name} is not running`);
        where = { netns: ann[NETNS_ANNOTATION]!, cgroup: ann[CGROUP_ANNOTATION]! };
      } else {
        where = s.hosts[target];
      }
      if (!where) throw new Error(`no host "${target}" (hosts: ${Object.keys(s.hosts).join(', ')}, or pod/NAME)`);
      if (cmd.length === 0) cmd = ['sh'];
      const r = spawnSync('sh', ['-c', 'echo $$ > "$0/cgroup.procs" && ns="$1" && shift && exec nsenter --net="/run/netns/$ns" -- "$@"', where.cgroup, where.netns, ...cmd], { stdio: 'inherit' });
      process.exitCode = r.status ?? 1;
    });

  sb.command('kubectl [args...]')
    .description('Debian\'s kubectl against the sandbox')
    .option('--name <name>', 'sandbox name', DEFAULT_NAME)
    .allowUnknownOption()
    .action(async (args: string[], o: { name: string }) => {
      const s = liveState(o.name);
      // The test API server serves no OpenAPI documents, so kubectl cannot validate
      // client-side: turn that off for the verbs that would try.
      const validating = ['apply', 'create', 'replace'].includes(args[0] ?? '') && !args.some((a) => a.startsWith('--validate'));
      const r = spawnSync('kubectl', ['--kubeconfig', s.kubeconfig, ...args, ...(validating ? ['--validate=false'] : [])], { stdio: 'inherit' });
      if (r.error) throw new Error(`kubectl: ${r.error.message} (apt-get install kubernetes-client)`);
      process.exitCode = r.status ?? 1;
    });
}

function printSummary(s: SandboxState): void {
  process.stdout.write(`sandbox "${s.name}" (prefix ${s.prefix}, mode ${s.mode}, acceleration ${s.acceleration ?? 'none'}, pods ${s.podNetwork ?? 'routed'}, pid ${s.pid})\n`);
  process.stdout.write(`  router  10.0.10.1 (clients) / 10.0.30.1 (nodes), no default route\n  client  10.0.10.2\n`);
  for (const n of s.nodes) process.stdout.write(`  ${n.name}  ${n.ip}  pods ${n.podCidr}  pins ${n.pinDir}\n`);
  const pool = s.announce === 'l2' ? '10.0.30.200-10.0.30.250 (in the node subnet, announced by ARP)' : s.announce === 'bgp' ? '10.0.100.0/24 (announced by BGP to the router, ECMP)' : '10.0.100.0/24 (routed by the router)';
  process.stdout.write(`  LoadBalancer pool ${pool}, Services 10.96.0.0/12\n  kubeconfig: ${s.kubeconfig}\n`);
}
