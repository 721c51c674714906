// The agent hears the kernel's route, link and neighbour changes (`ip monitor` in its
// namespace) and tells the datapath only of those that can make a kept next hop wrong.
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { expect, it } from 'vitest';
import { RouteMonitor } from '../../src/sys/route-monitor.js';
import { describeWith } from '../harness/requirements.js';
import { eventually } from '../harness/wait.js';
import { twoHostsPerTest } from '../harness/two-hosts.js';

const hosts = twoHostsPerTest();

/** Wait (up to 5 s) until `cond` holds, and require it. */
async function until(cond: () => boolean): Promise<void> {
  expect(await eventually(async () => cond(), (ok) => ok, 5000, 20)).toBe(true);
}

describeWith(['root', 'netns'], 'route changes reach the datapath', () => {
  it('a start, a new or moved neighbour MAC, a route and a link change count; a neighbour state change does not', async () => {
    const causes: string[] = [];
    const ip = (...args: string[]) => hosts.server.execOk(['ip', ...args]);
    await ip('neigh', 'replace', '10.0.10.7', 'lladdr', '02:00:00:00:00:07', 'dev', 'eth0', 'nud', 'reachable');
    const monitor = new RouteMonitor({ netns: hosts.server.netns, log: pino({ level: 'silent' }), onChange: (c) => causes.push(c) });
    try {
      await monitor.start();
      await until(() => causes.length === 1);
      expect(causes).toEqual(['route monitor started']);
      const counts = async (what: () => Promise<unknown>, expected: boolean) => {
        const before = causes.length;
        await what();
        if (expected) await until(() => causes.length > before);
        else await sleep(300);
        expect(causes.length > before, String(what)).toBe(expected);
        await sleep(50); // a change's further messages (a link's routes) arrive before the next step
        causes.length = 0;
      };
      // Known at the start with this MAC: its states change nothing.
      await counts(() => ip('neigh', 'replace', '10.0.10.7', 'lladdr', '02:00:00:00:00:07', 'dev', 'eth0', 'nud', 'stale'), false);
      await counts(() => ip('neigh', 'replace', '10.0.10.7', 'lladdr', '02:00:00:00:00:08', 'dev', 'eth0', 'nud', 'reachable'), true);
      await counts(() => ip('neigh', 'replace', '10.0.10.9', 'lladdr', '02:00:00:00:00:09', 'dev', 'eth0'), true);
      await counts(() => ip('route', 'add', '10.77.0.0/16', 'via', '10.0.10.2'), true);
      await counts(() => ip('route', 'del', '10.77.0.0/16'), true);
      await counts(() => ip('link', 'set', 'eth0', 'mtu', '1400'), true);
    } finally {
      monitor.stop();
    }
  });

  it('ip monitor ending is noticed: it runs again, and its start counts', async () => {
    const causes: string[] = [];
    const monitor = new RouteMonitor({ netns: hosts.server.netns, restartMs: 50, log: pino({ level: 'silent' }), onChange: (c) => causes.push(c) });
    try {
      await monitor.start();
      await until(() => causes.length === 1);
      const pid = (monitor as unknown as { child: { pid: number } }).child.pid;
      process.kill(pid);
      await until(() => causes.length === 2);
      expect(causes).toEqual(['route monitor started', 'route monitor started']);
      expect((monitor as unknown as { child: { pid: number } }).child.pid).not.toBe(pid);
    } finally {
      monitor.stop();
    }
  });
});
