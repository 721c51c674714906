// The address a network namespace's connections leave from, with the namespace's cookie:
// both read from inside it (its interfaces as getifaddrs(3) sees them there).
import { networkInterfaces, type NetworkInterfaceInfo } from 'node:os';
import { inNetns } from './netns.js';
import { netnsCookie } from './socket.js';

export interface NetnsSource {
  cookie: bigint;
  /** Undefined while it has no address (the CNI not done yet) or several and no eth0. */
  address: string | undefined;
}

/** A pod's address: eth0's first IPv4 address, else the only non-loopback IPv4 address there is. */
export function sourceAddress(ifs: Readonly<Record<string, readonly NetworkInterfaceInfo[] | undefined>>): string | undefined {
  const v4 = (list: readonly NetworkInterfaceInfo[] | undefined) => (list ?? []).filter((a) => a.family === 'IPv4' && !a.internal).map((a) => a.address);
  const eth0 = v4(ifs.eth0);
  if (eth0.length > 0) return eth0[0];
  const all = [...new Set(Object.values(ifs).flatMap(v4))];
  return all.length === 1 ? all[0] : undefined;
}

/** `path`: a namespace file (/run/netns/x, /proc/pid/ns/net). */
export function readNetnsSource(path: string): NetnsSource {
  return inNetns(path, () => ({ cookie: netnsCookie(), address: sourceAddress(networkInterfaces()) }));
}
