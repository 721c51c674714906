// Sending hand-built IPv4 packets (the header included) from a network namespace, for tests
// that play a hostile or unusual client: spoofed sources, IP options, fragments, low TTLs.
import { ErrorCode, FerryError, errnoMessage } from '../errors.js';
import { SOCK_CLOEXEC, SOCK_RAW, sockets } from './libc.js';
import { inNetns } from './netns.js';

const AF_INET = 2;
const IPPROTO_RAW = 255; // implies IP_HDRINCL: the packet carries its own header

/**
 * Send IPv4 packets (each starting at the IPv4 header) as they are, from `netns`: the
 * kernel routes them by their destination and sends the header as given. Returns how many
 * were sent.
 */
export function sendRawIPv4(netns: string, packets: readonly Buffer[]): number {
  const c = sockets();
  return inNetns(netns, () => {
    const fd = c.socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
    if (fd < 0) throw new FerryError({ code: ErrorCode.Netns, op: `open a raw socket in ${netns}`, cause: errnoMessage(c.errno()), hint: 'needs CAP_NET_RAW' });
    try {
      let sent = 0;
      for (const p of packets) {
        const sa = Buffer.alloc(16); // struct sockaddr_in: the destination, for routing
        sa.writeUInt16LE(AF_INET, 0);
        p.copy(sa, 4, 16, 20);
        if (c.sendto(fd, p, p.length, 0, sa, sa.length) < 0) {
          throw new FerryError({ code: ErrorCode.Netns, op: `send a raw packet in ${netns}`, cause: errnoMessage(c.errno()) });
        }
        sent++;
      }
      return sent;
    } finally {
      c.close(fd);
    }
  });
}
