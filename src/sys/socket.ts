// Socket calls Node lacks: a listening TCP socket created inside another network
// namespace (the socket keeps the namespace it was created in, and Node's
// server.listen({ fd }) adopts it), and a network namespace's cookie.
import { isIPv4 } from 'node:net';
import { ErrorCode, FerryError, errnoMessage } from '../errors.js';
import { SOCK_CLOEXEC, SOCK_DGRAM, SOCK_STREAM, sockets as libcSockets } from './libc.js';
import { inNetns } from './netns.js';

const AF_INET = 2;
const SOL_SOCKET = 1;
const SO_REUSEADDR = 2;
const SO_NETNS_COOKIE = 71;

/** A bound, listening IPv4 TCP socket in `netns`; hand it to server.listen({ fd }). */
export function listeningSocketInNetns(netns: string, host: string, port: number): number {
  if (!isIPv4(host)) throw new FerryError({ code: ErrorCode.Netns, op: `listen on ${host}:${port} in ${netns}`, cause: 'not an IPv4 address' });
  const c = libcSockets();
  return inNetns(netns, () => {
    const fd = c.socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const fail = (op: string) => {
      const e = c.errno();
      if (fd >= 0) c.close(fd);
      return new FerryError({ code: ErrorCode.Netns, op: `${op} ${host}:${port} in ${netns}`, cause: errnoMessage(e) });
    };
    if (fd < 0) throw fail('socket for');
    const one = Buffer.alloc(4);
    one.writeInt32LE(1);
    c.setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, one, 4);
    const sa = Buffer.alloc(16); // struct sockaddr_in
    sa.writeUInt16LE(AF_INET, 0);
    sa.writeUInt16BE(port, 2);
    Buffer.from(host.split('.').map(Number)).copy(sa, 4);
    if (c.bind(fd, sa, sa.length) < 0) throw fail('bind');
    if (c.listen(fd, 511) < 0) throw fail('listen on');
    return fd;
  });
}

/**
 * The cookie of a network namespace (the calling thread's, or `netns` by name): what
 * bpf_get_netns_cookie() returns for sockets there. Linux 5.14+ (SO_NETNS_COOKIE).
 */
export function netnsCookie(netns?: string): bigint {
  const c = libcSockets();
  const read = () => {
    const fd = c.socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw new FerryError({ code: ErrorCode.Netns, op: `read the netns cookie${netns ? ` of ${netns}` : ''}`, cause: errnoMessage(c.errno()) });
    try {
      const value = Buffer.alloc(8);
      const len = Buffer.alloc(4);
      len.writeUInt32LE(8);
      if (c.getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, value, len) < 0) {
        throw new FerryError({ code: ErrorCode.Netns, op: `read the netns cookie${netns ? ` of ${netns}` : ''}`, cause: errnoMessage(c.errno()), hint: 'SO_NETNS_COOKIE needs Linux 5.14 or later' });
      }
      return value.readBigUInt64LE(0);
    } finally {
      c.close(fd);
    }
  };
  return netns ? inNetns(netns, read) : read();
}
