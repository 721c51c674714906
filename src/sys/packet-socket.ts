// Whole Ethernet frames out of an interface (AF_PACKET), in this process's network
// namespace: the agent's gratuitous ARPs. The socket is opened with protocol 0, so it
// receives nothing.
import { createRequire } from 'node:module';
import { ErrorCode, FerryError, errnoMessage } from '../errors.js';

const require = createRequire(import.meta.url);

const AF_PACKET = 17;
const SOCK_RAW = 3;
const SOCK_CLOEXEC = 0o2000000;

interface PacketCalls {
  socket(domain: number, type: number, proto: number): number;
  sendto(fd: number, buf: Buffer, len: number, flags: number, addr: Buffer, alen: number): number;
  close(fd: number): number;
  errno(): number;
}

let calls: PacketCalls | undefined;
function packet(): PacketCalls {
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

/** struct sockaddr_ll for sending on `ifindex` to the frame's own destination. */
function linkAddress(ifindex: number, frame: Buffer): Buffer {
  const sa = Buffer.alloc(20);
  sa.writeUInt16LE(AF_PACKET, 0);
  sa.writeUInt16BE(frame.readUInt16BE(12), 2); // the frame's EtherType
  sa.writeInt32LE(ifindex, 4);
  sa[11] = 6; // sll_halen
  frame.copy(sa, 12, 0, 6); // sll_addr: the destination MAC
  return sa;
}

/**
 * A packet socket kept open: closing one waits for an RCU grace period in the kernel
 * (packet_release → synchronize_net), so a socket per frame would stall the agent for
 * seconds when a thousand addresses are announced at once.
 */
export class FrameSender {
  private fd = -1;

  /** Send each frame (starting at its Ethernet header) out of interface `ifindex`. */
  send(ifindex: number, frames: readonly Buffer[]): number {
    const c = packet();
    if (this.fd < 0) {
      this.fd = c.socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
      if (this.fd < 0) throw new FerryError({ code: ErrorCode.Netns, op: 'open a packet socket', cause: errnoMessage(c.errno()), hint: 'needs CAP_NET_RAW' });
    }
    let sent = 0;
    for (const f of frames) {
      const sa = linkAddress(ifindex, f);
      if (c.sendto(this.fd, f, f.length, 0, sa, sa.length) < 0) {
        throw new FerryError({ code: ErrorCode.Netns, op: `send a frame on interface ${ifindex}`, cause: errnoMessage(c.errno()) });
      }
      sent++;
    }
    return sent;
  }

  close(): void {
    if (this.fd >= 0) packet().close(this.fd);
    this.fd = -1;
  }
}
