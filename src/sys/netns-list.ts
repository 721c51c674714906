// Every network namespace of the node this process can reach: its own, the named ones
// (/run/netns: where `ip netns` and container runtimes pin pod namespaces) and those of
// the processes it can see. One path per namespace (by inode), for inNetns.
import { readdirSync, statSync } from 'node:fs';

export interface NetnsListOptions {
  /** Directories of namespace pins (default: /run/netns). */
  pinDirs?: readonly string[];
  /** Also the namespaces of processes in /proc (needs the host's PID namespace to see pods'). */
  processes?: boolean;
}

export function listNetns(opts: NetnsListOptions = {}): string[] {
  const seen = new Map<string, string>();
  const add = (path: string) => {
    try {
      const st = statSync(path);
      const id = `${st.dev}:${st.ino}`;
      if (!seen.has(id)) seen.set(id, path);
    } catch {
      // Gone meanwhile (a process exited, a pin removed), or not ours to open.
    }
  };
  add('/proc/thread-self/ns/net');
  for (const dir of opts.pinDirs ?? ['/run/netns']) {
    let names: string[] = [];
    try {
      names = readdirSync(dir);
    } catch {
      continue;
    }
    for (const n of names) add(`${dir}/${n}`);
  }
  if (opts.processes ?? true) {
    for (const pid of readdirSync('/proc')) if (/^\d+$/.test(pid)) add(`/proc/${pid}/ns/net`);
  }
  return [...seen.values()];
}
