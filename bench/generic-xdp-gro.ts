// What a generic XDP program costs the device it runs on, doing nothing: the kernel turns
// GRO off on a device with a generic XDP program (netif_elide_gro), so TCP that arrives as
// MTU-sized frames, as from a wire, reaches the stack a frame at a time. Two namespaces of
// a testbed joined by a veth pair: the sender segments itself (TSO and GSO off: frames of
// the MTU, as a NIC receives them), the receiver's veth has GRO on, as a NIC's driver has
// it; iperf3 one stream, with and without a generic XDP program that passes every frame
// (bpf/tests/xdp_pass.bpf.c) on the receiving device, taking turns in each repeat. Why
// ferry's best-effort runs no generic XDP unless xdpDevices names a device.
// Run as root: npx tsx bench/generic-xdp-gro.ts [--seconds 4] [--repeat 3]
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { defaultObjectsDir } from '../src/datapath/loader.js';
import { BpfObject } from '../src/ebpf/object.js';
import { attachXdpDevice } from '../src/ebpf/link-xdp.js';
import { Testbed } from '../src/sandbox/netns/testbed.js';
import { inNetns } from '../src/sys/netns.js';
import { fmtStat, markdownTable, progress, publish, ratio, stat } from './report.js';

const { values } = parseArgs({ options: { seconds: { type: 'string' }, repeat: { type: 'string' } } });
const SECONDS = Number(values.seconds ?? 4);
const REPEAT = Number(values.repeat ?? 3);
const COMMAND = `npx tsx bench/generic-xdp-gro.ts --seconds ${SECONDS} --repeat ${REPEAT}`;

async function main(): Promise<void> {
  const tb = await Testbed.create();
  try {
    const [sender, receiver] = [await tb.addHost('sender'), await tb.addHost('receiver')];
    await tb.link({ host: sender, ifname: 'eth0', address: '10.0.50.1/24' }, { host: receiver, ifname: 'eth0', address: '10.0.50.2/24' });
    await sender.execOk(['ethtool', '-K', 'eth0', 'tso', 'off', 'gso', 'off']);
    await receiver.execOk(['ethtool', '-K', 'eth0', 'gro', 'on']);
    const pass = BpfObject.open(join(defaultObjectsDir(), 'tests', 'xdp_pass.bpf.o'));
    pass.load();
    const gbps: Record<'tc' | 'xdp', number[]> = { tc: [], xdp: [] };
    try {
      for (let r = 0; r < REPEAT; r++) {
        for (const mode of ['tc', 'xdp'] as const) {
          const link = mode === 'xdp' ? inNetns(receiver.netns, () => attachXdpDevice(pass.program('xdp_pass'), 'eth0', 'generic')) : undefined;
          try {
            const server = receiver.spawn(['iperf3', '-s', '-1', '-p', '5201']);
            await new Promise((res) => setTimeout(res, 300));
            const j = JSON.parse(await sender.execOk(['iperf3', '-c', '10.0.50.2', '-p', '5201', '-t', String(SECONDS), '-J'], { timeoutMs: (SECONDS + 30) * 1000 })) as { end: { sum_received: { bits_per_second: number } } };
            gbps[mode].push(j.end.sum_received.bits_per_second / 1e9);
            await server.stop(2000);
          } finally {
            if (link) inNetns(receiver.netns, () => link.close());
          }
          progress('.');
        }
      }
    } finally {
      pass.close();
    }
    progress('\n');
    const [tc, xdp] = [stat(gbps.tc), stat(gbps.xdp)];
    publish({
      name: 'generic-xdp-gro',
      title: 'A generic XDP program that passes every frame, against none: TCP receive of MTU-sized frames with GRO on',
      command: COMMAND,
      method: `two testbed namespaces joined by a veth pair; the sender with TSO and GSO off (MTU-sized frames, as a NIC receives them), the receiving veth with GRO on (as a NIC's driver has it); iperf3 one stream for ${SECONDS} s, without and with a generic XDP program that returns XDP_PASS (bpf/tests/xdp_pass.bpf.c) on the receiving device, taking turns in each of ${REPEAT} repeats; median, spread min–max in brackets.`,
      tables: [markdownTable(['receiving device', 'iperf3 1 stream Gbit/s', '/ no XDP'], [['no XDP (GRO)', fmtStat(tc, 2), '1.00'], ['generic XDP, XDP_PASS', fmtStat(xdp, 2), ratio(xdp.median, tc.median)]])],
      ratios: [`generic XDP / none: ${ratio(xdp.median, tc.median)} (the kernel skips GRO on a device with a generic XDP program)`],
      data: { seconds: SECONDS, repeat: REPEAT, gbps },
    });
  } finally {
    await tb.destroy();
  }
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
