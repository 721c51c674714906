// The agent's side of UDP socket termination (src/datapath/socket-terminator.ts): a pass
// over every network namespace of the node after a sync removed a UDP backend, and with
// each conntrack GC (a backend can leave one Service while another keeps it: no removal
// then, but its first Service's sockets must go). Where the kernel cannot (no
// bpf_sock_destroy), the agent says so once and runs without it.
import type { Logger } from 'pino';
import type { Datapath } from '../datapath/loader.js';
import { SocketTerminator, type TerminationPass } from '../datapath/socket-terminator.js';
import { listNetns } from '../sys/netns-list.js';
import type { AgentMetrics } from './metrics.js';

/** At most this many destroyed sockets are logged one by one per pass. */
const LOGGED_PER_PASS = 20;

/** What `ferry status` shows of it (through the agent's /status). */
export interface StaleUdpSocketsStatus {
  enabled: boolean;
  /** Why not, when not enabled. */
  reason?: string;
  passes: number;
  destroyed: number;
  lastPass?: { at: string; why: string; namespaces: number; destroyed: number; ms: number };
}

export class StaleUdpSockets {
  private passes = 0;
  private destroyedTotal = 0;
  private lastPass: StaleUdpSocketsStatus['lastPass'];

  private constructor(
    private readonly terminator: SocketTerminator | undefined,
    private readonly unavailable: string | undefined,
    private readonly log: Logger,
    private readonly metrics: AgentMetrics,
  ) {}

  static start(datapath: Datapath, log: Logger, metrics: AgentMetrics): StaleUdpSockets {
    let terminator: SocketTerminator | undefined;
    let unavailable: string | undefined;
    try {
      terminator = SocketTerminator.load(datapath.config, datapath.sizes);
    } catch (e) {
      unavailable = (e as Error).message;
      log.warn({ err: unavailable }, 'connected UDP sockets are not terminated when their backend goes');
    }
    return new StaleUdpSockets(terminator, unavailable, log.child({ part: 'udp-sockets' }), metrics);
  }

  status(): StaleUdpSocketsStatus {
    return { enabled: this.terminator !== undefined, ...(this.unavailable ? { reason: this.unavailable } : {}), passes: this.passes, destroyed: this.destroyedTotal, ...(this.lastPass ? { lastPass: this.lastPass } : {}) };
  }

  /** One pass; `why` is logged with what it destroyed. */
  sweep(why: string): number {
    if (!this.terminator) return 0;
    const t0 = performance.now();
    let namespaces: string[];
    let pass: TerminationPass;
    try {
      namespaces = listNetns();
      pass = this.terminator.terminate(namespaces);
    } catch (e) {
      this.log.error({ why, err: (e as Error).message }, 'stale UDP socket pass failed');
      return 0;
    }
    const ms = Math.round(performance.now() - t0);
    for (const t of pass.terminated.slice(0, LOGGED_PER_PASS)) this.log.info({ why, netns: t.netns, cookie: String(t.cookie), backend: `${t.backend}:${t.port}`, rc: t.rc }, 'connected UDP socket to a removed backend destroyed');
    const destroyed = pass.terminated.filter((t) => t.rc === 0).length;
    this.metrics.udpSocketsTerminated.inc(destroyed);
    this.passes++;
    this.destroyedTotal += destroyed;
    this.lastPass = { at: new Date().toISOString(), why, namespaces: namespaces.length, destroyed, ms };
    if (pass.terminated.length > LOGGED_PER_PASS) this.log.info({ why, destroyed, namespaces: namespaces.length, ms }, 'connected UDP sockets to removed backends destroyed');
    // A namespace that went away between the listing and its pass is expected; log the rest quietly.
    if (pass.failed.length) this.log.debug({ why, failed: pass.failed.slice(0, 5), count: pass.failed.length }, 'namespaces not searched for stale UDP sockets');
    return destroyed;
  }

  close(): void {
    this.terminator?.close();
  }
}
