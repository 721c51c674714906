// The devices the tc programs attach to. Named in the config: those, where an entry that is
// not a plain interface name is a regular expression matched against whole names ("enp.*",
// "eth[0-9]+"). None named: the devices that carry the node's InternalIPs and those of the
// default routes, as Cilium chooses them, so that a Talos node's enp3s0 needs no setting.
import { ErrorCode, FerryError } from '../errors.js';
import type { LinkInfo } from '../sys/links.js';

/**
 * An entry made of interface-name characters only is a name (eth0, bond0.100); one with any
 * other character (* + [ ] ^ $ ( ) | ? \\) is a pattern.
 */
export function isInterfaceName(s: string): boolean {
  return /^[a-zA-Z0-9_.-]+$/.test(s);
}

/** Why a devices entry is unusable, or undefined: a name of at most 15 characters (IFNAMSIZ - 1), or a pattern that compiles. */
export function deviceEntryProblem(s: string): string | undefined {
  if (s.trim() === '') return 'is empty';
  if (isInterfaceName(s)) return s.length <= 15 ? undefined : 'is an interface name longer than 15 characters';
  if (s.length > 64) return 'is a pattern longer than 64 characters';
  try {
    new RegExp(`^(?:${s})$`);
    return undefined;
  } catch (e) {
    return `is not a valid pattern: ${(e as Error).message}`;
  }
}

/** Does a devices entry (a name, or a pattern matched against whole names) take `name`? */
export function entryMatches(entry: string, name: string): boolean {
  return isInterfaceName(entry) ? name === entry : new RegExp(`^(?:${entry})$`).test(name);
}

export function chooseDevices(links: LinkInfo[], defaultRouteDevices: string[], nodeAddresses: string[], wanted: string[]): string[] {
  const usable = links.filter((l) => !l.loopback);
  if (wanted.length > 0) {
    const out: string[] = [];
    for (const w of wanted) {
      // A pattern leaves out the ports of a bond or bridge (`enp.*` would match a bond's
      // NICs): their frames are the bond's, and ferry's programs there would see them first.
      // A port named outright is taken.
      const named = isInterfaceName(w);
      const matched = usable.filter((l) => entryMatches(w, l.name));
      const ports = named ? [] : matched.filter((l) => l.portOf);
      if (matched.length === ports.length) {
        const portsSaid = ports.length > 0 ? `; it matches only ports of other devices: ${ports.map((l) => `${l.name} (of ${l.portOf})`).join(', ')}` : '';
        throw new FerryError({ code: ErrorCode.Config, op: 'choose devices', cause: `no interface ${named ? 'named' : 'matches'} "${w}" (have: ${usable.map((l) => l.name).join(', ') || 'none'})${portsSaid}`, hint: ports.length > 0 ? 'name the bond or bridge itself' : 'set devices to the node\'s external interfaces, or leave it empty to choose them from the node\'s addresses and default routes' });
      }
      for (const l of matched) if (!out.includes(l.name) && !ports.includes(l)) out.push(l.name);
    }
    return out;
  }
  const chosen = usable.filter((l) => l.up && !l.portOf && (l.addresses.some((a) => nodeAddresses.includes(a)) || defaultRouteDevices.includes(l.name))).map((l) => l.name);
  if (chosen.length === 0) {
    throw new FerryError({ code: ErrorCode.Config, op: 'choose devices', cause: `no up interface carries the node's addresses (${nodeAddresses.join(', ') || 'none'}) or a default route`, hint: 'set devices (names or patterns)' });
  }
  return chosen;
}

/**
 * VLAN devices (up) of an attached device that are not attached themselves: frames tagged
 * for them pass the parent's programs untouched (tc.bpf.c leaves them to the VLAN's
 * device), so their Service traffic is not ferry's until they are named in `devices`.
 */
export function vlansLeftOut(links: readonly LinkInfo[], attached: readonly string[]): LinkInfo[] {
  return links.filter((l) => l.vlan && l.up && attached.includes(l.vlan.parent) && !attached.includes(l.name));
}
