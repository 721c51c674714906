// Where ferry's programs are attached, with their load times: XDP programs, tc filters and
// tcx programs on devices (in a given network namespace) and cgroup links. Read through
// bpftool, which walks all but tcx (not before bpftool 7.3), and the kernel's tcx lists.
import { execFileSync } from 'node:child_process';
import { tcxProgramIds, tcxSupported } from '../ebpf/link-tcx.js';
import { linkNames } from '../sys/links.js';
import { inNetns } from '../sys/netns.js';

export interface Attachment {
  where: string;
  program: string;
  id: number;
  loaded: string;
  /** XDP: the device's index. */
  ifindex?: number;
}

function bpftool(args: string[], netns?: string): unknown {
  const argv = netns ? ['nsenter', `--net=/run/netns/${netns}`, '--', 'bpftool', '-j', ...args] : ['bpftool', '-j', ...args];
  return JSON.parse(execFileSync(argv[0]!, argv.slice(1), { encoding: 'utf8' }));
}

/** bpftool's XDP modes in ferry's words (acceleration: native or generic). */
const XDP_MODE: Record<string, string> = { driver: 'native', generic: 'generic', offload: 'offload' };

/** ferry's programs attached: XDP and tc (in `netns`) and cgroup links; [] without bpftool. */
export function attachedPrograms(netns?: string): Attachment[] {
  try {
    const progs = new Map((bpftool(['prog', 'show']) as Array<{ id: number; name?: string; loaded_at?: number }>).map((p) => [p.id, p]));
    const loaded = (id: number) => {
      const t = progs.get(id)?.loaded_at;
      return t ? new Date(t * 1000).toISOString() : '?';
    };
    const out: Attachment[] = [];
    for (const dev of bpftool(['net', 'show'], netns) as Array<{ xdp?: Array<{ devname: string; ifindex: number; mode: string; id: number }>; tc?: Array<{ devname: string; kind: string; name?: string; id: number }> }>) {
      for (const x of dev.xdp ?? []) {
        const name = progs.get(x.id)?.name ?? '';
        if (name.startsWith('xdp_')) out.push({ where: `xdp/${XDP_MODE[x.mode] ?? x.mode} ${x.devname}`, program: name, id: x.id, loaded: loaded(x.id), ifindex: x.ifindex });
      }
      for (const t of dev.tc ?? []) if (t.name?.startsWith('tc_')) out.push({ where: `tc ${t.kind.replace('clsact/', '')} ${t.devname}`, program: t.name.replace(/:\[\d+\]$/, ''), id: t.id, loaded: loaded(t.id) });
    }
    const tcx = () => tcxPrograms((id) => progs.get(id)?.name ?? '', loaded);
    out.push(...(netns ? inNetns(netns, tcx) : tcx()));
    for (const l of bpftool(['link', 'show']) as Array<{ type: string; prog_id: number; attach_type?: string; cgroup_id?: number }>) {
      const name = progs.get(l.prog_id)?.name ?? '';
      if (l.type === 'cgroup' && /^sock[46]_/.test(name)) out.push({ where: `cgroup ${l.attach_type ?? ''} (cgroup id ${l.cgroup_id ?? '?'})`, program: name, id: l.prog_id, loaded: loaded(l.prog_id) });
    }
    return out;
  } catch {
    return []; // no bpftool, or not allowed: status still reports the maps
  }
}

/** ferry's programs (tc_*) in the tcx lists of this network namespace's devices. */
function tcxPrograms(nameOf: (id: number) => string, loaded: (id: number) => string): Attachment[] {
  if (!tcxSupported()) return [];
  const out: Attachment[] = [];
  for (const ifname of linkNames()) {
    for (const direction of ['ingress', 'egress'] as const) {
      let ids: number[];
      try {
        ids = tcxProgramIds(ifname, direction);
      } catch {
        continue; // the device went meanwhile
      }
      for (const id of ids) if (nameOf(id).startsWith('tc_')) out.push({ where: `tcx ${direction} ${ifname}`, program: nameOf(id), id, loaded: loaded(id) });
    }
  }
  return out;
}
