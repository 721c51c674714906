// Sending hand-built IPv4 packets (the header included) from a network namespace, for tests
// that play a hostile or unusual client: spoofed sources, IP options, fragments, low TTLs.
import { createRequire } from 'node:module';
import { ErrorCode, FerryError, errnoMessage } from '../errors.js';
import { inNetns } from './netns.js';

const require = createRequire(import.meta.url);

const AF_INET = 2;
const SOCK_RAW = 3;
const SOCK_CLOEXEC = 0o2000000;
const IPPROTO_RAW = 255; // implies IP_HDRINCL: the packet carries its own header

interface RawCalls {
  socket(domain: number, type: number, proto: number): number;
  sendto(fd: number, buf: Buffer, len: number, flags: number, addr: Buffer, alen: number): number;
  close(fd: number): number;
  errno(): number;
}

let calls: RawCalls | undefined;
function raw(): RawCalls {
  if (calls) return calls;
  const k = require('koffi');
  const lib = k.load('libc.so.6');
  calls = {
    socket: lib.func('int socket(int domain, int type, int protocol)'),
    sendto: lib.func('intptr_t sendto(int fd, const void *buf, size_t len, int flags, const void *addr, uint32_t alen)'),
    close: lib.func('int close(int fd)'),
    errno: () => k.errno(),
  };
  return calls;
}

/**
 * Send IPv4 packets (each starting at the IPv4 header) as they are, from `netns`: the
 * kernel routes them by their destination and sends the header as given. Returns how many
 * were sent.
 */
export function sendRawIPv4(netns: string, packets: readonly Buffer[]): number {
  const c = raw();
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
