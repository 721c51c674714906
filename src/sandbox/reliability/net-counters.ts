// The kernel's own IP, ICMP and TCP counters of the hosts a request passes or ends at (the
// router, the nodes, the pods), read before and after a load: which host sent an ICMP
// error or a TCP reset, or met a packet it had no route for, while the load ran (a node's
// and the router's resets may be their own sessions': the agent's, BGP's). What a failed
// run is read by: a connect refused with ENETUNREACH was answered by an ICMP net
// unreachable, and the host whose counters moved is the one that sent it (ferry's own ICMP
// errors are built in BPF and counted by ferry, not here).
import type { Host } from '../netns/testbed.js';

/** Counters that name a host dropping or refusing what it should have forwarded. */
const WATCHED = ['Icmp.OutDestUnreachs', 'Icmp.OutTimeExcds', 'IpExt.InNoRoutes', 'Ip.OutNoRoutes', 'Ip.InAddrErrors', 'Ip.InDiscards', 'Tcp.OutRsts'];

export type NetCounters = Map<string, Record<string, number>>;

/** `/proc/net/snmp` and `/proc/net/netstat` as "Group.Name" → value (a header line, then its values). */
export function parseNetCounters(text: string): Record<string, number> {
  const out: Record<string, number> = {};
  const lines = text.split('\n');
  for (let i = 0; i + 1 < lines.length; i++) {
    const [group, ...names] = lines[i]!.trim().split(/\s+/);
    const [valueGroup, ...values] = lines[i + 1]!.trim().split(/\s+/);
    if (!group?.endsWith(':') || group !== valueGroup || names.length !== values.length || !values.every((v) => /^-?\d+$/.test(v))) continue;
    names.forEach((n, j) => (out[`${group.slice(0, -1)}.${n}`] = Number(values[j])));
    i++;
  }
  return out;
}

/** Each host's counters now (read inside its network namespace). */
export async function readNetCounters(hosts: readonly Host[]): Promise<NetCounters> {
  const all = await Promise.all(hosts.map(async (h) => [h.name, parseNetCounters(await h.execOk(['cat', '/proc/net/snmp', '/proc/net/netstat']))] as const));
  return new Map(all);
}

/** The watched counters that moved, per host ("router: IpExt.InNoRoutes +3"). */
export function movedCounters(before: NetCounters, after: NetCounters): string[] {
  const out: string[] = [];
  for (const [host, now] of after) {
    const was = before.get(host) ?? {};
    const moved = WATCHED.filter((k) => (now[k] ?? 0) !== (was[k] ?? 0)).map((k) => `${k} +${(now[k] ?? 0) - (was[k] ?? 0)}`);
    if (moved.length) out.push(`${host}: ${moved.join(', ')}`);
  }
  return out;
}
