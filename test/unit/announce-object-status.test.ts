// The status the operator writes on announcement objects: Accepted from the agents' own
// readers, ResolvedRefs for an advertisement's named peers, written only on a change.
import { describe, expect, it } from 'vitest';
import { announcementStatusFor, type AnnouncementObject, type AnnouncementObjectStatus } from '../../src/announce/object-status.js';

const T0 = new Date('2026-12-04T10:00:00.000Z');
const T1 = new Date('2026-12-04T10:05:00.000Z');
const peers = new Set(['router-a']);
const peer = (spec: Record<string, unknown>, extra: Partial<AnnouncementObject> = {}): AnnouncementObject => ({ metadata: { name: 'router-a', generation: 1 }, spec: { peerAddress: '192.0.2.1', peerASN: 65000, myASN: 64512, ...spec }, ...extra });
const type = (s: AnnouncementObjectStatus | undefined, t: string) => s?.conditions.find((c) => c.type === t);

describe('announcement object status', () => {
  it('a valid object is Accepted, with what the agents do with it', () => {
    const s = announcementStatusFor('BGPPeer', peer({}), peers, T0);
    expect(s?.conditions).toEqual([{ type: 'Accepted', status: 'True', reason: 'Valid', message: 'the agents of the nodes it selects peer with it', lastTransitionTime: '2026-12-04T10:00:00Z', observedGeneration: 1 }]);
  });

  it('an invalid one is not, with every complaint the agents\' reader makes', () => {
    const s = announcementStatusFor('BGPPeer', peer({ holdTimeSeconds: 3, keepaliveTimeSeconds: 2, peerAddress: 'x' }), peers, T0);
    const c = type(s, 'Accepted')!;
    expect(c).toMatchObject({ status: 'False', reason: 'Invalid' });
    expect(c.message).toMatch(/peerAddress "x"/);
    expect(c.message).toMatch(/keepalive at most a third/);
    expect(c.message).toMatch(/\(the agents leave it out\)$/);
    const l2 = announcementStatusFor('L2AnnouncementPolicy', { metadata: { name: 'p' }, spec: { interfaces: ['eth(0'] } }, peers, T0);
    expect(type(l2, 'Accepted')).toMatchObject({ status: 'False', reason: 'Invalid' });
    expect(type(l2, 'Accepted')).not.toHaveProperty('observedGeneration');
  });

  it('nothing to write when the object has its status already; a change keeps or moves the transition time', () => {
    const first = announcementStatusFor('BGPPeer', peer({}), peers, T0)!;
    expect(announcementStatusFor('BGPPeer', peer({}, { status: first }), peers, T1)).toBeUndefined();
    // A new generation (spec edited) is written, the transition time kept while Accepted stays True.
    const edited = announcementStatusFor('BGPPeer', { ...peer({ peerASN: 65001 }, { status: first }), metadata: { name: 'router-a', generation: 2 } }, peers, T1)!;
    expect(type(edited, 'Accepted')).toMatchObject({ status: 'True', observedGeneration: 2, lastTransitionTime: '2026-12-04T10:00:00Z' });
    const broken = announcementStatusFor('BGPPeer', peer({ myASN: 0 }, { status: first }), peers, T1)!;
    expect(type(broken, 'Accepted')).toMatchObject({ status: 'False', lastTransitionTime: '2026-12-04T10:05:00Z' });
  });

  it('an advertisement says whether the peers it names exist', () => {
    const adv = (names?: string[]): AnnouncementObject => ({ metadata: { name: 'a' }, spec: names ? { peers: names } : {} });
    expect(type(announcementStatusFor('BGPAdvertisement', adv(), peers, T0), 'ResolvedRefs')).toMatchObject({ status: 'True', message: 'it names no peer: every peer' });
    expect(type(announcementStatusFor('BGPAdvertisement', adv(['router-a']), peers, T0), 'ResolvedRefs')).toMatchObject({ status: 'True', reason: 'Resolved' });
    expect(type(announcementStatusFor('BGPAdvertisement', adv(['router-a', 'router-b']), peers, T0), 'ResolvedRefs')).toMatchObject({ status: 'False', reason: 'PeerNotFound', message: 'no BGPPeer named router-b' });
    expect(type(announcementStatusFor('BGPAdvertisement', adv(['router-b']), peers, T0), 'ResolvedRefs')?.message).toBe('no BGPPeer named router-b: the addresses it selects go to no peer');
    // The peer appears: the condition turns.
    const before = announcementStatusFor('BGPAdvertisement', adv(['router-b']), peers, T0)!;
    const after = announcementStatusFor('BGPAdvertisement', { ...adv(['router-b']), status: before }, new Set(['router-b']), T1)!;
    expect(type(after, 'ResolvedRefs')).toMatchObject({ status: 'True', lastTransitionTime: '2026-12-04T10:05:00Z' });
    expect(announcementStatusFor('BGPAdvertisement', { ...adv(['router-b']), status: after }, new Set(['router-b']), T1)).toBeUndefined();
    // An invalid advertisement has no ResolvedRefs (nothing of it is used); a stale one goes.
    const invalid = announcementStatusFor('BGPAdvertisement', { ...adv(['router-b']), spec: { peers: ['router-b'], localPref: -1 }, status: after }, peers, T1)!;
    expect(invalid.conditions.map((c) => `${c.type}=${c.status}`)).toEqual(['Accepted=False']);
  });

  it('conditions someone else wrote are kept; a hostile status is treated as none; messages are bounded', () => {
    const theirs = { type: 'example.com/Audited', status: 'True', reason: 'Ok', message: '', lastTransitionTime: '2026-01-01T00:00:00Z' };
    const s = announcementStatusFor('BGPPeer', peer({}, { status: { conditions: [theirs] } }), peers, T0)!;
    expect(s.conditions.map((c) => c.type)).toEqual(['Accepted', 'example.com/Audited']);
    for (const hostile of ['x', [1, null, 'y'], { type: 'Accepted' }]) {
      expect(type(announcementStatusFor('BGPPeer', peer({}, { status: { conditions: hostile } }), peers, T0), 'Accepted')).toMatchObject({ status: 'True' });
    }
    const long = announcementStatusFor('L2AnnouncementPolicy', { metadata: { name: 'p' }, spec: { interfaces: Array.from({ length: 32 }, (_, i) => `(${'x'.repeat(100)}${i}`) } }, peers, T0)!;
    expect(type(long, 'Accepted')!.message.length).toBeLessThanOrEqual(1024);
  });
});
