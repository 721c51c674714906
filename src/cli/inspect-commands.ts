// `ferry map`, `ferry ct`, `ferry nat`, `ferry explain`, `ferry monitor`, `ferry status`:
// the datapath as its pinned maps hold it. The reading is datapath/'s; this file formats.
import { isIPv6 } from 'node:net';
import { Command } from 'commander';
import { MAP_NAMES, isMapName, dumpKeysHex, dumpMap, flushConntrack, listFlows, listFrontends, listMaps, readCounters, readHostPorts, readSnatAddress, readXdpTargets } from '../datapath/inspect.js';
import { explain } from '../datapath/explain.js';
import { watchEvents, type DatapathEvent, type EventKind } from '../datapath/monitor.js';
import { attachedPrograms } from '../datapath/attachments.js';
import { uninstall, uninstallPlan } from '../datapath/uninstall.js';
import { defaultObjectsDir } from '../datapath/loader.js';
import { ErrorCode, FerryError } from '../errors.js';
import { table } from './table.js';
import type { StaleUdpSocketsStatus } from '../agent/stale-sockets.js';
import type { RouteChangesStatus } from '../agent/route-changes.js';
import type { NetnsSourcesStatus } from '../agent/netns-sources.js';
import type { XdpDeviceState } from '../datapath/xdp-devices.js';
import type { SnatDevice } from '../datapath/snat-devices.js';
import type { VlanNotServed } from '../agent/device-scanner.js';

const PIN_DIR = '/sys/fs/bpf/ferry';
const MAP_TYPES: Record<number, string> = { 1: 'hash', 2: 'array', 6: 'percpu_array', 9: 'lru_hash', 11: 'lpm_trie', 13: 'hash_of_maps', 27: 'ringbuf' };

function out(format: string, rows: Array<Record<string, unknown>>, columns?: string[]): void {
  if (format === 'json') {
    process.stdout.write(`${JSON.stringify(rows, (_k, v) => (typeof v === 'bigint' ? Number(v) : v), 2)}\n`);
    return;
  }
  if (rows.length === 0) {
    process.stdout.write('(none)\n');
    return;
  }
  const cols = columns ?? Object.keys(rows[0]!);
  process.stdout.write(table(cols.map((c) => c.toUpperCase()), rows.map((r) => cols.map((c) => String(r[c] ?? '')))));
}

export function parseEndpoint(s: string, what: string): { ip: string; port: number; proto?: 'tcp' | 'udp' } {
  // IPv4:PORT, or [IPv6]:PORT.
  const m = /^(?:(\d+\.\d+\.\d+\.\d+)|\[([0-9a-fA-F:.]+)\]):(\d+)(?:\/(tcp|udp))?$/i.exec(s);
  if (!m || (m[2] !== undefined && !isIPv6(m[2]))) throw new FerryError({ code: ErrorCode.Config, op: `explain ${what}`, cause: `"${s}" is not IP:PORT${what === 'destination' ? '[/tcp|udp]' : ''}` });
  return { ip: m[1] ?? m[2]!, port: Number(m[3]), proto: m[4]?.toLowerCase() as 'tcp' | 'udp' | undefined };
}

export function formatEvent(e: DatapathEvent): string {
  if (e.kind === 'drop') return `drop   ${e.hook.padEnd(7)} ${e.tuple}  reason ${e.reason}`;
  return `trace  ${e.hook.padEnd(7)} ${e.tuple}  ${e.reason} → ${e.out}`;
}

