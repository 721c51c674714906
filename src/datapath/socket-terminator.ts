// Connected UDP sockets whose backend has left their Service, destroyed in each network
// namespace given (bpf/sock_term.bpf.c): the application gets an error and connects again,
// balanced afresh, as kube-proxy's deletion of a removed endpoint's UDP conntrack entries
// makes its clients' next datagrams find a live endpoint. Only sockets the socket hooks
// balanced are touched (their cookie is in lb4_sock_rev, or lb6_sock_rev, with the address
// they reached).
import { join } from 'node:path';
import { BpfIterator } from '../ebpf/iter.js';
import { BpfObject } from '../ebpf/object.js';
import { ErrorCode, FerryError } from '../errors.js';
import { inNetns } from '../sys/netns.js';
import type { DatapathConfig, MapSizes } from './loader.js';
import { configureObject } from './object-settings.js';
import { ipv6Bytes, ipv6Text } from '../packet/addr.js';

export const SOCK_TERM_OBJECT = 'sock_term.bpf.o';

export interface TerminatedSocket {
  netns: string;
  cookie: bigint;
  backend: string;
  port: number;
  /** bpf_sock_destroy's result: 0, or -errno. */
  rc: number;
}

export interface TerminationPass {
  terminated: TerminatedSocket[];
  /** Namespaces that could not be entered or read (gone meanwhile, say). */
  failed: Array<{ netns: string; error: string }>;
}

/** One line of the iterator's output: "<cookie> <backend address> <port> <rc>" (an IPv6
 * backend in full, eight groups of four digits: given back in its short form). */
export function parseTerminated(text: string, netns: string): TerminatedSocket[] {
  const out: TerminatedSocket[] = [];
  for (const line of text.split('\n')) {
    const m = /^(\d+) (\d+\.\d+\.\d+\.\d+|[0-9a-f]{4}(?::[0-9a-f]{4}){7}) (\d+) (-?\d+)$/.exec(line);
    if (m) out.push({ netns, cookie: BigInt(m[1]!), backend: m[2]!.includes(':') ? ipv6Text(ipv6Bytes(m[2]!)) : m[2]!, port: Number(m[3]), rc: Number(m[4]) });
  }
  return out;
}

export class SocketTerminator {
  private constructor(
    private readonly obj: BpfObject,
    private readonly iter: BpfIterator,
  ) {}

  /** Loaded beside a Datapath (its pins); an error where the kernel lacks bpf_sock_destroy (< 6.5). */
  static load(cfg: DatapathConfig, sizes: MapSizes): SocketTerminator {
    const obj = BpfObject.open(join(cfg.objectsDir, SOCK_TERM_OBJECT));
    try {
      configureObject(obj, cfg, sizes);
      obj.load();
      return new SocketTerminator(obj, BpfIterator.attach(obj.program('sock4_term_udp')));
    } catch (e) {
      obj.close();
      throw new FerryError({ code: ErrorCode.ObjectLoad, op: 'load the UDP socket terminator', cause: (e as Error).message, hint: 'needs the bpf_sock_destroy kfunc (kernel 6.5 or later); without it connected UDP sockets keep a removed backend until closed' });
    }
  }

  /** One pass in each namespace: the sockets destroyed, and the namespaces that failed. */
  terminate(namespaces: readonly string[]): TerminationPass {
    const pass: TerminationPass = { terminated: [], failed: [] };
    for (const netns of namespaces) {
      try {
        pass.terminated.push(...parseTerminated(inNetns(netns, () => this.iter.read()), netns));
      } catch (e) {
        pass.failed.push({ netns, error: (e as Error).message });
      }
    }
    return pass;
  }

  close(): void {
    this.iter.close();
    this.obj.close();
  }
}
