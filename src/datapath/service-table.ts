// The service maps read back as frontends: each master entry with its backend slots, the
// wildcard ("known address") entries, the backends and the published Service names. One
// reading serves the writer's restore after a restart, `ferry service list` and explain.
import { LbFlags, lb4KeyCodec, lb4ServiceCodec, type Lb4Backend, type Lb4Key, type Lb4Service } from './layouts.js';
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

export function decodeName(raw: Buffer): string {
  const end = raw.indexOf(0);
  return raw.subarray(0, end < 0 ? raw.length : end).toString('utf8');
}

const keyField = (name: keyof Lb4Key) => lb4KeyCodec.numberReader!(name)!;
const keyAddress = keyField('address');
const keyPort = keyField('port');
const keyProto = keyField('proto');
const keyScope = keyField('scope');
const keySlot = keyField('slot');
const slotBackendId = lb4ServiceCodec.numberReader!('backendId')!;

export function readServiceTable(maps: ServiceTableMaps): ServiceTable {
  const names = new Map(maps.lb4_names.entries().map(([id, v]) => [id, decodeName(v.name)]));
  // A slot entry (nine in ten of the map) is read from its raw bytes: its frontend as a
  // number by (protocol, scope), and its backend id. Decoding each into objects made a
  // restart's restore at 50k Services mostly garbage collection.
  const slots = new Map<number, Map<number, number[]>>();
  const masters: Array<[Lb4Key, Lb4Service, number]> = [];
  const wildcards: string[] = [];
  const frontendOf = (protoScope: number, addressPort: number): number[] | undefined => slots.get(protoScope)?.get(addressPort);
  maps.lb4_services.forEachRaw((keys, k, values, v) => {
    const slot = keySlot(keys, k);
    const protoScope = keyProto(keys, k) * 256 + keyScope(keys, k);
    const addressPort = keyAddress(keys, k) * 65_536 + keyPort(keys, k);
    if (slot > 0) {
      let byFrontend = slots.get(protoScope);
      if (!byFrontend) slots.set(protoScope, (byFrontend = new Map()));
      let ids = byFrontend.get(addressPort);
      if (!ids) byFrontend.set(addressPort, (ids = []));
      ids[slot - 1] = slotBackendId(values, v);
      return;
    }
    const value = lb4ServiceCodec.decode(values, v);
    if (value.flags & LbFlags.LB_F_WILDCARD) wildcards.push(lb4KeyCodec.decode(keys, k).address);
    else masters.push([lb4KeyCodec.decode(keys, k), value, addressPort]);
  });
  const frontends = masters.map(([key, master, addressPort]): TableFrontend => {
    const ids = frontendOf(key.proto * 256 + key.scope, addressPort);
    return { key, master, backendIds: Array.from({ length: master.count }, (_, i) => ids?.[i] ?? 0), name: names.get(master.revNatId) };
  });
  return { frontends, wildcards, backends: new Map(maps.lb4_backends.entries()) };
}
