// The addresses a network namespace's connections leave from (IPv4 and IPv6), with the
// namespace's cookie: read from inside it (its interfaces as getifaddrs(3) sees them
// there, its main routing tables as /proc/thread-self/net/route and ipv6_route show the
// calling thread's namespace).
// Node lists only interfaces that are up and running: a veth counts a moment after both
// its ends are up, so the agent's next pass picks it up.
import { readFileSync } from 'node:fs';
import { networkInterfaces, type NetworkInterfaceInfo } from 'node:os';
import { inNetns } from './netns.js';
import { netnsCookie } from './socket.js';

export interface NetnsSource {
  cookie: bigint;
  /** Undefined while it has no address (the CNI not done yet), or several and neither a default route's device nor eth0 tells which. */
  address: string | undefined;
  /** Its IPv6 source address, chosen as the IPv4 one (link-local addresses never count). */
  address6: string | undefined;
}

/** The device of the main table's default route in /proc/net/route's text, if any (the lowest metric). */
export function defaultRouteDevice(routeText: string): string | undefined {
  let best: { dev: string; metric: number } | undefined;
  for (const line of routeText.split('\n').slice(1)) {
    const [dev, dest, , , , , metric, mask] = line.trim().split(/\s+/);
    if (!dev || dest !== '00000000' || mask !== '00000000') continue;
    const m = Number.parseInt(metric ?? '', 10);
    if (!best || m < best.metric) best = { dev, metric: Number.isNaN(m) ? 0 : m };
  }
  return best?.dev;
}

/** The device of the IPv6 main table's default route (::/0) in /proc/net/ipv6_route's text, if any (the lowest metric). */
export function defaultRouteDevice6(routeText: string): string | undefined {
  let best: { dev: string; metric: number } | undefined;
  for (const line of routeText.split('\n')) {
    const f = line.trim().split(/\s+/);
    const dev = f[9];
    // dest, dest length, src, src length, next hop, metric, refs, use, flags, device
    if (f.length < 10 || !dev || dev === 'lo' || !/^0{32}$/.test(f[0]!) || f[1] !== '00') continue;
    const m = Number.parseInt(f[5]!, 16);
    if (!best || m < best.metric) best = { dev, metric: Number.isNaN(m) ? 0 : m };
  }
  return best?.dev;
}

/** A pod's address of a family: the first such address of its default route's device, else eth0's, else the only one there is (loopback and, for IPv6, link-local ones left out). */
export function sourceAddress(ifs: Readonly<Record<string, readonly NetworkInterfaceInfo[] | undefined>>, defaultDevice?: string, family: 'IPv4' | 'IPv6' = 'IPv4'): string | undefined {
  const ofFamily = (list: readonly NetworkInterfaceInfo[] | undefined) => (list ?? []).filter((a) => a.family === family && !a.internal && !(family === 'IPv6' && /^fe[89ab]/i.test(a.address))).map((a) => a.address);
  for (const dev of [defaultDevice, 'eth0']) {
    const on = dev === undefined ? [] : ofFamily(ifs[dev]);
    if (on.length > 0) return on[0];
  }
  const all = [...new Set(Object.values(ifs).flatMap(ofFamily))];
  return all.length === 1 ? all[0] : undefined;
}

/** `path`: a namespace file (/run/netns/x, /proc/pid/ns/net). */
export function readNetnsSource(path: string): NetnsSource {
  return inNetns(path, () => {
    // No procfs view of the routes (or no IPv6): the interfaces alone decide.
    const dev = (file: string, parse: (text: string) => string | undefined) => {
      try {
        return parse(readFileSync(`/proc/thread-self/net/${file}`, 'utf8'));
      } catch {
        return undefined;
      }
    };
    const ifs = networkInterfaces();
    return { cookie: netnsCookie(), address: sourceAddress(ifs, dev('route', defaultRouteDevice)), address6: sourceAddress(ifs, dev('ipv6_route', defaultRouteDevice6), 'IPv6') };
  });
}
