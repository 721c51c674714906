// BGP on this node, through the FRR beside the agent: every pass works out what this node
// announces (announce/bgp.ts) and applies only the difference to FRR's running
// configuration (announce/frr-config.ts) with vtysh, never restarting it. FRR outlives the
// agent: an agent restart withdraws nothing (it reads FRR's configuration back first), and
// no peer selecting the node takes ferry's configuration out. Session and BFD state are
// polled for /status, metrics and the CLI.
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { bgpNodeConfig, parseBgpAdvertisement, parseBgpPeer, type BgpNodeConfig, type CustomObject, type PeerProblem } from '../announce/bgp.js';
import { EMPTY_FRR, frrCommands, parseRunning, renderFrr, resendShared, type FrrConfig } from '../announce/frr-config.js';
import { bfdHoldsSessionIdle, bfdOnlyWhenEstablished, bfdTakenOff, peersWithBfd } from '../announce/frr-quirks.js';
import { systemClock, type Clock, type Timer } from '../clock.js';
import { LastingWarnings, type EventSink } from '../k8s/events.js';
import type { AgentMetrics } from './metrics.js';

/** What the speaker needs of FRR (sys/vtysh.ts's Vtysh, or a test double). */
export interface FrrControl {
  apply(commands: string): Promise<void>;
  show(command: string): Promise<string>;
  showJson<T>(command: string): Promise<T>;
}

export interface BgpSource {
  node(): V1Node | undefined;
  nodes(): readonly V1Node[];
  services(): readonly V1Service[];
  slices(): readonly V1EndpointSlice[];
  peers(): readonly CustomObject[];
  advertisements(): readonly CustomObject[];
  /** False until peers and advertisements are listed completely (and the datapath synced once). */
  synced(): boolean;
  datapathHealthy(): boolean;
  unprogrammed(): ReadonlySet<string>;
}

export interface BgpSpeakerDeps {
  source: BgpSource;
  frr: FrrControl;
  /** A peer's password from its Secret (undefined: not there). */
  password(ref: { name: string; key: string }): Promise<string | undefined>;
  /** Warnings on a peer this node leaves out (kubectl describe bgppeer shows them). */
  events?: EventSink;
  metrics: AgentMetrics;
  log: Logger;
  /** Changes are applied this long after they arrive (they come in bursts). */
  debounceMs?: number;
  pollIntervalMs?: number;
  clock?: Clock;
}

export interface PeerState {
  peer: string;
  address: string;
  state: string;
  uptime: string;
  prefixesSent: number;
  bfd?: string;
}

const RETRY_MS = 5_000;

export class BgpSpeaker {
  private readonly clock: Clock;
  private applied: FrrConfig | undefined;
  private last: BgpNodeConfig | undefined;
  private timer: Timer | undefined;
  private pollTimer: Timer | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private stopped = false;
  private peers: PeerState[] = [];
  private lastError: string | undefined;
  /** bgpd came back empty: send the prefix lists and route maps again (resendShared). */
  private frrRestarted = false;
  /** Why FRR's session state could not be read (logged when it changes). */
  private pollError: string | undefined;
  private reported = '';
  /** FRR was read once since the start (to take out what a previous agent left, if nothing selects this node now). */
  private checked = false;
  /** Warning Events on peers this node leaves out, once while each problem lasts. */
  private readonly peerWarnings: LastingWarnings;
  /** FRR keeps a session with BFD Idle while BFD is down (announce/frr-quirks.ts); read once (until then, BFD waits for the session as on such a FRR). */
  private bfdHoldsIdle: boolean | undefined;
  /** Peers whose BFD is off until their session is established (on such a FRR). */
  private bfdHeld = new Set<string>();

  constructor(private readonly d: BgpSpeakerDeps) {
    this.clock = d.clock ?? systemClock;
    this.peerWarnings = new LastingWarnings(d.events, (e) => d.log.debug({ err: (e as Error).message }, 'cannot post an Event on a BGPPeer'));
  }

  start(): void {
    this.kick();
    const poll = () => {
      void this.poll().finally(() => {
        if (this.stopped) return;
        this.pollTimer = this.clock.setTimeout(poll, this.d.pollIntervalMs ?? 5_000);
        this.pollTimer.unref?.();
      });
    };
    poll();
  }

