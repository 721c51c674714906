// The agent's reading of the host's sockets and ephemeral range (src/datapath/host-ports.ts).
import { describe, expect, it } from 'vitest';
import { HostPortsSlot } from '../../src/datapath/layouts.js';
import { localPortsOf, parsePortRange, summarizeHostPorts } from '../../src/datapath/host-ports.js';

describe('host ports', () => {
  it('takes the local port of every line of /proc/net/tcp, tcp6, udp and udp6, and skips the headers', () => {
    const tcp = [
      '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode',
      '   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0',
      '   1: 151E000A:4E20 051E000A:C350 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1',
    ].join('\n');
    const tcp6 = '  sl  local_address                         remote_address  st\n   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 0\n';
    expect(localPortsOf(tcp)).toEqual([8080, 20000]);
    expect(localPortsOf(tcp6)).toEqual([22]);
    expect(localPortsOf('')).toEqual([]);
    expect(localPortsOf('garbage\n  0: nonsense\n')).toEqual([]);
  });

  it('reads the ephemeral range, and nothing from a malformed one', () => {
    expect(parsePortRange('32768\t60999\n')).toEqual({ min: 32768, max: 60999 });
    expect(parsePortRange('60999 32768')).toBeUndefined();
    expect(parsePortRange('')).toBeUndefined();
    expect(parsePortRange('a b')).toBeUndefined();
  });

  it('counts a port marked in both bitmaps once, and trusts the map only with its slot set', () => {
    const entries = (m: Map<number, bigint>) => ({ entries: () => [...m] });
    const m = new Map<number, bigint>([[0, 0b101n], [HostPortsSlot.HOST_PORTS_AGENT, 0b110n], [1023, 1n << 63n]]);
    expect(summarizeHostPorts(entries(m))).toEqual({ trusted: false, marked: 4 });
    m.set(HostPortsSlot.HOST_PORTS_TRUSTED, 1n);
    expect(summarizeHostPorts(entries(m))).toEqual({ trusted: true, marked: 4 });
  });
});
