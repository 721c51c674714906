// Ports the host's network namespace has bound sockets to (host_ports, enum
// host_ports_slot): a new SNAT binding asks the host's sockets whether they hold its reply
// tuple only for these, which spares most new flows a socket lookup. The post_bind hooks
// (bpf/sock.bpf.c) mark every bind from the moment they are attached; this marks what they
// cannot see: the sockets already open, and the ephemeral range (ports the kernel picks at
// connect() or listen() without a bind) where it overlaps the SNAT range. Bits are never
// cleared: a port marked in vain costs a lookup, a port missed could cost a connection.
import { readFileSync } from 'node:fs';
import { inNetns } from '../sys/netns.js';
import { HostPortsSlot, type DatapathMaps } from './layouts.js';

type HostPortsMap = DatapathMaps['host_ports'];
export interface PortRange { min: number; max: number }

/** Local ports of every TCP and UDP socket (v4 and v6) in /proc/net/{tcp,udp}[6] text. */
export function localPortsOf(procNetText: string): number[] {
  const ports: number[] = [];
  for (const line of procNetText.split('\n')) {
    // "  0: 0100007F:1F90 00000000:0000 0A ...": the local address is the second field.
    const local = line.trim().split(/\s+/)[1];
    const hex = local?.slice(local.lastIndexOf(':') + 1);
    if (hex && /^[0-9A-F]{4}$/i.test(hex)) ports.push(parseInt(hex, 16));
  }
  return ports;
}

/** net.ipv4.ip_local_port_range: "32768\t60999". */
export function parsePortRange(text: string): PortRange | undefined {
  const [min, max] = text.trim().split(/\s+/).map(Number);
  return Number.isInteger(min) && Number.isInteger(max) && min! <= max! ? { min: min!, max: max! } : undefined;
}

export interface HostPortsSummary { trusted: boolean; marked: number }

/** Ports marked in either bitmap, and whether the datapath trusts the map (`ferry status`). */
export function summarizeHostPorts(map: Pick<HostPortsMap, 'entries'>): HostPortsSummary {
  const words = new Map(map.entries());
  let marked = 0;
  for (let i = 0; i < HostPortsSlot.HOST_PORTS_WORDS; i++) marked += popcount((words.get(i) ?? 0n) | (words.get(HostPortsSlot.HOST_PORTS_AGENT + i) ?? 0n));
  return { trusted: (words.get(HostPortsSlot.HOST_PORTS_TRUSTED) ?? 0n) !== 0n, marked };
}

export class HostPorts {
  private ephemeral?: PortRange;
  /** The ephemeral range last marked (the SNAT range when it could not be read). */
  private markedRange?: PortRange;

  /** `netns`: the host's namespace by name when it is not this process's own (tests, sandbox). */
  constructor(
    private readonly map: HostPortsMap,
    private readonly snat: PortRange,
    private readonly netns?: string,
  ) {}

  /** With the post_bind hooks attached: mark the open sockets' ports and the ephemeral overlap, then trust the map. */
  seed(): void {
    this.mark(this.inHostNetns(() => ['tcp', 'tcp6', 'udp', 'udp6'].flatMap((f) => localPortsOf(readOptional(`/proc/thread-self/net/${f}`)))));
    this.recheck();
    this.map.update(HostPortsSlot.HOST_PORTS_TRUSTED, 1n);
  }

  /** The ephemeral range again: a sysctl may have moved it into the SNAT range since. */
  recheck(): void {
    const range = this.inHostNetns(() => parsePortRange(readOptional('/proc/sys/net/ipv4/ip_local_port_range')));
    // Unreadable: the whole SNAT range may be the kernel's to pick from.
    const r = range ?? this.snat;
    this.ephemeral = range;
    // Marked already (bits are never cleared): nothing to write on this pass.
    if (this.markedRange && this.markedRange.min === r.min && this.markedRange.max === r.max) return;
    this.markedRange = r;
    const lo = Math.max(r.min, this.snat.min);
    const hi = Math.min(r.max, this.snat.max);
    if (lo <= hi) this.mark(Array.from({ length: hi - lo + 1 }, (_, i) => lo + i));
  }

  /** How many ports are marked, whether the datapath trusts the map, the ephemeral range last read. */
  status(): HostPortsSummary & { ephemeral?: PortRange } {
    return { ...summarizeHostPorts(this.map), ...(this.ephemeral ? { ephemeral: this.ephemeral } : {}) };
  }

  private inHostNetns<T>(fn: () => T): T {
    return this.netns ? inNetns(this.netns, fn) : fn();
  }

  private mark(ports: number[]): void {
    const words = new Map<number, bigint>();
    for (const p of ports) words.set(p >> 6, (words.get(p >> 6) ?? 0n) | (1n << BigInt(p & 63)));
    // The agent's own bitmap: the hooks never write it, so read-or-write loses nothing.
    for (const [word, bits] of words) {
      const slot = HostPortsSlot.HOST_PORTS_AGENT + word;
      const have = this.map.lookup(slot) ?? 0n;
      if ((have | bits) !== have) this.map.update(slot, have | bits);
    }
  }
}

function readOptional(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

function popcount(x: bigint): number {
  let n = 0;
  for (; x; x &= x - 1n) n++;
  return n;
}
