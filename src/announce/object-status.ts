// The status ferry's operator writes on announcement objects (L2AnnouncementPolicy, BGPPeer,
// BGPAdvertisement), so that `kubectl get` shows what the agents make of them: Accepted
// (False with the reader's complaints: the agents leave the object out) and, for an
// advertisement naming peers, ResolvedRefs (False while a named BGPPeer does not exist).
// Pure: the same readers the agents use decide, so the status cannot disagree with them.
import { clipMessage, conditionSince } from '../ipam/status.js';
import { BGP_ADVERTISEMENT_PATH, BGP_PEER_PATH, parseBgpAdvertisement, parseBgpPeer, type CustomObject } from './bgp.js';
import { L2_POLICY_PATH, parseL2Policy } from './policy.js';

export type AnnouncementKind = 'L2AnnouncementPolicy' | 'BGPPeer' | 'BGPAdvertisement';

export const ANNOUNCEMENT_KINDS: ReadonlyArray<{ kind: AnnouncementKind; path: string; uses: string }> = [
  { kind: 'L2AnnouncementPolicy', path: L2_POLICY_PATH, uses: 'the agents answer ARP for the addresses it selects' },
  { kind: 'BGPPeer', path: BGP_PEER_PATH, uses: 'the agents of the nodes it selects peer with it' },
  { kind: 'BGPAdvertisement', path: BGP_ADVERTISEMENT_PATH, uses: 'the agents announce the addresses it selects' },
];

export const CONDITION_ACCEPTED = 'Accepted';
export const CONDITION_RESOLVED_REFS = 'ResolvedRefs';
const OURS = new Set([CONDITION_ACCEPTED, CONDITION_RESOLVED_REFS]);

export interface ObjectCondition {
  type: string;
  status: 'True' | 'False';
  reason: string;
  message: string;
  lastTransitionTime: string;
  observedGeneration?: number;
}

export interface AnnouncementObject extends CustomObject {
  metadata?: { name?: string; generation?: number; resourceVersion?: string };
  status?: { conditions?: unknown };
}

export interface AnnouncementObjectStatus {
  conditions: ObjectCondition[];
}

/** What the agents' reader of this kind finds wrong with it (nothing: they use it). */
export const announcementErrors = (kind: AnnouncementKind, o: CustomObject): string[] =>
  kind === 'BGPPeer' ? parseBgpPeer(o).errors : kind === 'BGPAdvertisement' ? parseBgpAdvertisement(o).errors : parseL2Policy(o).errors;

/** Conditions as stored; anything else a hostile writer put there counts as absent. */
function currentConditions(o: AnnouncementObject): Array<Partial<ObjectCondition>> {
  const c = o.status?.conditions;
  return Array.isArray(c) ? c.filter((x): x is Partial<ObjectCondition> => typeof x === 'object' && x !== null && typeof (x as { type?: unknown }).type === 'string') : [];
}

/**
 * The status `o` should have; undefined when it has it already. `peerNames`: the BGPPeer
 * objects that exist (for an advertisement's ResolvedRefs). Conditions of other types that
 * someone else wrote are kept.
 */
export function announcementStatusFor(kind: AnnouncementKind, o: AnnouncementObject, peerNames: ReadonlySet<string>, now: Date): AnnouncementObjectStatus | undefined {
  const current = currentConditions(o);
  const prev = (type: string) => current.find((c) => c.type === type);
  const generation = typeof o.metadata?.generation === 'number' ? { observedGeneration: o.metadata.generation } : {};
  const make = (type: string, ok: boolean, reason: string, message: string): ObjectCondition => {
    const status = ok ? 'True' : 'False';
    return { type, status, reason, message: clipMessage(message), lastTransitionTime: conditionSince(prev(type) as { status?: string; lastTransitionTime?: string } | undefined, status, now), ...generation };
  };
  const advertisement = kind === 'BGPAdvertisement' ? parseBgpAdvertisement(o) : undefined;
  const errors = advertisement?.errors ?? announcementErrors(kind, o);
  const uses = ANNOUNCEMENT_KINDS.find((k) => k.kind === kind)!.uses;
  const wanted = [errors.length ? make(CONDITION_ACCEPTED, false, 'Invalid', `${errors.join('; ')} (the agents leave it out)`) : make(CONDITION_ACCEPTED, true, 'Valid', uses)];
  if (advertisement && errors.length === 0) {
    const named = advertisement.peers;
    const missing = named.filter((n) => !peerNames.has(n));
    wanted.push(
      missing.length
        ? make(CONDITION_RESOLVED_REFS, false, 'PeerNotFound', `no BGPPeer named ${missing.join(', ')}${missing.length === named.length ? ': the addresses it selects go to no peer' : ''}`)
        : make(CONDITION_RESOLVED_REFS, true, 'Resolved', named.length ? 'every BGPPeer it names exists' : 'it names no peer: every peer'),
    );
  }
  const others = current.filter((c) => !OURS.has(c.type!)) as ObjectCondition[];
  const same = wanted.every((w) => {
    const p = prev(w.type);
    return p && p.status === w.status && p.reason === w.reason && p.message === w.message && p.observedGeneration === w.observedGeneration;
  }) && current.filter((c) => OURS.has(c.type!)).length === wanted.length;
  return same ? undefined : { conditions: [...wanted, ...others] };
}
