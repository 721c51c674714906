// The check that binds a codec to the BTF type of the map it opens: refused with every
// difference listed.
import type { Btf } from './btf.js';
import type { Codec } from './codec.js';
import { ErrorCode, FerryError } from '../errors.js';

/** Throw a layout error listing every difference between a codec and a BTF type. */
export function assertLayout(op: string, codec: Codec<unknown>, btf: Btf, typeId: number): void {
  const diffs = codec.diff(btf, typeId);
  if (diffs.length === 0) return;
  throw new FerryError({
    code: ErrorCode.Layout,
    op,
    cause: `${codec.cName} in TypeScript does not match the BTF of the object: ${diffs.join('; ')}`,
    hint: 'update the codec to match bpf/shared, rebuild, or drain and remove the old pinned maps',
    detail: diffs.join('\n'),
  });
}
