// Run synchronous work (libbpf attach calls, interface lookups) inside another network
// namespace by switching the calling thread with setns(2) and switching back. Only the
// main thread moves; work must not await inside fn.
import { closeSync, openSync } from 'node:fs';
import { CLONE_NEWNET, libc } from './libc.js';
import { ErrorCode, FerryError, errnoMessage } from '../errors.js';

export function netnsPath(name: string): string {
  return name.startsWith('/') ? name : `/run/netns/${name}`;
}

export function inNetns<T>(netns: string, fn: () => T): T {
  if (fn.constructor.name === 'AsyncFunction') {
    throw new FerryError({ code: ErrorCode.Netns, op: `enter netns ${netns}`, cause: 'fn is async', hint: 'only synchronous work may run while the thread is switched' });
  }
  const home = openSync(`/proc/thread-self/ns/net`, 'r');
  let target: number;
  try {
    target = openSync(netnsPath(netns), 'r');
  } catch (e) {
    closeSync(home);
    throw new FerryError({ code: ErrorCode.Netns, op: `enter netns ${netns}`, cause: (e as Error).message, hint: 'does the namespace exist (ip netns list)?' });
  }
  try {
    if (libc().setns(target, CLONE_NEWNET) !== 0) {
      throw new FerryError({ code: ErrorCode.Netns, op: `enter netns ${netns}`, cause: errnoMessage(libc().errno()), hint: 'needs CAP_SYS_ADMIN' });
    }
    try {
      return fn();
    } finally {
      if (libc().setns(home, CLONE_NEWNET) !== 0) {
        // Staying in the wrong namespace would silently misdirect everything after this.
        process.stderr.write(`ferry: fatal: cannot return to the original network namespace: ${errnoMessage(libc().errno())}\n`);
        process.exit(70);
      }
    }
  } finally {
    closeSync(target);
    closeSync(home);
  }
}
