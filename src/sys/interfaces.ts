// This network namespace's interfaces: index and MAC, through netlink-backed calls (not
// /sys/class/net, which shows the namespace sysfs was mounted in, not this one).
import { networkInterfaces } from 'node:os';
import { ErrorCode, FerryError } from '../errors.js';
import { libc } from './libc.js';
import { linkMac } from './links.js';

export interface InterfaceInfo {
  name: string;
  ifindex: number;
  mac: string;
}

export function interfaceInfo(name: string): InterfaceInfo {
  const ifindex = libc().ifNameToIndex(name);
  // os.networkInterfaces() lists only interfaces with an address; ip(8) knows the rest.
  const mac = networkInterfaces()[name]?.find((a) => a.mac && a.mac !== '00:00:00:00:00:00')?.mac ?? (ifindex ? linkMac(name) : undefined);
  if (!ifindex || !mac) {
    throw new FerryError({ code: ErrorCode.Config, op: `read interface ${name}`, cause: !ifindex ? 'no such interface' : 'no MAC address (not Ethernet)', hint: 'devices must be Ethernet interfaces' });
  }
  return { name, ifindex, mac };
}

/** The name of this network namespace's interface with that index, if any. */
export function interfaceName(ifindex: number): string | undefined {
  return ifindex ? libc().ifIndexToName(ifindex) : undefined;
}

/** The infos of the devices that have one; `skipped` hears of the others (gone meanwhile, say). */
export function interfaceInfos(names: readonly string[], skipped: (name: string, err: Error) => void): InterfaceInfo[] {
  return names.flatMap((d) => {
    try {
      return [interfaceInfo(d)];
    } catch (e) {
      skipped(d, e as Error);
      return [];
    }
  });
}
