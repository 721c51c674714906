// The address a network namespace's connections leave from, with the namespace's cookie:
// both read from inside it (its interfaces as getifaddrs(3) sees them there, its main
// routing table as /proc/thread-self/net/route shows the calling thread's namespace).
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

/** A pod's address: the first IPv4 address of its default route's device, else eth0's, else the only non-loopback IPv4 address there is. */
export function sourceAddress(ifs: Readonly<Record<string, readonly NetworkInterfaceInfo[] | undefined>>, defaultDevice?: string): string | undefined {
  const v4 = (list: readonly NetworkInterfaceInfo[] | undefined) => (list ?? []).filter((a) => a.family === 'IPv4' && !a.internal).map((a) => a.address);
  for (const dev of [defaultDevice, 'eth0']) {
    const on = dev === undefined ? [] : v4(ifs[dev]);
    if (on.length > 0) return on[0];
  }
  const all = [...new Set(Object.values(ifs).flatMap(v4))];
  return all.length === 1 ? all[0] : undefined;
}

/** `path`: a namespace file (/run/netns/x, /proc/pid/ns/net). */
export function readNetnsSource(path: string): NetnsSource {
  return inNetns(path, () => {
    let dev: string | undefined;
    try {
      dev = defaultRouteDevice(readFileSync('/proc/thread-self/net/route', 'utf8'));
    } catch {
      // No procfs view of the routes: the interfaces alone decide.
    }
    return { cookie: netnsCookie(), address: sourceAddress(networkInterfaces(), dev) };
  });
}
