// Which lines of `ip monitor label route neigh link rule` can make a kept next hop wrong,
// how often the changes are reported, and when routes depend on a flow's ports.
import { describe, expect, it } from 'vitest';
import { ChangeThrottle } from '../../src/agent/route-changes.js';
import type { Clock } from '../../src/clock.js';
import { NeighbourMacs, staleningLine } from '../../src/sys/route-monitor.js';
import { judgeRoutingPolicy } from '../../src/sys/routing-policy.js';
import { ManualClock } from '../harness/manual-clock.js';

it('any route, rule or link change counts; a continuation line does not', () => {
  const n = new NeighbourMacs();
  expect(staleningLine('[ROUTE]10.8.0.0/16 via 10.9.0.2 dev eth0 ', n)).toBe(true);
  expect(staleningLine('[ROUTE]Deleted 10.8.0.0/16 via 10.9.0.2 dev eth0 ', n)).toBe(true);
  expect(staleningLine('[RULE]32764:\tfrom all ipproto udp dport 53 lookup 100', n)).toBe(true);
  expect(staleningLine('[LINK]3: eth0@if2: <BROADCAST,MULTICAST> mtu 1500 qdisc noqueue state DOWN group default ', n)).toBe(true);
  expect(staleningLine('    link/ether fe:12:20:a7:f3:3c brd ff:ff:ff:ff:ff:ff', n)).toBe(false);
});

it('a neighbour counts when its MAC is new or changes, or it fails after having one; not for its states or a deletion', () => {
  const n = new NeighbourMacs();
  n.seed('10.9.0.2 dev eth0 lladdr 02:00:00:00:00:02 REACHABLE ');
  const line = (s: string) => staleningLine(`[NEIGH]${s}`, n);
  expect(line('10.9.0.2 dev eth0 lladdr 02:00:00:00:00:02 STALE ')).toBe(false);
  expect(line('10.9.0.2 dev eth0 lladdr 02:00:00:00:00:02 DELAY ')).toBe(false);
  expect(line('10.9.0.2 dev eth0 lladdr 02:00:00:00:00:03 REACHABLE ')).toBe(true); // moved
  expect(line('10.9.0.2 dev eth1 lladdr 02:00:00:00:00:03 REACHABLE ')).toBe(true); // another device's neighbour
  expect(line('Deleted 10.9.0.2 dev eth0 lladdr 02:00:00:00:00:03 STALE ')).toBe(false);
  expect(line('10.9.0.2 dev eth0 lladdr 02:00:00:00:00:03 REACHABLE ')).toBe(false); // back with the MAC it had
  expect(line('10.9.0.2 dev eth0 FAILED ')).toBe(true);
  expect(line('10.9.0.2 dev eth0 INCOMPLETE ')).toBe(false); // no MAC then, none now
  expect(line('10.9.0.2 dev eth0 lladdr 02:00:00:00:00:03 REACHABLE ')).toBe(true); // resolved again
  expect(line('10.9.0.7 dev eth0 INCOMPLETE ')).toBe(false); // never had one
  expect(line('10.9.0.7 dev eth0 lladdr 02:00:00:00:00:07 REACHABLE ')).toBe(true);
  expect(line('garbled')).toBe(true); // not understood: may
});

it('remembers at most its limit of neighbours, then starts over', () => {
  const n = new NeighbourMacs(2);
  n.seed('10.9.0.1 dev eth0 lladdr 02:00:00:00:00:01 REACHABLE');
  n.seed('10.9.0.2 dev eth0 lladdr 02:00:00:00:00:02 REACHABLE');
  expect(n.size).toBe(2);
  expect(n.observe('10.9.0.3 dev eth0 lladdr 02:00:00:00:00:03 REACHABLE')).toBe(true);
  expect(n.size).toBe(1);
  expect(n.observe('10.9.0.1 dev eth0 lladdr 02:00:00:00:00:01 STALE')).toBe(true); // forgotten: new again
});

it('changes are reported at most once per gap: the first at once, a burst once more when the gap has passed', async () => {
  const clock = new ManualClock();
  const reports: number[] = [];
  const t0 = clock.now();
  const throttle = new ChangeThrottle(50, () => reports.push(clock.now() - t0), clock);
  throttle.note('a');
  throttle.note('b'); // the same turn: one report
  await clock.advance(0);
  expect(reports).toEqual([0]);
  for (const at of [10, 20, 30]) {
    await clock.advance(10);
    throttle.note(`at ${at}`);
  }
  await clock.advance(19);
  expect(reports).toEqual([0]); // not before the gap
  await clock.advance(1);
  expect(reports).toEqual([0, 50]); // the burst, once
  await clock.advance(500);
  throttle.note('later');
  await clock.advance(0);
  expect(reports).toEqual([0, 50, 550]);
  throttle.note('cancelled');
  throttle.cancel();
  await clock.advance(1000);
  expect(reports).toEqual([0, 50, 550]);
});

it('a wall clock set back holds no report back longer than the gap', async () => {
  const clock = new ManualClock();
  let skew = 0;
  const skewed: Clock = {
    now: () => clock.now() + skew,
    setTimeout: (fn, ms) => clock.setTimeout(fn, ms),
    clearTimeout: (t) => clock.clearTimeout(t),
    setInterval: (fn, ms) => clock.setInterval(fn, ms),
    clearInterval: (t) => clock.clearInterval(t),
  };
  let reports = 0;
  const throttle = new ChangeThrottle(50, () => reports++, skewed);
  throttle.note('first');
  await clock.advance(0);
  skew = -3_600_000;
  throttle.note('after the clock went back an hour');
  await clock.advance(50);
  expect(reports).toBe(2);
});

describe('whether routes depend on a flow\'s ports', () => {
  const RULES = '0:\tfrom all lookup local\n32766:\tfrom all lookup main\n32767:\tfrom all lookup default\n';
  it('not with the default rules and multipath hashed by addresses', () => {
    expect(judgeRoutingPolicy(RULES, 0)).toMatchObject({ perFlow: false });
    expect(judgeRoutingPolicy(`100:\tfrom 10.0.0.0/8 lookup 100\n100:\tfrom all fwmark 0x7 lookup 7\n${RULES}`, 0)).toMatchObject({ perFlow: false });
    expect(judgeRoutingPolicy(RULES, 2)).toMatchObject({ perFlow: false });
    expect(judgeRoutingPolicy(RULES, 3, 0x0007)).toMatchObject({ perFlow: false });
  });
  it('with a rule by protocol or port, or multipath hashed by ports', () => {
    for (const rule of ['from all ipproto udp lookup 5', 'from all dport 53 lookup 5', 'from all sport 1000-2000 lookup 5', 'from all tos 0x10 lookup 5']) {
      expect(judgeRoutingPolicy(`100:\t${rule}\n${RULES}`, 0)).toEqual({ perFlow: true, why: `policy rule selects by protocol, port or TOS: 100: ${rule}` });
    }
    expect(judgeRoutingPolicy(RULES, 1)).toMatchObject({ perFlow: true, why: expect.stringMatching(/hash_policy 1/) });
    expect(judgeRoutingPolicy(RULES, 3, 0x0037)).toMatchObject({ perFlow: true, why: expect.stringMatching(/fields 0x37/) });
    expect(judgeRoutingPolicy(RULES, 3, 0x0020)).toMatchObject({ perFlow: true });
  });
});
