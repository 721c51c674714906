// Whole Ethernet frames out of an interface (AF_PACKET), in this process's network
// namespace: the agent's gratuitous ARPs. The socket is opened with protocol 0, so it
// receives nothing.
import { ErrorCode, FerryError, errnoMessage } from '../errors.js';
import { SOCK_CLOEXEC, SOCK_RAW, sockets } from './libc.js';

const AF_PACKET = 17;

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
    const c = sockets();
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
    if (this.fd >= 0) sockets().close(this.fd);
    this.fd = -1;
  }
}

/** `frames` out of interface `ifindex` by a socket opened for them alone (tests and tools). */
export function sendFramesOnce(ifindex: number, frames: readonly Buffer[]): number {
  const s = new FrameSender();
  try {
    return s.send(ifindex, frames);
  } finally {
    s.close();
  }
}