  /** Something that may change the announcements changed. */
  kick(delay = this.d.debounceMs ?? 50): void {
    if (this.stopped || this.timer) return;
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      void this.pass();
    }, delay);
    this.timer.unref?.();
  }

  /** One pass; passes never overlap (one asked for meanwhile follows). */
  async pass(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = this.applyOnce().finally(() => {
      this.running = undefined;
    });
    await this.running;
    if (this.again && !this.stopped) {
      this.again = false;
      await this.pass();
    }
  }

  private async applyOnce(): Promise<void> {
    const s = this.d.source;
    const node = s.node();
    if (!s.synced() || !node) return;
    const peerObjects = s.peers();
    const peers = peerObjects.map(parseBgpPeer);
    const passwords = new Map<string, string>();
    for (const p of peers) {
      if (!p.passwordSecretRef || p.errors.length) continue;
      const pw = await this.d.password(p.passwordSecretRef).catch(() => undefined);
      if (pw !== undefined) passwords.set(p.name, pw);
    }
    const cfg = bgpNodeConfig({ node, nodes: s.nodes(), services: s.services(), slices: s.slices(), peers, advertisements: s.advertisements().map(parseBgpAdvertisement), passwords, datapathHealthy: s.datapathHealthy(), unprogrammed: s.unprogrammed() });
    this.reportProblems(cfg?.problems ?? []);
    this.eventPeerProblems(node.metadata?.name ?? '', cfg?.peerProblems ?? [], peerObjects);
    if (!cfg && this.applied === undefined) {
      this.d.metrics.bgpPrefixes.set(0);
      // No peer selects this node. Once after a start, look whether FRR (if there is one)
      // holds ferry's configuration from before, and take it out; otherwise leave FRR be.
      if (this.checked) return;
      this.checked = true;
      const running = await this.d.frr.show('show running-config').catch(() => undefined);
      if (running === undefined || !parseRunning(running).bgp) return;
      this.applied = parseRunning(running);
    }
    try {
      // After a start, FRR's own configuration is what is there (FRR outlives the agent).
      this.applied ??= parseRunning(await this.d.frr.show('show running-config'));
      if (this.bfdHoldsIdle === undefined) {
        const version = await this.d.frr.show('show version').catch(() => undefined);
        if (version !== undefined) this.bfdHoldsIdle = bfdHoldsSessionIdle(version); // else asked again next pass
      }
      // A session not polled yet (after a start) keeps what FRR has: an agent restart changes nothing.
      const sessionState = (address: string) => this.peers.find((p) => p.address === address && p.state !== 'Unknown')?.state;
      const hadBfd = peersWithBfd(this.applied);
      const bfdAllowed = (address: string) => (sessionState(address) ?? (hadBfd.has(address) ? 'Established' : undefined)) === 'Established';
      const applying = cfg && this.bfdHoldsIdle !== false ? bfdOnlyWhenEstablished(cfg, bfdAllowed) : cfg;
      const want = applying ? renderFrr(applying) : EMPTY_FRR;
      if (this.frrRestarted) this.applied = resendShared(this.applied, want);
      const commands = frrCommands(this.applied, want);
      if (commands) {
        const t0 = performance.now();
        await this.d.frr.apply(commands);
        // Taking BFD off does not start a peer such a FRR holds Idle: restart those that are down.
        const held = bfdTakenOff(this.applied, want).filter((a) => applying?.peers.some((p) => p.address === a) && ![undefined, 'Established'].includes(sessionState(a)));
        for (const address of held) await this.d.frr.show(`clear bgp ${address}`).catch((e: Error) => this.d.log.warn({ err: e.message, address }, 'cannot restart a BGP peer'));
        const ms = performance.now() - t0;
        this.d.metrics.bgpApplyDuration.observe(ms / 1000);
        this.d.log.info({ prefixes: cfg?.prefixes.length ?? 0, peers: cfg?.peers.length ?? 0, ms: Math.round(ms) }, 'FRR configuration applied');
      }
      this.bfdHeld = new Set((cfg?.peers ?? []).filter((p) => p.bfd && !applying?.peers.find((q) => q.address === p.address)?.bfd).map((p) => p.address));
      this.applied = want;
      this.frrRestarted = false;
      this.last = cfg;
      this.lastError = undefined;
      this.d.metrics.bgpPrefixes.set(cfg?.prefixes.length ?? 0);
    } catch (e) {
      // Read FRR back next time: part of the commands may have gone through.
      this.applied = undefined;
      this.lastError = (e as Error).message;
      this.d.metrics.bgpApplyErrors.inc();
      this.d.log.error({ err: this.lastError }, 'cannot apply the BGP configuration to FRR; retrying');
      this.kick(RETRY_MS);
    }
  }

  private reportProblems(problems: string[]): void {
    const text = problems.join(' | ');
    if (text && text !== this.reported) this.d.log.error({ problems }, 'BGP resources with errors: those parts are left out');
    this.reported = text;
  }

  /** One Warning Event per node and problem while it lasts (again if it comes back). */
  private eventPeerProblems(node: string, problems: readonly PeerProblem[], objects: ReturnType<BgpSource['peers']>): void {
    for (const p of problems) {
      const uid = (objects.find((o) => o.metadata?.name === p.peer)?.metadata as { uid?: string } | undefined)?.uid;
      this.peerWarnings.warn({ kind: 'BGPPeer', apiVersion: 'ferry.dev/v1alpha1', namespace: '', name: p.peer, ...(uid ? { uid } : {}) }, p.reason, `${node}: ${p.message}`);
    }
    this.peerWarnings.passDone();
  }

  /** Session and BFD state from FRR, for /status, metrics and `ferry bgp`. */
  private async poll(): Promise<void> {
    const last = this.last;
    if (!last) {
      this.peers = [];
      this.kick();
      return;
    }
    try {
      const summary = await this.d.frr.showJson<{ ipv4Unicast?: { peers?: Record<string, { state?: string; peerUptime?: string; pfxSnt?: number }> } }>('show bgp summary json');
      const bfd = await this.d.frr.showJson<Array<{ peer?: string; status?: string }>>('show bfd peers json').catch(() => []);
      const sessions = summary.ipv4Unicast?.peers ?? {};
      // A peer applied and unknown to bgpd: it restarted (watchfrr restarts a crashed daemon
      // from frr.conf, which holds none of ferry's configuration). Read FRR back and apply again.
      const lost = last.peers.filter((p) => !(p.address in sessions)).map((p) => p.address);
      if (lost.length && this.applied && last === this.last) {
        this.d.log.warn({ peers: lost }, 'FRR has lost peers ferry configured (bgpd restarted?): applying the configuration again');
        this.d.metrics.bgpConfigLost.inc();
        this.applied = undefined;
        this.frrRestarted = true;
        this.kick();
      }
      this.peers = last.peers.map((p) => {
        const s = sessions[p.address];
        const b = Array.isArray(bfd) ? bfd.find((x) => x.peer === p.address) : undefined;
        const bfdState = this.bfdHeld.has(p.address) ? 'off until the session is up (FRR quirk)' : (b?.status ?? 'unknown');
        return { peer: p.name, address: p.address, state: s?.state ?? 'Unknown', uptime: s?.peerUptime ?? '', prefixesSent: s?.pfxSnt ?? 0, ...(p.bfd ? { bfd: bfdState } : {}) };
      });
      this.d.metrics.bgpSessions.reset();
      for (const p of this.peers) this.d.metrics.bgpSessions.set({ peer: p.peer, state: p.state }, 1);
      // The datapath's health is not an event: look at it (and anything missed) with the poll.
      this.kick();
      this.pollError = undefined;
    } catch (e) {
      const err = (e as Error).message;
      if (err !== this.pollError) this.d.log.warn({ err }, 'cannot read BGP state from FRR');
      this.pollError = err;
    }
  }

  status(): { peers: PeerState[]; prefixes: string[]; error?: string } {
    const error = this.lastError ?? this.pollError;
    return { peers: this.peers, prefixes: (this.last?.prefixes ?? []).map((p) => p.prefix), ...(error ? { error } : {}) };
  }

  /** Stop: FRR keeps its configuration and its sessions (an agent restart withdraws nothing). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) this.clock.clearTimeout(this.timer);
    if (this.pollTimer) this.clock.clearTimeout(this.pollTimer);
    await this.running;
  }
}