export function registerInspect(program: Command): void {
  const map = program.command('map').description('the datapath maps, decoded from their pins');
  map.command('list')
    .description('every pinned map with entries against capacity')
    .option('--pin-dir <dir>', 'the agent\'s pin directory', PIN_DIR)
    .option('-o, --output <format>', 'table or json', 'table')
    .action((o: { pinDir: string; output: string }) => {
      out(o.output, listMaps(o.pinDir).map((m) => ({ name: m.name, type: MAP_TYPES[m.type] ?? String(m.type), entries: m.entries, capacity: m.capacity, fill: `${((100 * m.entries) / m.capacity).toFixed(1)}%` })));
    });
  map.command('dump <map>')
    .description(`one map decoded (${MAP_NAMES.join(', ')}); -o hex for raw bytes`)
    .option('--pin-dir <dir>', 'the agent\'s pin directory', PIN_DIR)
    .option('-o, --output <format>', 'table, json or hex', 'table')
    .action((name: string, o: { pinDir: string; output: string }) => {
      if (!isMapName(name)) throw new Error(`no map "${name}" (maps: ${MAP_NAMES.join(', ')})`);
      if (o.output === 'hex') {
        for (const k of dumpKeysHex(o.pinDir, name)) process.stdout.write(`${k}\n`);
        return;
      }
      out(o.output, dumpMap(o.pinDir, name));
    });

  const ct = program.command('ct').description('conntrack of north-south flows');
  ct.command('list')
    .description('flows with their backend, NAT and expiry')
    .option('--pin-dir <dir>', 'the agent\'s pin directory', PIN_DIR)
    .option('--service <ip:port>', 'only flows to this frontend')
    .option('--backend <ip[:port]>', 'only flows to this backend')
    .option('-o, --output <format>', 'table or json', 'table')
    .action((o: { pinDir: string; service?: string; backend?: string; output: string }) => {
      out(o.output, listFlows(o.pinDir, { service: o.service, backend: o.backend }) as unknown as Array<Record<string, unknown>>);
    });
  ct.command('flush')
    .description('delete every conntrack and NAT entry (established flows are balanced anew)')
    .option('--pin-dir <dir>', 'the agent\'s pin directory', PIN_DIR)
    .option('--yes', 'really do it')
    .action((o: { pinDir: string; yes?: boolean }) => {
      if (!o.yes) throw new Error('ct flush: this resets every north-south flow; add --yes to confirm');
      const r = flushConntrack(o.pinDir);
      process.stdout.write(`deleted ${r.ct} conntrack and ${r.nat} NAT entries\n`);
    });

  program.command('uninstall')
    .description('take ferry off this node once its agent is stopped: tc filters on every device, the socket hooks, every pin (without --yes: what it would do)')
    .option('--pin-dir <dir>', 'the agent\'s pin directory', PIN_DIR)
    .option('--netns <name>', 'the network namespace of the devices (a sandbox node)')
    .option('--yes', 'really do it')
    .action((o: { pinDir: string; netns?: string; yes?: boolean }) => {
      if (!o.yes) {
        const plan = uninstallPlan(o);
        process.stdout.write(`would detach: ${[...plan.xdpPrograms, ...plan.tcFilters].join(', ') || '(no XDP programs or tc filters)'}\nwould remove: ${plan.pins.length} pins in ${o.pinDir} (maps and socket-hook links)\n`);
        throw new Error('uninstall: stop the agent first (delete the DaemonSet), then add --yes');
      }
      const r = uninstall(o);
      process.stdout.write(`detached: ${[...r.xdpPrograms, ...r.tcFilters].join(', ') || '(no XDP programs or tc filters)'}\nunpinned: ${r.cgroupLinks.length} socket-hook links; removed ${r.pins} pins${r.pinDirRemoved ? ` and ${o.pinDir}` : ''}\n`);
      if (r.left.length) throw new FerryError({ code: ErrorCode.Attach, op: 'uninstall', cause: `still attached: ${r.left.join(', ')}`, hint: 'a filter at another handle or priority: tc filter show dev DEV ingress' });
      process.stdout.write('the socket hooks detach when no process holds them: if an agent still runs, stop it\n');
    });

  program.command('nat')
    .description('reply bindings (SNAT ports, DSR frontends, local replies)')
    .command('list')
    .option('--pin-dir <dir>', 'the agent\'s pin directory', PIN_DIR)
    .option('-o, --output <format>', 'table or json', 'table')
    .action((o: { pinDir: string; output: string }) => {
      out(o.output, dumpMap(o.pinDir, 'nat4'), ['saddr', 'sport', 'daddr', 'dport', 'proto', 'clientAddr', 'clientPort', 'frontendAddr', 'frontendPort', 'flags', 'expires']);
    });

  program.command('explain <source> <destination>')
    .description('what the datapath does with one packet, and why: SRC-IP:PORT DST-IP:PORT/tcp|udp ([IPv6]:PORT for an IPv6 frontend, --from pod|host)')
    .option('--from <where>', 'external (tc, run through a twin of the program), pod or host (socket hooks)', 'external')
    .option('--pin-dir <dir>', 'the agent\'s pin directory', PIN_DIR)
    .option('--device <ifname>', 'the device the packet arrives on', 'eth0')
    .option('--netns <name>', 'run in this network namespace (a sandbox node)')
    .option('-o, --output <format>', 'text or json', 'text')
    .action((source: string, destination: string, o: { from: string; pinDir: string; device: string; netns?: string; output: string }) => {
      const s = parseEndpoint(source, 'source');
      const d = parseEndpoint(destination, 'destination');
      if (!['external', 'pod', 'host'].includes(o.from)) throw new Error(`--from ${o.from}: use external, pod or host`);
      const e = explain({ src: s.ip, sport: s.port, dst: d.ip, dport: d.port, proto: d.proto ?? 'tcp', from: o.from as 'external', pinDir: o.pinDir, objectsDir: defaultObjectsDir(), device: o.device, netns: o.netns });
      process.stdout.write(o.output === 'json' ? `${JSON.stringify(e, null, 2)}\n` : `${e.lines.join('\n')}\n`);
    });

  program.command('monitor')
    .description('live datapath events: drops with their reason, and traces of translations (Ctrl-C stops)')
    .option('--type <types>', 'drop, trace, or drop,trace', 'drop')
    .option('--pin-dir <dir>', 'the agent\'s pin directory', PIN_DIR)
    .option('--count <n>', 'stop after this many events', '0')
    .option('-o, --output <format>', 'text or json (one object a line)', 'text')
    .action(async (o: { type: string; pinDir: string; count: string; output: string }) => {
      const kinds = o.type.split(',').map((t) => t.trim());
      if (kinds.some((t) => t !== 'drop' && t !== 'trace')) throw new Error(`--type ${o.type}: use drop, trace or drop,trace`);
      const stop = new AbortController();
      process.once('SIGINT', () => stop.abort());
      process.once('SIGTERM', () => stop.abort());
      if (o.output !== 'json') process.stderr.write(`watching ${kinds.join(' and ')} events in ${o.pinDir} (Ctrl-C stops)\n`);
      const write = (e: DatapathEvent) => process.stdout.write(`${o.output === 'json' ? JSON.stringify({ ...e.raw, tsNs: e.tsNs, type: e.kind, reasonName: e.reason }) : formatEvent(e)}\n`);
      await watchEvents({ pinDir: o.pinDir, kinds: kinds as EventKind[], count: Number(o.count), onEvent: write }, stop.signal);
    });

  program.command('status')
    .description('what the datapath holds and how it is doing')
    .option('--pin-dir <dir>', 'the agent\'s pin directory', PIN_DIR)
    .option('--metrics <url>', 'the agent\'s metrics address, to tell whether it is up', 'http://127.0.0.1:10249')
    .option('--netns <name>', 'look for tc attachments in this network namespace (a sandbox node)')
    .option('-o, --output <format>', 'table or json', 'table')
    .action(async (o: { pinDir: string; metrics: string; output: string; netns?: string }) => {
      let agent = 'not reachable';
      let mode = '?';
      let unprogrammed: Array<{ service: string; error: string }> = [];
      type Announcing = { l2?: Array<{ address: string; devices: string[] }>; bgp?: { peers: Array<{ peer: string; address: string; state: string; uptime: string; prefixesSent: number; bfd?: string }>; prefixes: string[]; error?: string } };
      let announcing: Announcing = {};
      let udpSockets: StaleUdpSocketsStatus | undefined;
      let routes: RouteChangesStatus | undefined;
      let netnsSources: NetnsSourcesStatus | undefined;
      let xdp: Record<string, XdpDeviceState> | undefined;
      let snatDevices: SnatDevice[] | undefined;
      let vlansNotServed: VlanNotServed[] = [];
      try {
        const s = (await (await fetch(`${o.metrics}/status`, { signal: AbortSignal.timeout(1000) })).json()) as { lastSync?: string; unprogrammed?: Array<{ service: string; error: string }>; udpSockets?: StaleUdpSocketsStatus; routes?: RouteChangesStatus; netnsSources?: NetnsSourcesStatus; xdp?: Record<string, XdpDeviceState>; snatDevices?: SnatDevice[]; vlansNotServed?: VlanNotServed[] } & Announcing;
        agent = s.lastSync ? `up, last sync ${s.lastSync}` : 'up, not synced yet';
        unprogrammed = s.unprogrammed ?? [];
        udpSockets = s.udpSockets;
        routes = s.routes;
        netnsSources = s.netnsSources;
        xdp = s.xdp;
        snatDevices = s.snatDevices;
        vlansNotServed = s.vlansNotServed ?? [];
        announcing = { l2: s.l2, bgp: s.bgp };
        mode = (await (await fetch(`${o.metrics}/proxyMode`, { signal: AbortSignal.timeout(1000) })).text()).trim();
      } catch {
        // the datapath runs without its agent too
      }
      const maps = listMaps(o.pinDir);
      const frontends = listFrontends(o.pinDir);
      const { forwarded: stats, drops } = readCounters(o.pinDir);
      // An XDP device other devices' XDP may redirect frames to (xdp-devices.ts) says so.
      const targets = new Set(readXdpTargets(o.pinDir));
      const links = attachedPrograms(o.netns).map((l) => (l.ifindex !== undefined && targets.has(l.ifindex) ? { ...l, where: `${l.where} (redirect target)` } : l));
      const hostPorts = readHostPorts(o.pinDir);
      const snat4 = readSnatAddress(o.pinDir, 'snat4_address'), snat6 = readSnatAddress(o.pinDir, 'snat6_address');
      const status = {
        agent, mode, pinDir: o.pinDir,
        frontends: frontends.length,
        backends: maps.find((m) => m.name === 'lb4_backends')?.entries ?? 0,
        flows: maps.find((m) => m.name === 'ct4')?.entries ?? 0,
        maps: maps.map((m) => ({ name: m.name, entries: m.entries, capacity: m.capacity })),
        forwarded: stats, drops, links, unprogrammed, ...announcing, ...(udpSockets ? { udpSockets } : {}), ...(routes ? { routes } : {}), ...(hostPorts ? { hostPorts } : {}), ...(netnsSources ? { netnsSources } : {}), ...(xdp ? { xdp } : {}), ...(snatDevices ? { snatDevices } : {}), ...(snat4 !== undefined ? { snat4 } : {}), ...(snat6 !== undefined ? { snat6 } : {}), ...(vlansNotServed.length ? { vlansNotServed } : {}),
      };
      if (o.output === 'json') {
        process.stdout.write(`${JSON.stringify(status, null, 2)}\n`);
        return;
      }
      process.stdout.write(`agent:     ${agent}\nmode:      ${mode}\npins:      ${o.pinDir}\nfrontends: ${status.frontends}   backends: ${status.backends}   flows: ${status.flows}\n`);
      if (udpSockets) process.stdout.write(`udp:       ${udpSocketsLine(udpSockets)}\n`);
      if (routes) process.stdout.write(`routes:    ${routesLine(routes)}\n`);
      if (netnsSources) process.stdout.write(`netns:     ${netnsSourcesLine(netnsSources)}\n`);
      if (xdp && Object.keys(xdp).length) process.stdout.write(`xdp:       ${xdpLine(xdp)}\n`);
      if (snatDevices) process.stdout.write(`snat:      ${snatLine(snatDevices)}\n`);
      if (snat4 !== undefined) process.stdout.write(`snat4:     ${snat4 ? `flows to other nodes' backends leave from ${snat4}` : 'none'}\n`);
      if (snat6 !== undefined) process.stdout.write(`snat6:     ${snat6 ? `flows to other nodes' IPv6 backends leave from ${snat6}` : "none: IPv6 to other nodes' backends is dropped (the Node lists no IPv6 address)"}\n`);
      if (vlansNotServed.length) process.stdout.write(`vlans:     ${vlansLine(vlansNotServed)}\n`);
      if (hostPorts) process.stdout.write(`host ports: ${hostPorts.trusted ? `${hostPorts.marked} marked; new SNAT bindings ask the host's sockets about these only` : "not tracked yet (no socket hooks): new SNAT bindings ask the host's sockets about every port"}\n`);
      process.stdout.write('\n');
      process.stdout.write(table(['MAP', 'ENTRIES', 'CAPACITY'], status.maps.map((m) => [m.name, m.entries, m.capacity])));
      process.stdout.write('\nforwarded:\n');
      process.stdout.write(stats.length ? table(['PATH', 'PACKETS', 'BYTES'], stats.map((r) => [r.name, r.packets, r.bytes])) : '(none)\n');
      process.stdout.write('\ndrops:\n');
      process.stdout.write(drops.length ? table(['REASON', 'PACKETS', 'BYTES'], drops.map((r) => [r.name, r.packets, r.bytes])) : '(none)\n');
      if (unprogrammed.length > 0) {
        process.stdout.write('\nnot programmed (the maps cannot take them; each keeps what it had):\n');
        process.stdout.write(table(['SERVICE', 'WHY'], unprogrammed.map((u) => [u.service, u.error])));
      }
      const bgp = announcing.bgp;
      if (bgp && (bgp.peers.length || bgp.prefixes.length || bgp.error)) {
        process.stdout.write(`\nBGP: ${bgp.prefixes.length} prefix(es) announced${bgp.error ? `; last apply failed: ${bgp.error}` : ''}\n`);
        if (bgp.peers.length) process.stdout.write(table(['PEER', 'ADDRESS', 'STATE', 'UPTIME', 'SENT', 'BFD'], bgp.peers.map((p) => [p.peer, p.address, p.state, p.uptime, p.prefixesSent, p.bfd ?? '-'])));
      }
      if (announcing.l2?.length) process.stdout.write(`\nL2: answering ARP for ${announcing.l2.map((a) => `${a.address} (${a.devices.join(',')})`).join(', ')}\n`);
      process.stdout.write('\nattached:\n');
      process.stdout.write(links.length ? table(['WHERE', 'PROGRAM', 'ID', 'LOADED'], links.map((l) => [l.where, l.program, l.id, l.loaded])) : '(nothing found: is the agent running here?)\n');
    });
}

/** The agent's UDP socket terminator in one line. */
/** Whether kept next hops follow route changes at once (ip monitor runs) or within a second. */
export function routesLine(r: RouteChangesStatus): string {
  const hops = r.routing?.perFlow ? `; new flows look their own route up (${r.routing.why})` : '';
  const written = `${r.written} change(s) written${r.lastWritten ? `, last ${r.lastWritten}` : ''}${r.writeError ? `; last write failed: ${r.writeError}` : ''}${hops}`;
  if (r.watching) return `watched by ip monitor (pid ${r.pid ?? '?'}, started ${r.starts}x): ${written}`;
  const ended = r.lastEnd ? `ip monitor ended ${r.lastEnd.at} (${r.lastEnd.how}${r.lastEnd.stderr ? `: ${r.lastEnd.stderr}` : ''})` : 'ip monitor not running';
  return `NOT watched: ${ended}${r.retryAt ? `, next try ${r.retryAt}` : ''}; kept next hops follow changes within a second; ${written}`;
}

export function udpSocketsLine(u: StaleUdpSocketsStatus): string {
  if (!u.enabled) return `connected sockets are not terminated (${u.reason ?? 'unavailable'})`;
  const last = u.lastPass ? `; last pass ${u.lastPass.at} (${u.lastPass.why}): ${u.lastPass.namespaces} namespaces, ${u.lastPass.destroyed} destroyed, ${u.lastPass.ms} ms` : '';
  return `connected sockets to removed backends are terminated: ${u.destroyed} so far in ${u.passes} passes${last}`;
}

/** Where XDP runs, and whether XDP on another device may send frames out of each (and if not, why). */
export function xdpLine(xdp: Record<string, XdpDeviceState>): string {
  return Object.entries(xdp).map(([d, x]) => x.mode === 'off' ? `${d} off, tc only (${x.reason ?? '?'})` : `${d} ${x.mode}, ${x.redirectTarget ? 'a redirect target' : `not a redirect target (${x.reason ?? '?'}): flows routed out of it from another device go through tc`}`).join('; ');
}

/** VLANs of ferry's devices that ferry does not serve, in one line. */
export function vlansLine(vlans: readonly VlanNotServed[]): string {
  return `not served (their tagged frames pass ferry's programs untouched; name them in devices): ${vlans.map((v) => `${v.device} (VLAN ${v.vlan} of ${v.parent})`).join(', ')}`;
}

/** Where SNAT flows leave from: the node's address, or the own address of the device their route leaves by. */
export function snatLine(devices: readonly SnatDevice[]): string {
  const own = devices.map((d) => `out of ${d.name} from ${d.address}`).join(', ');
  return own ? `flows routed ${own}; out of any other device from the node's address` : "from the node's address (no device lends its own)";
}

export function netnsSourcesLine(n: NetnsSourcesStatus): string {
  const extra = `${n.recorded6 !== undefined ? `, ${n.recorded6} with an IPv6 one` : ''}${n.unaddressed ? `; ${n.unaddressed} without an address` : ''}${n.full ? `; ${n.full} left out: lb4_netns_sources or lb6_netns_sources is full` : ''}`;
  return `${n.recorded} of ${n.namespaces} namespaces' addresses known to the socket hooks (loadBalancerSourceRanges)${extra}`;
}
