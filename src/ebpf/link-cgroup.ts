// cgroup socket hooks (connect4, sendmsg4, recvmsg4, getpeername4) as BPF links, attached
// only after checking the target is the cgroup v2 directory we meant. Attaching to a
// nested or dying cgroup silently leaves most sockets unbalanced (seen with Cilium on
// Talos), so the hierarchy root is required unless the caller says otherwise.
import { closeSync, existsSync, openSync, constants as fsc, statSync, statfsSync } from 'node:fs';
import { join } from 'node:path';
import { ErrorCode, FerryError, errnoError } from '../errors.js';
import { libbpf } from './libbpf.js';
import { BpfLink } from './link.js';
import type { Program } from './object.js';

const CGROUP2_SUPER_MAGIC = 0x63677270;
/** The root of a cgroup v2 hierarchy has kernfs inode 1. */
const CGROUP2_ROOT_INO = 1;

export type CgroupTarget =
  /** The real root of the cgroup v2 hierarchy: what the agent on a node uses. */
  | { path: string; expect: 'hierarchy-root' }
  /** A sub-tree acting as one host's root, as in the sandbox and tests. */
  | { path: string; expect: 'subtree' };

export interface CgroupCheck {
  path: string;
  isHierarchyRoot: boolean;
  inode: number;
}

export function checkCgroup(target: CgroupTarget): CgroupCheck {
  const op = `check cgroup ${target.path}`;
  if (!existsSync(target.path)) {
    throw new FerryError({ code: ErrorCode.NotFound, op, cause: 'no such directory', hint: 'point the agent at the cgroup v2 mount (often /sys/fs/cgroup or /sys/fs/cgroup/unified)' });
  }
  if (Number(statfsSync(target.path).type) !== CGROUP2_SUPER_MAGIC) {
    throw new FerryError({ code: ErrorCode.CgroupNotRoot, op, cause: 'not a cgroup v2 filesystem', hint: 'mount cgroup2 (mount -t cgroup2 none /sys/fs/cgroup) and use that path' });
  }
  const inode = Number(statSync(target.path).ino);
  // Only non-root cgroups have cgroup.type, even inside a cgroup namespace: the check sees
  // through a namespaced mount that merely looks like the root.
  const isHierarchyRoot = inode === CGROUP2_ROOT_INO && !existsSync(join(target.path, 'cgroup.type'));
  if (target.expect === 'hierarchy-root' && !isHierarchyRoot) {
    throw new FerryError({
      code: ErrorCode.CgroupNotRoot,
      op,
      cause: 'this is a nested cgroup, not the root of the cgroup v2 hierarchy',
      hint: 'run the agent in the host cgroup namespace (hostPID/hostNetwork with /sys/fs/cgroup mounted from the host), so every pod and host socket is covered',
    });
  }
  return { path: target.path, isHierarchyRoot, inode };
}

export function attachCgroup(program: Program, target: CgroupTarget): BpfLink {
  checkCgroup(target);
  const where = `cgroup ${program.section.replace(/^cgroup\//, '')} ${target.path}`;
  const fd = openSync(target.path, fsc.O_RDONLY | fsc.O_DIRECTORY);
  try {
    const lb = libbpf();
    const h = lb.programAttachCgroup(program.handle, fd);
    if (!h) throw errnoError(`attach ${program.name} to ${where}`, lb.errno(), ErrorCode.Attach);
    return new BpfLink(program.name, where, h);
  } finally {
    closeSync(fd);
  }
}
