// The agent hears the kernel's route, link and neighbour changes (`ip monitor` in its
// namespace) and tells the datapath only of those that can make a kept next hop wrong.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { expect, it } from 'vitest';
import { MONITOR_STARTED, RULE_CHANGED, RouteMonitor } from '../../src/sys/route-monitor.js';
import { watchRouteChanges } from '../../src/agent/route-changes.js';
import { HopEpoch } from '../../src/datapath/hop-epoch.js';
import { hopEpochCodec } from '../../src/datapath/layouts.js';
import { u32Codec } from '../../src/ebpf/codec.js';
import { createMap, MapType } from '../../src/ebpf/map.js';
import { describeWith } from '../harness/requirements.js';
import { eventually } from '../harness/wait.js';
import { twoHostsPerTest } from '../harness/two-hosts.js';
import { REPO_ROOT } from '../harness/paths.js';

const hosts = twoHostsPerTest();

/** Wait (up to 5 s) until `cond` holds, and require it. */
async function until(cond: () => boolean): Promise<void> {
  expect(await eventually(async () => cond(), (ok) => ok, 5000, 20)).toBe(true);
}

describeWith(['root', 'netns'], 'route changes reach the datapath', () => {
  it('a start, a new or moved neighbour MAC, a route, a policy rule and a link change count; a neighbour state change does not', async () => {
    const causes: string[] = [];
    const ip = (...args: string[]) => hosts.server.execOk(['ip', ...args]);
    await ip('neigh', 'replace', '10.0.10.7', 'lladdr', '02:00:00:00:00:07', 'dev', 'eth0', 'nud', 'reachable');
    const monitor = new RouteMonitor({ netns: hosts.server.netns, log: pino({ level: 'silent' }), onChange: (c) => causes.push(c) });
    try {
      await monitor.start();
      await until(() => causes.length === 1);
      expect(causes[0]).toBe('route monitor started');
      // Each step looks for the change it makes among the causes: a new namespace's link
      // keeps sending messages of its own for a while (IPv6 address configuration), which
      // count but are not the step's.
      const step = async (what: () => Promise<unknown>, made: ((cause: string) => boolean) | undefined) => {
        causes.length = 0;
        await what();
        if (made) await until(() => causes.some(made));
        else await sleep(300);
        // A neighbour line the step did not mean to count is a neighbour line it made.
        expect(causes.some(made ?? ((c) => c.includes('[NEIGH]'))), `${String(what)}: ${causes.join(' | ')}`).toBe(made !== undefined);
        await sleep(50); // a change's further messages (a link's routes) arrive before the next step
      };
      const kernel = (label: string, text: string) => (c: string) => c.startsWith(`kernel reported: [${label}]`) && c.includes(text);
      // Known at the start with this MAC: its states change nothing.
      await step(() => ip('neigh', 'replace', '10.0.10.7', 'lladdr', '02:00:00:00:00:07', 'dev', 'eth0', 'nud', 'stale'), undefined);
      await step(() => ip('neigh', 'replace', '10.0.10.7', 'lladdr', '02:00:00:00:00:08', 'dev', 'eth0', 'nud', 'reachable'), kernel('NEIGH', '02:00:00:00:00:08'));
      await step(() => ip('neigh', 'replace', '10.0.10.9', 'lladdr', '02:00:00:00:00:09', 'dev', 'eth0'), kernel('NEIGH', '10.0.10.9'));
      await step(() => ip('route', 'add', '10.77.0.0/16', 'via', '10.0.10.2'), kernel('ROUTE', '10.77.0.0/16'));
      await step(() => ip('route', 'del', '10.77.0.0/16'), kernel('ROUTE', 'Deleted 10.77.0.0/16'));
      // IPv6's too: forwarded IPv6 packets keep hops (bpf/lib/fib6.h).
      await step(() => ip('-6', 'route', 'add', 'fd00:77::/64', 'dev', 'eth0'), kernel('ROUTE', 'fd00:77::/64'));
      await step(() => ip('-6', 'neigh', 'replace', 'fd00:10::9', 'lladdr', '02:00:00:00:00:19', 'dev', 'eth0'), kernel('NEIGH', 'fd00:10::9'));
      await step(() => ip('rule', 'add', 'ipproto', 'udp', 'dport', '53', 'table', '100'), (c) => c === RULE_CHANGED);
      await step(() => ip('link', 'set', 'eth0', 'mtu', '1400'), kernel('LINK', 'mtu 1400'));
    } finally {
      monitor.stop();
    }
  });

  it('ip monitor ending is noticed: it runs again, its start counts, and its status says so', async () => {
    const causes: string[] = [];
    const watching: boolean[] = [];
    const monitor = new RouteMonitor({ netns: hosts.server.netns, restartMs: 50, log: pino({ level: 'silent' }), onChange: (c) => causes.push(c), onWatching: (w) => watching.push(w) });
    try {
      // Only the starts count here: the fresh namespace's link keeps reporting changes of its
      // own for a while (IPv6 address configuration), which count too and may come between polls.
      const starts = () => causes.filter((c) => c === MONITOR_STARTED);
      await monitor.start();
      await until(() => starts().length >= 1);
      const first = monitor.status();
      expect(first).toMatchObject({ watching: true, starts: 1 });
      expect(first.lastEnd).toBeUndefined();
      process.kill(first.pid!);
      await until(() => starts().length >= 2);
      expect(starts()).toEqual([MONITOR_STARTED, MONITOR_STARTED]);
      const again = monitor.status();
      expect(again).toMatchObject({ watching: true, starts: 2, lastEnd: { how: 'killed by SIGTERM' } });
      expect(again.pid).not.toBe(first.pid);
      expect(watching).toEqual([true, false, true]);
    } finally {
      monitor.stop();
    }
    expect(monitor.status()).toMatchObject({ watching: false });
    expect(watching).toEqual([true, false, true, false]);
  });

  it('the agent tells the datapath when routes depend on ports: a policy rule by port, multipath hashed by ports', async () => {
    const map = createMap({ type: MapType.Array, name: 'hop_epoch', key: u32Codec, value: hopEpochCodec, maxEntries: 1 });
    const epoch = new HopEpoch(map);
    const ip = (...args: string[]) => hosts.server.execOk(['ip', ...args]);
    const watchWith = (policyRecheckMs: number) => watchRouteChanges(new HopEpoch(map), pino({ level: 'silent' }), { netns: hosts.server.netns, minGapMs: 10, policyRecheckMs });
    const perFlow = async (watch: ReturnType<typeof watchWith>, expected: boolean) => {
      await until(() => watch.status().routing?.perFlow === expected && epoch.perFlow === expected);
      return watch.status().routing!.why;
    };
    // Rules: read again when one changes (no periodic read within the test).
    let watch = watchWith(600_000);
    try {
      expect(await perFlow(watch, false)).toMatch(/addresses only/);
      await ip('rule', 'add', 'pref', '100', 'ipproto', 'udp', 'dport', '53', 'lookup', '100');
      expect(await perFlow(watch, true)).toBe('policy rule selects by protocol, port or TOS: 100: from all ipproto udp dport 53 lookup 100');
      const since = epoch.sinceNs;
      await ip('route', 'add', '10.77.0.0/16', 'via', '10.0.10.2');
      await until(() => epoch.sinceNs > since);
      expect(epoch.perFlow).toBe(true); // a route change keeps the flag
      await ip('rule', 'del', 'pref', '100');
      await perFlow(watch, false);
      // An IPv6 rule by port counts as well.
      await ip('-6', 'rule', 'add', 'pref', '100', 'ipproto', 'udp', 'dport', '53', 'lookup', '100');
      expect(await perFlow(watch, true)).toBe('IPv6: policy rule selects by protocol, port or TOS: 100: from all ipproto udp dport 53 lookup 100');
      await ip('-6', 'rule', 'del', 'pref', '100');
      await perFlow(watch, false);
      watch.stop();
      // The multipath sysctls change without a message: read again every policyRecheckMs.
      watch = watchWith(300);
      await perFlow(watch, false);
      await hosts.server.execOk(['sysctl', '-qw', 'net.ipv4.fib_multipath_hash_policy=1']);
      expect(await perFlow(watch, true)).toMatch(/hash_policy 1/);
    } finally {
      watch.stop();
      map.close();
    }
  });

  it('an agent killed outright takes its ip monitor along (parent-death signal)', async () => {
    // A namespace where nothing changes: ip monitor writes nothing there, so no SIGPIPE
    // would end it; only the parent-death signal does.
    const quiet = await hosts.tb.addHost('quiet');
    const script = `
      import { pino } from 'pino';
      import { RouteMonitor } from ${JSON.stringify(resolve(REPO_ROOT, 'dist/sys/route-monitor.js'))};
      const m = new RouteMonitor({ netns: ${JSON.stringify(quiet.netns)}, log: pino({ level: 'silent' }), onChange: () => {} });
      await m.start();
      process.stdout.write(m.status().pid + '\\n');
      setInterval(() => {}, 1000);
    `;
    const owner = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
    const pid = Number(await new Promise<string>((res) => owner.stdout.once('data', (d: Buffer) => res(d.toString().trim()))));
    // Running, not gone and not a zombie nobody has reaped yet.
    const alive = () => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
      } catch {
        return false;
      }
    };
    try {
      expect(pid).toBeGreaterThan(0);
      expect(alive()).toBe(true);
      process.kill(owner.pid!, 'SIGKILL');
      await until(() => !alive());
    } finally {
      if (owner.exitCode === null && owner.signalCode === null) owner.kill('SIGKILL');
      if (pid > 0 && alive()) process.kill(pid, 'SIGKILL'); // the monitor the owner left, if it did
    }
  });
});
