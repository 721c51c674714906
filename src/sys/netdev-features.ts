// What a device's driver offers XDP, asked of the kernel's "netdev" generic-netlink family
// (kernel >= 6.3; libbpf 1.1, Debian 12's, cannot ask). ferry's XDP may send a frame out of
// another device than the one it arrived on only if that device takes frames from XDP
// (NETDEV_XDP_ACT_NDO_XMIT): else the kernel drops the redirected frame. For a veth the bit
// follows its peer (which must run XDP or GRO for the frames to be received).
import { errnoMessage } from '../errors.js';
import { SOCK_CLOEXEC, SOCK_RAW, sockets } from './libc.js';

const AF_NETLINK = 16;
const NETLINK_GENERIC = 16;
const NLM_F_REQUEST = 1;
const NLMSG_ERROR = 2;
const NLMSG_HDRLEN = 16;
const GENL_HDRLEN = 4;
// linux/genetlink.h
const GENL_ID_CTRL = 0x10;
const CTRL_CMD_GETFAMILY = 3;
const CTRL_ATTR_FAMILY_ID = 1;
const CTRL_ATTR_FAMILY_NAME = 2;
// linux/netdev.h (UAPI: these numbers do not change)
const NETDEV_CMD_DEV_GET = 1;
const NETDEV_A_DEV_IFINDEX = 1;
const NETDEV_A_DEV_XDP_FEATURES = 3;
/** enum netdev_xdp_act: the device can send frames other devices' XDP redirects to it. */
export const NETDEV_XDP_ACT_NDO_XMIT = 4n;

const align4 = (n: number) => (n + 3) & ~3;

function attr(type: number, payload: Buffer): Buffer {
  const a = Buffer.alloc(align4(4 + payload.length));
  a.writeUInt16LE(4 + payload.length, 0);
  a.writeUInt16LE(type, 2);
  payload.copy(a, 4);
  return a;
}

function request(family: number, cmd: number, attrs: Buffer[]): Buffer {
  const body = Buffer.concat(attrs);
  const m = Buffer.alloc(NLMSG_HDRLEN + GENL_HDRLEN + body.length);
  m.writeUInt32LE(m.length, 0);
  m.writeUInt16LE(family, 4);
  m.writeUInt16LE(NLM_F_REQUEST, 6);
  m.writeUInt32LE(1, 8); // sequence
  m.writeUInt8(cmd, NLMSG_HDRLEN);
  m.writeUInt8(1, NLMSG_HDRLEN + 1); // version
  body.copy(m, NLMSG_HDRLEN + GENL_HDRLEN);
  return m;
}

/** The attributes of a generic-netlink answer by type, or the errno (> 0) it carries. */
export function parseAnswer(buf: Buffer): Map<number, Buffer> | number {
  if (buf.length < NLMSG_HDRLEN) return 71; // EPROTO
  const len = Math.min(buf.readUInt32LE(0), buf.length);
  if (buf.readUInt16LE(4) === NLMSG_ERROR) return buf.length >= NLMSG_HDRLEN + 4 ? -buf.readInt32LE(NLMSG_HDRLEN) : 71;
  const attrs = new Map<number, Buffer>();
  for (let at = NLMSG_HDRLEN + GENL_HDRLEN; at + 4 <= len; ) {
    const alen = buf.readUInt16LE(at);
    if (alen < 4 || at + alen > len) break;
    attrs.set(buf.readUInt16LE(at + 2) & 0x3fff, buf.subarray(at + 4, at + alen));
    at += align4(alen);
  }
  return attrs;
}

/** One request and its answer on a new generic-netlink socket (in the calling thread's netns). */
function ask(msg: Buffer): Map<number, Buffer> | number {
  const c = sockets();
  const fd = c.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
  if (fd < 0) return c.errno();
  try {
    const kernel = Buffer.alloc(12); // struct sockaddr_nl, pid 0: the kernel
    kernel.writeUInt16LE(AF_NETLINK, 0);
    if (c.sendto(fd, msg, msg.length, 0, kernel, kernel.length) < 0) return c.errno();
    const answer = Buffer.alloc(8192);
    const n = c.recv(fd, answer, answer.length, 0);
    if (n < 0) return c.errno();
    return parseAnswer(answer.subarray(0, n));
  } finally {
    c.close(fd);
  }
}

let netdevFamily: number | undefined;

/**
 * The XDP features of the device with this index (NETDEV_XDP_ACT_* bits), or a reason why
 * the kernel did not say (a kernel before 6.3 has no netdev family; a device gone).
 */
export function xdpFeatures(ifindex: number): { features: bigint } | { unknown: string } {
  if (netdevFamily === undefined) {
    const fam = ask(request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, [attr(CTRL_ATTR_FAMILY_NAME, Buffer.from('netdev\0'))]));
    if (typeof fam === 'number') return { unknown: `no netdev generic-netlink family (${errnoMessage(fam)}; kernel >= 6.3 has it)` };
    const id = fam.get(CTRL_ATTR_FAMILY_ID);
    if (!id || id.length < 2) return { unknown: 'the netdev family has no id' };
    netdevFamily = id.readUInt16LE(0);
  }
  const index = Buffer.alloc(4);
  index.writeUInt32LE(ifindex, 0);
  const dev = ask(request(netdevFamily, NETDEV_CMD_DEV_GET, [attr(NETDEV_A_DEV_IFINDEX, index)]));
  if (typeof dev === 'number') return { unknown: `netdev dev-get of ifindex ${ifindex}: ${errnoMessage(dev)}` };
  const f = dev.get(NETDEV_A_DEV_XDP_FEATURES);
  if (!f || f.length < 8) return { unknown: `netdev dev-get of ifindex ${ifindex}: no xdp-features` };
  return { features: f.readBigUInt64LE(0) };
}
