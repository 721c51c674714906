// What some FRR releases do differently, and how ferry's configuration keeps clear of it.
//
// BFD before the session: in FRR 10.2.0-10.2.2 and 10.3.0 bgpd counts a peer with BFD as
// inactive while its BFD session is down, even before the BGP session was ever up, so the
// session stays Idle until BFD comes up (fixed in 10.2.3 and 10.3.1: BFD is asked only
// for an established session). A router that starts BFD only for an established session
// (FRR's dynamic neighbors, `bgp listen range`, among others) then never gets a session
// from such a node: neither side moves first. Debian 13's FRR (10.3-3, the image's) is one.
// On such a FRR, ferry turns BFD on for a peer only once its session is established, and
// off again (restarting the peer: taking BFD off does not) when it is not.
import type { BgpNodeConfig } from './bgp.js';
import type { FrrConfig } from './frr-config.js';

/** Does the FRR of this `show version` keep a session with BFD Idle while BFD is down? */
export function bfdHoldsSessionIdle(showVersion: string): boolean {
  const m = /FRRouting (\d+)\.(\d+)(?:\.(\d+))?/.exec(showVersion);
  if (!m) return false;
  const [major, minor, patch] = [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)];
  return major === 10 && ((minor === 2 && patch <= 2) || (minor === 3 && patch === 0));
}

/** `cfg` with BFD only for the peers `allowed` names (those whose session is established). */
export function bfdOnlyWhenEstablished(cfg: BgpNodeConfig, allowed: (address: string) => boolean): BgpNodeConfig {
  return {
    ...cfg,
    peers: cfg.peers.map((p) => {
      if (!p.bfd || allowed(p.address)) return p;
      const { bfd: _held, ...rest } = p;
      return rest;
    }),
  };
}

/** The peers with `neighbor ADDRESS bfd` in `c`. */
export function peersWithBfd(c: FrrConfig): Set<string> {
  return new Set((c.bgp?.lines ?? []).flatMap((l) => /^neighbor (\S+) bfd$/.exec(l)?.[1] ?? []));
}

/** The peers whose `neighbor ADDRESS bfd` is in `from` and not in `to`. */
export function bfdTakenOff(from: FrrConfig, to: FrrConfig): string[] {
  const after = peersWithBfd(to);
  return [...peersWithBfd(from)].filter((a) => !after.has(a));
}
