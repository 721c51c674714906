// lb4_backend_ids: each local backend's endpoint → its id, beside lb4_backends (an array by
// id). tc egress reads it in an upgrade's switch to tell a local backend's reply whose
// binding is not copied yet (bpf/lib/snat.h); remote backends are never asked about, so
// they cost it nothing (a first sync writes each entry). The writer keeps it with every
// backend write and removal; a load that did not adopt both maps as they were (a first
// start, an upgrade from a build without it, a resize) rebuilds it from lb4_backends before
// the programs attach.
import { BackendFlags, type DatapathMaps, type Lb4Backend, type Lb4BackendKey } from './layouts.js';

export type BackendIndexMaps = Pick<DatapathMaps, 'lb4_backends' | 'lb4_backend_ids'>;

export function backendIndexKey(b: Pick<Lb4Backend, 'address' | 'port' | 'proto'>): Lb4BackendKey {
  return { address: b.address, port: b.port, proto: b.proto };
}

export function isLocal(b: Pick<Lb4Backend, 'flags'> | undefined): boolean {
  return b !== undefined && (b.flags & BackendFlags.LB_BACKEND_F_LOCAL) !== 0;
}

const keyText = (k: Lb4BackendKey) => `${k.address}:${k.port}/${k.proto}`;

/** Make lb4_backend_ids hold exactly lb4_backends' local endpoints. */
export function rebuildBackendIndex(maps: BackendIndexMaps): { written: number; deleted: number } {
  const want = new Map<string, [Lb4BackendKey, number]>();
  for (const [id, b] of maps.lb4_backends.entries()) {
    if (!isLocal(b)) continue;
    const k = backendIndexKey(b);
    want.set(keyText(k), [k, id]);
  }
  const stale: Lb4BackendKey[] = [];
  const writes: Array<[Lb4BackendKey, number]> = [];
  const have = new Map(maps.lb4_backend_ids.entries().map(([k, id]) => [keyText(k), { k, id }]));
  for (const { k, id } of have.values()) if (want.get(keyText(k))?.[1] !== id) stale.push(k);
  for (const [text, [k, id]] of want) if (have.get(text)?.id !== id) writes.push([k, id]);
  if (stale.length) maps.lb4_backend_ids.deleteBatch(stale);
  if (writes.length) maps.lb4_backend_ids.updateBatch(writes);
  return { written: writes.length, deleted: stale.length };
}
