// The BGP speaker against a FRR double. FRR 10.2.0-10.2.2 and 10.3.0 keep a BGP session with
// BFD Idle while BFD is down (before any session existed): on such a FRR the speaker turns
// BFD on only for an established session, and off again (restarting the peer) when the
// session is down; other FRRs get BFD at once. A FRR whose bgpd restarted empty gets the
// configuration again.
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { parseBgpPeer, type BgpNodeConfig } from '../../src/announce/bgp.js';
import { frrText, parseRunning, renderFrr } from '../../src/announce/frr-config.js';
import { bfdHoldsSessionIdle, bfdOnlyWhenEstablished, bfdTakenOff } from '../../src/announce/frr-quirks.js';
import { BgpSpeaker } from '../../src/agent/bgp-speaker.js';
import { AgentMetrics } from '../../src/agent/metrics.js';
import { eventually } from '../harness/wait.js';

const PEER = { apiVersion: 'ferry.dev/v1alpha1', kind: 'BGPPeer', metadata: { name: 'router', uid: 'u1' }, spec: { peerAddress: '10.0.30.1', peerASN: 64513, myASN: 64512, bfd: { receiveIntervalMs: 100, transmitIntervalMs: 100, detectMultiplier: 3 } } };
/** The node configuration the peer alone makes (no prefixes). */
const peerOnly = (): BgpNodeConfig => ({ asn: 64512, routerId: '10.0.30.21', peers: [parseBgpPeer(PEER as never)], prefixes: [], problems: [], peerProblems: [] }) as unknown as BgpNodeConfig;
const NODE = { metadata: { name: 'node-1', labels: { 'kubernetes.io/hostname': 'node-1' } }, status: { addresses: [{ type: 'InternalIP', address: '10.0.30.21' }] } };

describe('FRR versions that hold a session with BFD Idle', () => {
  it('are 10.2.0-10.2.2 and 10.3.0, by `show version`', () => {
    const v = (s: string) => bfdHoldsSessionIdle(`FRRouting ${s} (node-1) on Linux(6.18.0).\nCopyright 1996-2005 Kunihiro Ishiguro, et al.`);
    expect(['10.3', '10.3.0', '10.2', '10.2.2'].map(v)).toEqual([true, true, true, true]);
    expect(['8.4.4', '10.1.3', '10.2.3', '10.3.1', '10.4', '10.7.1', '11.0'].map(v)).toEqual([false, false, false, false, false, false, false]);
    expect(bfdHoldsSessionIdle('')).toBe(false);
  });

  it('BFD is left out for peers not allowed, and taking it off is seen in the configurations', () => {
    const one = peerOnly();
    const cfg = { ...one, peers: [one.peers[0]!, { ...one.peers[0]!, name: 'other', address: '10.0.30.2' }] };
    const held = bfdOnlyWhenEstablished(cfg, (a) => a === '10.0.30.2');
    expect(held.peers.map((p) => Boolean(p.bfd))).toEqual([false, true]);
    expect(cfg.peers.every((p) => p.bfd)).toBe(true); // not changed in place
    const text = frrText(renderFrr(held));
    expect(text).not.toMatch(/neighbor 10\.0\.30\.1 bfd/);
    expect(text).toMatch(/neighbor 10\.0\.30\.2 bfd profile ferry-other/);
    expect(bfdTakenOff(parseRunning(frrText(renderFrr(cfg))), renderFrr(held))).toEqual(['10.0.30.1']);
    expect(bfdTakenOff(renderFrr(held), renderFrr(cfg))).toEqual([]);
  });
});

/** A FRR double: applies are recorded, sessions are what the test says. */
function fakeFrr(version: string | undefined, running = '') {
  const f = {
    state: 'Idle',
    /** bgpd restarted empty: its summary has no peers. */
    empty: false,
    applies: [] as string[],
    cleared: [] as string[],
    apply: async (commands: string) => {
      f.applies.push(commands);
      f.empty = false; // what was applied, bgpd has
    },
    show: async (command: string) => {
      if (command === 'show version') {
        if (version === undefined) throw new Error('vtysh: cannot read the version');
        return `FRRouting ${version} (node-1) on Linux(6.18.0).`;
      }
      if (command === 'show running-config') return running;
      if (command.startsWith('clear bgp ')) {
        f.cleared.push(command.slice('clear bgp '.length));
        return '';
      }
      throw new Error(`unexpected ${command}`);
    },
    showJson: async <T>(command: string): Promise<T> => (command === 'show bgp summary json' ? (f.empty ? {} : { ipv4Unicast: { peers: { '10.0.30.1': { state: f.state } } } }) : []) as T,
  };
  return f;
}

const until = async (cond: () => boolean) => expect(await eventually(async () => cond(), (ok) => ok, 5000, 10)).toBe(true);

