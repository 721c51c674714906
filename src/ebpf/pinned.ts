// Open a map another process pinned (the agent, usually), after checking its layout.
import { existsSync, statfsSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Codec } from './codec.js';
import { assertLayout } from './layout-check.js';
import { ErrorCode, FerryError, errnoError } from '../errors.js';
import { libbpf } from './libbpf.js';
import { BpfMap, MapType, bpffsHint, mapInfoByFd, type MapOptions } from './map.js';
import { kernelBtf } from './object.js';

const BPF_FS_MAGIC = 0xcafe4a11;

/** Fail with a hint when `dir` is not on a mounted bpffs. */
export function assertBpffs(dir: string): void {
  let probe = dir;
  while (!existsSync(probe) && probe !== dirname(probe)) probe = dirname(probe);
  let type = 0;
  try {
    type = Number(statfsSync(probe).type);
  } catch {
    type = 0;
  }
  if (type !== BPF_FS_MAGIC) {
    throw new FerryError({
      code: ErrorCode.BpffsMissing,
      op: `use pin directory ${dir}`,
      cause: `${probe} is not on a bpf filesystem`,
      hint: 'mount -t bpf bpf /sys/fs/bpf (make setup does), or pass a pin directory under it',
    });
  }
}

/** The single value of a pinned one-entry array (a pinned .rodata, say), as raw bytes. */
export function readPinnedArrayValue(path: string): Buffer {
  const op = `read pinned ${path}`;
  const lb = libbpf();
  const fd = lb.objGet(path);
  if (fd < 0) throw errnoError(op, fd, ErrorCode.MapOp, bpffsHint(fd) ?? 'is the agent running, or has it ever run on this node?');
  try {
    const info = mapInfoByFd(fd);
    const value = Buffer.alloc(info.valueSize);
    const rc = lb.mapLookupElem(fd, Buffer.alloc(4), value);
    if (rc < 0) throw errnoError(op, rc, ErrorCode.MapOp);
    return value;
  } finally {
    lb.close(fd);
  }
}

/** Open a pinned map and check both codecs against the BTF the kernel keeps for it. */
export function openPinnedMap<K, V>(path: string, key: Codec<K>, value: Codec<V>, opts: Pick<MapOptions, 'sizeSetting' | 'sparse'> = {}): BpfMap<K, V> {
  const op = `open pinned map ${path}`;
  assertBpffs(dirname(path));
  const lb = libbpf();
  const fd = lb.objGet(path);
  if (fd < 0) throw errnoError(op, fd, ErrorCode.MapOp, bpffsHint(fd) ?? 'is the agent running, or has it ever run on this node?');
  try {
    const info = mapInfoByFd(fd);
    // Maps of maps carry no value BTF (their values are map references): sizes only.
    if (info.btfId === 0 && (info.type === MapType.HashOfMaps || info.type === MapType.ArrayOfMaps)) {
      return new BpfMap(fd, key, value, { ...opts, ownsFd: true });
    }
    if (info.btfId === 0) {
      throw new FerryError({ code: ErrorCode.Layout, op, cause: 'the map carries no BTF, so its layout cannot be checked', hint: 'it was not created by ferry' });
    }
    const btf = kernelBtf(info.btfId);
    assertLayout(`${op} key`, key as Codec<unknown>, btf, info.btfKeyTypeId);
    assertLayout(`${op} value`, value as Codec<unknown>, btf, info.btfValueTypeId);
    return new BpfMap(fd, key, value, { ...opts, ownsFd: true });
  } catch (e) {
    lb.close(fd);
    throw e;
  }
}
