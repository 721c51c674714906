// cgroup socket hooks: attached to the intended cgroup v2 directory only, counting real
// connect() calls of processes in that cgroup, and detached cleanly.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { u64Codec, u32Codec } from '../../src/ebpf/codec.js';
import { ErrorCode } from '../../src/errors.js';
import { attachCgroup, checkCgroup } from '../../src/ebpf/link-cgroup.js';
import { BpfObject } from '../../src/ebpf/object.js';
import { CGROUP2_MOUNT, Testbed, type Host } from '../../src/sandbox/netns/testbed.js';
import { bpfObject } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';

let tb: Testbed;
let client: Host;
let other: Host;

beforeAll(async () => {
  tb = await Testbed.create();
  client = await tb.addHost('client');
  other = await tb.addHost('other');
  await tb.link({ host: client, ifname: 'eth0', address: '10.0.10.2/24' }, { host: other, ifname: 'eth0', address: '10.0.10.1/24' });
});
afterAll(async () => {
  await tb.destroy();
});

const connectFrom = (h: Host) => h.exec(['bash', '-c', 'exec 3<>/dev/tcp/10.0.10.1/9'], { timeoutMs: 5000 });

describeWith(['root', 'netns', 'cgroup2'], 'cgroup socket hooks', () => {
  it('counts connect() calls of processes in the cgroup, and stops when detached', async () => {
    const obj = BpfObject.open(bpfObject('tests/cgroup_probe'));
    try {
      obj.load();
      const calls = obj.map('connect_calls', u32Codec, u64Codec);
      const link = attachCgroup(obj.program('count_connect4'), { path: client.cgroup, expect: 'subtree' });
      expect(link.where).toBe(`cgroup connect4 ${client.cgroup}`);
      await connectFrom(client);
      await connectFrom(client);
      await connectFrom(other); // another host's cgroup: not counted
      expect(calls.lookup(0)).toBe(2n);
      link.close();
      await connectFrom(client);
      expect(calls.lookup(0)).toBe(2n);
    } finally {
      obj.close();
    }
  });

  it('refuses a nested cgroup where the hierarchy root is required', () => {
    let code: string | undefined;
    try {
      checkCgroup({ path: client.cgroup, expect: 'hierarchy-root' });
    } catch (e) {
      code = (e as { code?: string }).code;
      expect((e as Error).message).toMatch(/this is a nested cgroup, not the root of the cgroup v2 hierarchy \(run the agent in the host cgroup namespace/);
    }
    expect(code).toBe(ErrorCode.CgroupNotRoot);
  });

  it('recognises the real hierarchy root', () => {
    expect(checkCgroup({ path: CGROUP2_MOUNT, expect: 'hierarchy-root' })).toMatchObject({ isHierarchyRoot: true, inode: 1 });
  });

  it('refuses a directory that is not cgroup v2', () => {
    expect(() => checkCgroup({ path: '/tmp', expect: 'subtree' })).toThrow(/check cgroup \/tmp: not a cgroup v2 filesystem/);
    expect(() => checkCgroup({ path: '/nonexistent', expect: 'subtree' })).toThrow(/no such directory/);
  });
});