/** Run `steps` with a speaker (the peer, this node) started on `frr`, stopped afterwards whatever happens. */
async function withSpeaker(frr: ReturnType<typeof fakeFrr>, steps: (speaker: BgpSpeaker) => Promise<void>, metrics = new AgentMetrics()): Promise<void> {
  const source = { node: () => NODE, nodes: () => [NODE], services: () => [], slices: () => [], peers: () => [PEER], advertisements: () => [], synced: () => true, datapathHealthy: () => true, unprogrammed: () => new Set<string>() };
  const speaker = new BgpSpeaker({ source: source as never, frr, password: async () => undefined, metrics, log: pino({ level: 'silent' }), debounceMs: 1, pollIntervalMs: 20 });
  speaker.start();
  try {
    await steps(speaker);
  } finally {
    await speaker.stop();
  }
}

describe('the BGP speaker on such a FRR', () => {
  it('turns BFD on once the session is established, and off with a restart of the peer when it is down again', async () => {
    const frr = fakeFrr('10.3');
    await withSpeaker(frr, async (speaker) => {
      await until(() => frr.applies.length === 1);
      expect(frr.applies[0]).toMatch(/neighbor 10\.0\.30\.1 remote-as 64513/);
      expect(frr.applies[0]).not.toMatch(/bfd/);
      await until(() => speaker.status().peers[0]?.bfd === 'off until the session is up (FRR quirk)');
      frr.state = 'Established';
      await until(() => frr.applies.length === 2);
      expect(frr.applies[1]).toMatch(/neighbor 10\.0\.30\.1 bfd\n/);
      expect(frr.applies[1]).toMatch(/profile ferry-router/);
      expect(frr.cleared).toEqual([]);
      frr.state = 'Idle';
      await until(() => frr.applies.length === 3);
      expect(frr.applies[2]).toMatch(/no neighbor 10\.0\.30\.1 bfd/);
      expect(frr.cleared).toEqual(['10.0.30.1']);
      await new Promise((r) => setTimeout(r, 100));
      expect(frr.applies).toHaveLength(3); // nothing more while it stays down
    });
  });

  it('a restarted agent changes nothing of an established session\'s BFD', async () => {
    const frr = fakeFrr('10.3', `frr defaults datacenter\n${frrText(renderFrr(peerOnly()))}`);
    frr.state = 'Established';
    await withSpeaker(frr, async (speaker) => {
      await until(() => speaker.status().peers[0]?.state === 'Established');
      await new Promise((r) => setTimeout(r, 100));
      expect(frr.applies).toEqual([]);
      expect(frr.cleared).toEqual([]);
    });
  });

  it('a FRR whose version cannot be read is treated as such a FRR: BFD waits for the session', async () => {
    const frr = fakeFrr(undefined);
    await withSpeaker(frr, async (speaker) => {
      await until(() => frr.applies.length === 1);
      expect(frr.applies[0]).toMatch(/neighbor 10\.0\.30\.1 remote-as 64513/);
      expect(frr.applies[0]).not.toMatch(/bfd/);
    });
  });

  it('another FRR gets BFD at once and no peer restart', async () => {
    const frr = fakeFrr('8.4.4');
    await withSpeaker(frr, async (speaker) => {
      await until(() => frr.applies.length === 1);
      expect(frr.applies[0]).toMatch(/neighbor 10\.0\.30\.1 bfd\n/);
      await until(() => speaker.status().peers[0]?.bfd === 'unknown');
      frr.state = 'Established';
      await new Promise((r) => setTimeout(r, 100));
      frr.state = 'Idle';
      await new Promise((r) => setTimeout(r, 100));
      expect(frr.applies).toHaveLength(1);
      expect(frr.cleared).toEqual([]);
    });
  });

});

describe('the BGP speaker', () => {
  it('a FRR that lost the peers (bgpd restarted by watchfrr, empty) gets the configuration again', async () => {
    const frr = fakeFrr('8.4.4');
    const metrics = new AgentMetrics();
    await withSpeaker(frr, async (speaker) => {
      await until(() => frr.applies.length === 1);
      frr.state = 'Established';
      await new Promise((r) => setTimeout(r, 100));
      expect(frr.applies).toHaveLength(1);
      frr.empty = true;
      await until(() => frr.applies.length === 2);
      expect(frr.applies[1]).toEqual(frr.applies[0]); // read back empty: everything again
      expect((await metrics.registry.getSingleMetricAsString('ferry_bgp_frr_config_lost_total')).trim().split('\n').at(-1)).toBe('ferry_bgp_frr_config_lost_total 1');
      await new Promise((r) => setTimeout(r, 100));
      expect(frr.applies).toHaveLength(2);
    }, metrics);
  });
});
