// The few libc calls Node does not expose, through koffi.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

export const CLONE_NEWNET = 0x40000000;

interface Libc {
  setns(fd: number, nstype: number): number;
  ifNameToIndex(name: string): number;
  /** The name, or undefined when no interface has that index here. */
  ifIndexToName(ifindex: number): string | undefined;
  errno(): number;
}

let bound: Libc | undefined;

export function libc(): Libc {
  if (bound) return bound;
  const k = require('koffi');
  const lib = k.load('libc.so.6');
  const setns = lib.func('int setns(int fd, int nstype)');
  const ifNameToIndex = lib.func('unsigned int if_nametoindex(const char *name)');
  const ifIndexToName = lib.func('void *if_indextoname(unsigned int ifindex, _Out_ uint8_t *ifname)');
  bound = {
    setns: (fd, type) => setns(fd, type),
    ifNameToIndex: (name) => ifNameToIndex(name),
    ifIndexToName: (ifindex) => {
      const buf = Buffer.alloc(16); // IF_NAMESIZE
      return ifIndexToName(ifindex, buf) ? buf.toString('utf8').replace(/\0.*$/s, '') : undefined;
    },
    errno: () => k.errno(),
  };
  return bound;
}

/** socket(2) types and flags (linux/net.h), for the sockets these calls make. */
export const SOCK_STREAM = 1;
export const SOCK_DGRAM = 2;
export const SOCK_RAW = 3;
export const SOCK_CLOEXEC = 0o2000000;

/** The socket calls Node has no API for (raw IPv4, AF_PACKET, socket options), bound once. */
export interface SocketCalls {
  socket(domain: number, type: number, proto: number): number;
  sendto(fd: number, buf: Buffer, len: number, flags: number, addr: Buffer, alen: number): number;
  recv(fd: number, buf: Buffer, len: number, flags: number): number;
  setsockopt(fd: number, level: number, name: number, value: Buffer, len: number): number;
  getsockopt(fd: number, level: number, name: number, value: Buffer, len: Buffer): number;
  bind(fd: number, addr: Buffer, len: number): number;
  listen(fd: number, backlog: number): number;
  close(fd: number): number;
  errno(): number;
}

let socketCalls: SocketCalls | undefined;

export function sockets(): SocketCalls {
  if (socketCalls) return socketCalls;
  const k = require('koffi');
  const lib = k.load('libc.so.6');
  socketCalls = {
    socket: lib.func('int socket(int domain, int type, int protocol)'),
    sendto: lib.func('intptr_t sendto(int fd, const void *buf, size_t len, int flags, const void *addr, uint32_t alen)'),
    recv: lib.func('intptr_t recv(int fd, _Out_ uint8_t *buf, size_t len, int flags)'),
    setsockopt: lib.func('int setsockopt(int fd, int level, int name, const void *value, uint32_t len)'),
    getsockopt: lib.func('int getsockopt(int fd, int level, int name, void *value, void *len)'),
    bind: lib.func('int bind(int fd, const void *addr, uint32_t len)'),
    listen: lib.func('int listen(int fd, int backlog)'),
    close: lib.func('int close(int fd)'),
    errno: () => k.errno(),
  };
  return socketCalls;
}
