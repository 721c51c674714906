// ferry uninstall: a datapath left as a stopped agent leaves it (tc filters on the device,
// socket hooks pinned at the cgroup, maps pinned) is taken off whole: without --yes it only
// says what it would do; with it, no filter, no hook and no pin is left.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { attachedPrograms } from '../../src/datapath/attachments.js';
import { Testbed } from '../../src/sandbox/netns/testbed.js';
import type { Host } from '../../src/sandbox/netns/testbed.js';
import { REPO_ROOT } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { eventually } from '../harness/wait.js';
import { TC_KIND } from '../harness/tc-programs.js';

const FERRY = join(REPO_ROOT, 'bin', 'ferry.js');
let tb: Testbed;
let host: Host;
let pinDir: string;

/** Programs attached at a cgroup (bpftool). */
const cgroupHooks = (path: string) => (JSON.parse(execFileSync('bpftool', ['-j', 'cgroup', 'show', path], { encoding: 'utf8' }).trim() || '[]') as Array<{ name?: string }>).map((p) => p.name ?? '');

beforeAll(async () => {
  tb = await Testbed.create();
  host = await tb.addHost('node');
  const peer = await tb.addHost('peer');
  await tb.link({ host, ifname: 'eth0', address: '10.0.30.21/24' }, { host: peer, ifname: 'eth0', address: '10.0.30.1/24' });
  pinDir = join('/sys/fs/bpf', `${tb.prefix}-node`);
  mkdirSync(pinDir);
  tb.ownPath(pinDir); // removed with the testbed if a test fails before uninstall does
  // As an agent leaves it on exit: filters attached, links pinned, maps pinned, and the
  // process gone (a link's file descriptor in a live process would keep its hook).
  const script = `
    const { Datapath, defaultObjectsDir } = await import(${JSON.stringify(join(REPO_ROOT, 'dist', 'datapath', 'loader.js'))});
    const { inNetns } = await import(${JSON.stringify(join(REPO_ROOT, 'dist', 'sys', 'netns.js'))});
    const dp = Datapath.load({ objectsDir: defaultObjectsDir(), pinDir: ${JSON.stringify(pinDir)}, snatIPv4: '10.0.30.21' });
    inNetns(${JSON.stringify(host.netns)}, () => dp.attachDevice('eth0'));
    dp.attachCgroup({ path: ${JSON.stringify(host.cgroup)}, expect: 'subtree' }, { pinLinks: true });
    dp.release();`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
  expect(r.status, r.stderr).toBe(0);
}, 60_000);
afterAll(async () => {
  await tb?.destroy();
});

describeWith(['root', 'netns', 'cgroup2', 'bpffs'], 'ferry uninstall', () => {
  it('without --yes says what it would take off and takes off nothing', () => {
    const r = spawnSync(process.execPath, [FERRY, 'uninstall', '--pin-dir', pinDir, '--netns', host.netns], { encoding: 'utf8' });
    expect(r.status).toBe(1);
    expect(r.stdout).toMatch(new RegExp(`would detach: ${TC_KIND} (ingress|egress) eth0, ${TC_KIND} (ingress|egress) eth0`));
    expect(r.stderr).toMatch(/stop the agent first/);
    expect(attachedPrograms(host.netns).filter((a) => a.where.startsWith(`${TC_KIND} `))).toHaveLength(2);
    expect(cgroupHooks(host.cgroup).some((n) => n.startsWith('sock4_'))).toBe(true);
  });

  it('with --yes: no tc filter, no socket hook and no pin is left', async () => {
    const r = spawnSync(process.execPath, [FERRY, 'uninstall', '--pin-dir', pinDir, '--netns', host.netns, '--yes'], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`detached: ${TC_KIND} (ingress|egress) eth0, ${TC_KIND} (ingress|egress) eth0`));
    expect(r.stdout).toMatch(/unpinned: [1-9]\d* socket-hook links/);
    expect(attachedPrograms(host.netns).filter((a) => a.where.startsWith('tc'))).toEqual([]);
    // The kernel frees an unpinned link (and detaches its hook) a moment later.
    expect(await eventually(async () => cgroupHooks(host.cgroup), (h) => h.length === 0, 5000)).toEqual([]);
    expect(existsSync(pinDir)).toBe(false);
    // A second run finds nothing to do and says so.
    const again = spawnSync(process.execPath, [FERRY, 'uninstall', '--pin-dir', pinDir, '--netns', host.netns, '--yes'], { encoding: 'utf8' });
    expect(again.status, again.stderr).toBe(0);
    expect(again.stdout).toMatch(/detached: \(no XDP programs or tc filters\)/);
  });
});
