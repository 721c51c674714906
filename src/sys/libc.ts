// The few libc calls Node does not expose, through koffi.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

export const CLONE_NEWNET = 0x40000000;

interface Libc {
  setns(fd: number, nstype: number): number;
  ifNameToIndex(name: string): number;
  errno(): number;
}

let bound: Libc | undefined;

export function libc(): Libc {
  if (bound) return bound;
  const k = require('koffi');
  const lib = k.load('libc.so.6');
  const setns = lib.func('int setns(int fd, int nstype)');
  const ifNameToIndex = lib.func('unsigned int if_nametoindex(const char *name)');
  bound = {
    setns: (fd, type) => setns(fd, type),
    ifNameToIndex: (name) => ifNameToIndex(name),
    errno: () => k.errno(),
  };
  return bound;
}
