// The service maps read back as frontends: each master entry with its backend slots, the
// wildcard ("known address") entries, the backends and the published Service names. One
// reading serves the writer's restore after a restart, `ferry service list` and explain.
import { LbFlags, type Lb4Backend, type Lb4Key, type Lb4Service } from './layouts.js';
import type { MapReader } from './pinned-view.js';

export interface TableFrontend {
  /** The master entry's key (slot 0). */
  key: Lb4Key;
  master: Lb4Service;
  /** The backend id in each slot 1..count (0 where a slot is missing). */
  backendIds: number[];
  /** `namespace/name:port`, as the writer published it. */
  name: string | undefined;
}

export interface ServiceTable {
  frontends: TableFrontend[];
  /** Addresses with a wildcard entry. */
  wildcards: string[];
  backends: Map<number, Lb4Backend>;
}

export interface ServiceTableMaps {
  lb4_services: MapReader<Lb4Key, Lb4Service>;
  lb4_backends: MapReader<number, Lb4Backend>;
  lb4_names: MapReader<number, { name: Buffer }>;
}

export const frontendKeyId = (k: Pick<Lb4Key, 'address' | 'port' | 'proto' | 'scope'>): string => `${k.address}|${k.port}|${k.proto}|${k.scope}`;

export function decodeName(raw: Buffer): string {
  const end = raw.indexOf(0);
  return raw.subarray(0, end < 0 ? raw.length : end).toString('utf8');
}

export function readServiceTable(maps: ServiceTableMaps): ServiceTable {
  const names = new Map(maps.lb4_names.entries().map(([id, v]) => [id, decodeName(v.name)]));
  const slots = new Map<string, Map<number, number>>();
  const masters: Array<[Lb4Key, Lb4Service]> = [];
  const wildcards: string[] = [];
  for (const [k, v] of maps.lb4_services.entries()) {
    if (k.slot > 0) {
      const id = frontendKeyId(k);
      let s = slots.get(id);
      if (!s) slots.set(id, (s = new Map()));
      s.set(k.slot, v.backendId);
    } else if (v.flags & LbFlags.LB_F_WILDCARD) {
      wildcards.push(k.address);
    } else {
      masters.push([k, v]);
    }
  }
  const frontends = masters.map(([key, master]): TableFrontend => {
    const s = slots.get(frontendKeyId(key));
    return { key, master, backendIds: Array.from({ length: master.count }, (_, i) => s?.get(i + 1) ?? 0), name: names.get(master.revNatId) };
  });
  return { frontends, wildcards, backends: new Map(maps.lb4_backends.entries()) };
}
