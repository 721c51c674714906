// The reliability suite, short (make reliability runs it long, with figures): agent
// restarts, an API outage, full maps and a soak in one cluster; a rolling upgrade from the
// previous release in another. Under steady TCP and UDP load through the NodePort, the
// LoadBalancer IP and the ClusterIP, no request may fail.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { failuresInSteps, reliabilityCluster, type LoadReport, type ReliabilityCluster } from '../../src/sandbox/reliability/cluster.js';
import { exhaustionScenario } from '../../src/sandbox/reliability/exhaustion.js';
import { outageScenario } from '../../src/sandbox/reliability/outage.js';
import { restartsScenario } from '../../src/sandbox/reliability/restarts.js';
import { soakScenario } from '../../src/sandbox/reliability/soak.js';
import { failuresInSwitches, heldBreaks, upgradeFailures, upgradeScenario } from '../../src/sandbox/reliability/upgrade.js';
import { unpackRelease } from '../../src/sandbox/previous-release.js';
import { describeWith } from '../harness/requirements.js';

/** Every stream carried requests, and none failed (the failures named if any). */
function expectNoFailures(load: LoadReport, described: string[] = load.failures.map((f) => `${f.target} ${f.error}`)): void {
  // With a failure, the kernel counters that moved say who refused, reset or dropped it,
  // and the nodes' maps what the datapath held for it.
  const told = described.length ? [...load.netCounters.map((m) => `counters: ${m}`), ...load.diagnosis.filter((d) => !described.includes(d))] : [];
  expect([...described.slice(0, 20), ...told], `${load.failed} of ${load.requests} requests failed`).toEqual([]);
  expect(load.failed).toBe(0);
  expect(Object.keys(load.byTarget)).toHaveLength(6);
  for (const [target, v] of Object.entries(load.byTarget)) expect(v.ok, target).toBeGreaterThan(20);
}

describeWith(['root', 'bpffs', 'cgroup2', 'netns'], 'reliability (short)', () => {
  let c: ReliabilityCluster;
  beforeAll(async () => {
    c = await reliabilityCluster('rtrel');
  }, 120_000);
  afterAll(async () => {
    await c?.down();
  });

  it('agent restarts (SIGTERM, SIGKILL, killed mid-start) under load: no request fails', async () => {
    const r = await restartsScenario(c, { restarts: 4, crashes: 2 });
    expect(r.rows.map((x) => [x.how, x.readyMs.length])).toEqual([['SIGTERM', 2], ['SIGKILL', 2], ['SIGKILL mid-start, then a start', 2]]);
    expectNoFailures(r.load, failuresInSteps(r.load, r.steps));
  }, 180_000);

  it('the API server away: the datapath holds, the agent lives, and the change made meanwhile lands when it is back', async () => {
    const r = await outageScenario(c, { seconds: 15 });
    expect(r).toMatchObject({ tableChanged: 0, livezFailed: 0, agentRestarted: false });
    expect(r.checks).toBeGreaterThanOrEqual(3);
    expect(r.convergedMs).toBeGreaterThanOrEqual(0);
    expectNoFailures(r.load, failuresInSteps(r.load, c.sb.routeChanges()));
  }, 180_000);

  it('full maps: an explicit error and a metric, the rest keeps working, and recovery when room is made', async () => {
    const r = await exhaustionScenario(c);
    expect(r.services.refused).toBeGreaterThan(0);
    expect(r.services.mapFullErrors).toBeGreaterThan(0);
    expectNoFailures(r.services.load, failuresInSteps(r.services.load, r.steps));
    expect(r.nat.probesRefused).toBeGreaterThan(0);
    expect(r.nat.natDrops).toBeGreaterThan(0);
    // Every one: before the SNAT-port fix of issue 19, 64 of 100 survived; before the fixed
    // probe sequence (2026-12-02), one in some full `make test` runs broke; since, 100 of 100
    // in each of 24 runs with both cores kept busy (README, What is not done yet).
    expect(r.conntrack.survived, JSON.stringify(r.conntrack)).toBe(r.conntrack.held);
    // ... and they did lose their state: the overfull map evicted flows that were in use
    // (while they were quiet: exhaustion.ts).
    process.stdout.write(`conntrack overfull: ${r.conntrack.survived} of ${r.conntrack.held} held connections survived, ${r.conntrack.midstream} segments of evicted flows balanced again\n`);
    expect(r.conntrack.midstream, JSON.stringify(r.conntrack)).toBeGreaterThan(0);
    expectNoFailures(r.conntrack.load, failuresInSteps(r.conntrack.load, r.steps));
  }, 300_000);

  it('a soak with Service and endpoint churn: no request fails', async () => {
    const r = await soakScenario(c, { seconds: 30, sampleEveryS: 10 });
    expect(r.changes).toBeGreaterThanOrEqual(25);
    expect(r.samples.length).toBeGreaterThanOrEqual(3);
    expectNoFailures(r.load, failuresInSteps(r.load, c.sb.routeChanges()));
  }, 180_000);
});

describeWith(['root', 'bpffs', 'cgroup2', 'netns'], 'reliability (short): a rolling upgrade from the previous release', () => {
  const release = unpackRelease();
  let c: ReliabilityCluster;
  beforeAll(async () => {
    c = await reliabilityCluster('rtupg', { agentBin: release.bin });
  }, 120_000);
  afterAll(async () => {
    await c?.down();
    release.remove();
  });

  it('upgrades node by node from map layout 1 under load: conntrack migrated, long-lived connections unharmed, no request lost', async () => {
    const r = await upgradeScenario(c, { fromCommit: release.commit, held: 16 });
    console.log(`rolling upgrade: ${r.steps.filter((s) => s.step.includes('switch')).map((s) => s.step).join('; ')}; packets dropped in the switch (handover_unbound): ${r.nodes.map((n) => `${n.node} ${n.handoverDrops}`).join(', ')}`);
    for (const n of r.nodes) expect(n.migrated, n.node).toContainEqual(expect.objectContaining({ map: 'ct4', fromLayout: 1, dropped: 0 }));
    // The previous release's programs waited behind the new ones in each switch.
    expect(r.nodes.map((n) => [n.node, n.chained])).toEqual([['node-1', true], ['node-2', true]]);
    // A break is named among the steps, with the load's own failures and the maps' diagnosis.
    expect(r.held, [...heldBreaks(r), ...upgradeFailures(r)].join('\n')).toMatchObject({ count: 16, survived: 16 });
    expect(r.switches.map((s) => s.node)).toEqual(['node-1', 'node-2']);
    // With the previous programs chained behind (required above), a switch loses nothing:
    // none lost in 36 busy runs (bench/results/reliability/upgrade-repeat.md and
    // upgrade-repeat-hop-epoch.md) nor in any make test or CI run since the chain. A failure
    // is placed among the steps (in a switch or not), with the maps' diagnosis.
    const { inSwitch } = failuresInSwitches(r);
    if (inSwitch.length) console.log(`rolling upgrade: ${inSwitch.length} request(s) lost in a switch:\n${upgradeFailures(r).join('\n')}`);
    expectNoFailures(r.load, r.load.failed ? upgradeFailures(r) : []);
  }, 180_000);
});
