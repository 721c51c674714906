// The agent's side of loadBalancerSourceRanges at the socket hooks: every network
// namespace it can see (the runtime's pins under /run/netns, and processes' namespaces
// where it shares the host's PID namespace) is entered, and its cookie and address are
// written to lb4_netns_sources, its IPv6 one to lb6_netns_sources (src/datapath/netns-sources.ts). A pod's connect() to a
// ranged LoadBalancer IP is refused until its namespace is there, so a new pin is looked
// at at once, and again while the CNI has not given it an address yet.
import { watch, type FSWatcher } from 'node:fs';
import type { Logger } from 'pino';
import { NetnsSources } from '../datapath/netns-sources.js';
import type { DatapathMaps } from '../datapath/layouts.js';
import { listNetns } from '../sys/netns-list.js';
import { readNetnsSource, type NetnsSource } from '../sys/netns-source.js';
import { netnsCookie } from '../sys/socket.js';
import type { AgentMetrics } from './metrics.js';

const PIN_DIR = '/run/netns';
/** A pass this often, and after a pin appears: at once, and while a namespace has no address yet. */
const PASS_MS = 5000;
const AFTER_PIN_MS = [200, 1000, 3000];

/** What `ferry status` shows of it (through the agent's /status). */
export interface NetnsSourcesStatus {
  namespaces: number;
  recorded: number;
  /** Namespaces whose IPv6 address is recorded (those with one). */
  recorded6?: number;
  /** Namespaces without an address yet, or with several and no eth0. */
  unaddressed: number;
  /** Left out: lb4_netns_sources or lb6_netns_sources is full. */
  full: number;
  lastPass?: { at: string; ms: number };
}

export class NetnsSourceScanner {
  private timer: NodeJS.Timeout | undefined;
  private readonly soon = new Set<NodeJS.Timeout>();
  private watcher: FSWatcher | undefined;
  private last: NetnsSourcesStatus = { namespaces: 0, recorded: 0, unaddressed: 0, full: 0 };
  /** What each listed namespace said last: one that cannot be read for a moment keeps it. */
  private readonly seen = new Map<string, NetnsSource>();

  constructor(
    private readonly sources: NetnsSources,
    private readonly log: Logger,
    private readonly metrics: AgentMetrics,
    private readonly list: () => string[] = () => listNetns({ pinDirs: [PIN_DIR] }),
    private readonly sources6?: NetnsSources,
  ) {}

  static start(maps: Pick<DatapathMaps, 'lb4_netns_sources'> & Partial<Pick<DatapathMaps, 'lb6_netns_sources'>>, log: Logger, metrics: AgentMetrics): NetnsSourceScanner {
    const v6 = maps.lb6_netns_sources && new NetnsSources(maps.lb6_netns_sources);
    const s = new NetnsSourceScanner(new NetnsSources(maps.lb4_netns_sources), log.child({ part: 'netns-sources' }), metrics, undefined, v6);
    s.passLogged();
    s.timer = setInterval(() => s.passLogged(), PASS_MS);
    s.timer.unref();
    try {
      s.watcher = watch(PIN_DIR, () => s.passSoon());
      s.watcher.on('error', () => undefined);
    } catch {
      // No pin directory (yet): the periodic pass still finds processes' namespaces.
    }
    return s;
  }

  status(): NetnsSourcesStatus {
    return this.last;
  }

  /** Enter every namespace, and make the map hold what they say. */
  pass(): NetnsSourcesStatus {
    const t0 = performance.now();
    const want = new Map<bigint, string>();
    const want6 = new Map<bigint, string>();
    // The agent's own namespace is the host's: the hooks use the node's address there.
    const own = netnsCookie();
    const paths = this.list();
    let namespaces = 0;
    let unaddressed = 0;
    const listed = new Set(paths);
    for (const path of [...this.seen.keys()]) if (!listed.has(path)) this.seen.delete(path);
    for (const path of paths) {
      let s = this.seen.get(path);
      try {
        s = readNetnsSource(path);
        this.seen.set(path, s);
      } catch (e) {
        // Gone between the listing and now (the next listing drops it), or not ours to enter.
        this.log.debug({ netns: path, err: (e as Error).message }, 'namespace not read');
      }
      if (!s || s.cookie === own) continue;
      namespaces++;
      if (s.address) want.set(s.cookie, s.address);
      else unaddressed++;
      if (s.address6) want6.set(s.cookie, s.address6);
    }
    let sync;
    let full6 = 0;
    try {
      sync = this.sources.sync(want);
      full6 = this.sources6?.sync(want6).full ?? 0;
    } catch (e) {
      this.log.error({ err: (e as Error).message }, 'cannot write the namespaces\' source addresses');
      return this.last;
    }
    const full = sync.full + full6;
    if (full > 0 && full !== this.last.full) this.log.error({ left: sync.full, left6: full6, capacity: this.sources.capacity }, 'lb4_netns_sources or lb6_netns_sources is full: pods of the namespaces left out are refused at LoadBalancer IPs with source ranges');
    this.metrics.netnsSources.set(this.sources.size);
    this.metrics.netnsSourcesFull.set(full);
    this.last = { namespaces, recorded: this.sources.size, ...(this.sources6 ? { recorded6: this.sources6.size } : {}), unaddressed, full, lastPass: { at: new Date().toISOString(), ms: Math.round(performance.now() - t0) } };
    return this.last;
  }

  /** A pass from a timer: an error is logged, never thrown out of the event loop. */
  private passLogged(): void {
    try {
      this.pass();
    } catch (e) {
      this.log.error({ err: (e as Error).message }, 'namespace pass failed');
    }
  }

  private passSoon(): void {
    if (this.soon.size > 0) return; // already coming
    for (const ms of AFTER_PIN_MS) {
      const t = setTimeout(() => {
        this.soon.delete(t);
        this.passLogged();
      }, ms);
      t.unref();
      this.soon.add(t);
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    for (const t of this.soon) clearTimeout(t);
    this.soon.clear();
    this.watcher?.close();
  }
}
