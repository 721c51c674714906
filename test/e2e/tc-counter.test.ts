// The foundation end to end: a real program, a .rodata constant set from TypeScript,
// attached inside a namespace, counting real pings, read through a typed map, detached
// with nothing left behind.
import { expect, it } from 'vitest';
import { u32Codec } from '../../src/ebpf/codec.js';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Datapath, defaultObjectsDir } from '../../src/datapath/loader.js';
import { DEFAULT_TC_HANDLE, DEFAULT_TC_PRIORITY, attachTc } from '../../src/ebpf/link-tc.js';
import { attachXdp } from '../../src/ebpf/link-xdp.js';
import { BpfObject } from '../../src/ebpf/object.js';
import type { Host } from '../../src/sandbox/netns/testbed.js';
import { inNetns } from '../../src/sys/netns.js';
import { counterCodec } from '../bpf/codecs.js';
import { bpfObject } from '../harness/paths.js';
import { describeWith } from '../harness/requirements.js';
import { twoHostsPerTest } from '../harness/two-hosts.js';

const hosts = twoHostsPerTest();

function loadCounter(protocol: number): BpfObject {
  const obj = BpfObject.open(bpfObject('tests/pkt_counter'));
  obj.setConstant('match_protocol', protocol);
  obj.load();
  return obj;
}

function packets(obj: BpfObject): bigint {
  const perCpu = obj.map('pkt_counter', u32Codec, counterCodec).lookupPerCpu(0)!;
  return perCpu.reduce((a, v) => a + v.packets, 0n);
}

const tcState = async (h: Host) => ({
  qdisc: await h.execOk(['tc', 'qdisc', 'show', 'dev', 'eth0']),
  filters: await h.execOk(['tc', 'filter', 'show', 'dev', 'eth0', 'ingress']),
});

describeWith(['root', 'netns', 'cgroup2'], 'tc program in a network namespace', () => {
  it('counts real pings on tc ingress, then detaches leaving nothing behind', async () => {
    const obj = loadCounter(1); // ICMP
    try {
      const link = inNetns(hosts.server.netns, () => attachTc(obj.program('count_packets'), { ifname: 'eth0', direction: 'ingress' }));
      expect(link.where).toMatch(/^tc ingress eth0 \(ifindex \d+\)$/);
      const during = await tcState(hosts.server);
      expect(during.qdisc).toContain('clsact');
      expect(during.filters).toContain('count_packets');

      await hosts.client.execOk(['ping', '-c', '5', '-i', '0.2', '-W', '2', '10.0.10.1']);
      // TCP traffic is not ICMP: the constant set from TypeScript keeps it out of the count.
      await hosts.client.exec(['bash', '-c', 'exec 3<>/dev/tcp/10.0.10.1/9'], { timeoutMs: 5000 });
      expect(packets(obj)).toBe(5n);

      link.close();
      const after = await tcState(hosts.server);
      expect(after.qdisc).not.toContain('clsact'); // we created it, so we removed it
      expect(after.filters.trim()).toBe('');
      await hosts.client.execOk(['ping', '-c', '2', '-i', '0.2', '-W', '2', '10.0.10.1']);
      expect(packets(obj)).toBe(5n);
    } finally {
      obj.close();
    }
  });

  it('leaves a clsact qdisc it did not create, removing only its own filter', async () => {
    await hosts.server.execOk(['tc', 'qdisc', 'add', 'dev', 'eth0', 'clsact']);
    const obj = loadCounter(0);
    try {
      const link = inNetns(hosts.server.netns, () => attachTc(obj.program('count_packets'), { ifname: 'eth0', direction: 'ingress' }));
      link.close();
      const after = await tcState(hosts.server);
      expect(after.qdisc).toContain('clsact');
      expect(after.filters.trim()).toBe('');
    } finally {
      obj.close();
    }
  });

  it('counts pings with XDP and detaches', async () => {
    const obj = loadCounter(1);
    try {
      const link = inNetns(hosts.server.netns, () => attachXdp(obj.program('count_packets_xdp'), 'eth0'));
      expect(await hosts.server.ip('link', 'show', 'dev', 'eth0')).toMatch(/xdp/);
      await hosts.client.execOk(['ping', '-c', '3', '-i', '0.2', '-W', '2', '10.0.10.1']);
      expect(packets(obj)).toBe(3n);
      link.close();
      expect(await hosts.server.ip('link', 'show', 'dev', 'eth0')).not.toMatch(/xdp/);
    } finally {
      obj.close();
    }
  });

  it('ferry\'s filters hand traffic that is not theirs to the next filter on the device', async () => {
    const pinDir = join('/sys/fs/bpf', `${hosts.tb.prefix}-chain`);
    mkdirSync(pinDir);
    const dp = Datapath.load({ objectsDir: defaultObjectsDir(), pinDir, snatIPv4: '10.0.10.1' });
    const obj = loadCounter(1); // ICMP
    try {
      inNetns(hosts.server.netns, () => dp.attachDevice('eth0'));
      // Another tc user's filter, after ferry's (a higher priority number runs later).
      const link = inNetns(hosts.server.netns, () => attachTc(obj.program('count_packets'), { ifname: 'eth0', direction: 'ingress', priority: DEFAULT_TC_PRIORITY + 1, handle: DEFAULT_TC_HANDLE + 1 }));
      await hosts.client.execOk(['ping', '-c', '4', '-i', '0.2', '-W', '2', '10.0.10.1']);
      expect(packets(obj)).toBe(4n);
      link.close();
    } finally {
      obj.close();
      dp.close();
      rmSync(pinDir, { recursive: true, force: true });
    }
  });

  it('names the interface it cannot find', () => {
    const obj = loadCounter(0);
    try {
      expect(() => inNetns(hosts.server.netns, () => attachTc(obj.program('count_packets'), { ifname: 'nope0', direction: 'egress' }))).toThrow(
        'find interface nope0: no such device in this network namespace (check the device name (ip link))',
      );
    } finally {
      obj.close();
    }
  });
});
