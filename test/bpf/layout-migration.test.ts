// Upgrades across map layouts, on real maps and programs. The previous release (layout 1,
// test/fixtures/releases) loads its datapath with its own code and opens flows through its
// own program; this build then loads over the same pins: conntrack and the reply bindings
// are converted (from layout 1 and 2 shapes, through every later one), the flows
// go on to the same backend through the same SNAT port, and a flow the old program opens
// while the new one loads is caught up once the new one is attached. Also: a resize keeps
// the entries; a layout this build cannot convert is refused with what to do.
import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ct4EntryCodec, ct4KeyCodec, DropReason, LAYOUT_VERSION, mapSpecs, type MapName } from '../../src/datapath/layouts.js';
import { layoutHistory } from '../../src/datapath/layout-history.js';
import { readServiceTable } from '../../src/datapath/service-table.js';
import { firstBackendsMatch } from '../../src/datapath/write-plan.js';
import { FLOW_IDENTITY_FIELDS } from '../../src/datapath/layout-migration.js';
import { openPinnedMap } from '../../src/ebpf/pinned.js';
import { monotonicNs } from '../../src/datapath/ct-gc.js';
import { Datapath, defaultObjectsDir } from '../../src/datapath/loader.js';
import { createMap, MapType } from '../../src/ebpf/map.js';
import { ErrorCode, FerryError } from '../../src/errors.js';
import { ifindexOf } from '../../src/ebpf/link-tc.js';
import { u32Codec, structCodec, type Codec } from '../../src/ebpf/codec.js';
import { inNetns } from '../../src/sys/netns.js';
import { buildPacket, eth, ipv4, tcp } from '../../src/packet/build.js';
import { TcVerdict } from '../../src/sandbox/packet-fixture.js';
import { CLIENT_IP, NODE_HASH_SEED, NODE_IP, NODE_MAC, OTHER_NODE_MAC, datapathNode, total, type DatapathNode } from '../../src/sandbox/datapath-node.js';
import { CLIENT_PORT, REMOTE_POD, TC_SERVICES, clientTcp, syn } from '../../src/sandbox/fixtures/tc.js';
import { startReleaseDatapath, unpackRelease, type ReleaseDatapath, type UnpackedRelease } from '../../src/sandbox/previous-release.js';
import { describeWith } from '../harness/requirements.js';

const REMOTE_NODEPORT = 30081;

/** Source and destination of a translated packet, as the backend's node sees it. */
function tuple(out: Buffer): string {
  const ip = (at: number) => [...out.subarray(at, at + 4)].join('.');
  return `${ip(26)}:${out.readUInt16BE(34)} → ${ip(30)}:${out.readUInt16BE(36)}`;
}
const ackFrom = (sport: number) => buildPacket(clientTcp(NODE_IP, REMOTE_NODEPORT, { sport, flags: 'A', seq: 1001 }));

let release: UnpackedRelease;
let node: DatapathNode;
let old: ReleaseDatapath;
/** What the old program made of flow 1's SYN; of flow 2's, sent after the new load. */
let firstSyn = '';
let secondSyn: { retval: number; data: Buffer };
/** Before the second pass: did the new conntrack have flow 2? */
let secondBeforeCatchUp = true;
const SECOND_PORT = CLIENT_PORT + 1;
/** The switch's deadline while it ran, and after; what the new program made of the backend's
 * answer to flow 2 before its binding was copied. */
let handoverInSwitch = 0n;
let handoverAfter = 1n;
let secondReplyInSwitch = 0;
let secondAckInSwitch = 0;
/** The backend's answer to a flow through `natPort`. */
const replyTo = (natPort: number) =>
  buildPacket([eth({ src: OTHER_NODE_MAC, dst: NODE_MAC }), ipv4({ src: REMOTE_POD, dst: NODE_IP, ttl: 63 }), tcp({ sport: 8080, dport: natPort, flags: 'SA', seq: 5000, ack: 1001 })]);

beforeAll(async () => {
  release = unpackRelease();
  node = await datapathNode({}, async (pinDir, host) => {
    // The previous agent's datapath, by its own code: loaded and pinned, Services written.
    // Its process stays, holding its programs, so that they can still see packets.
    old = await startReleaseDatapath(release, host, { pinDir, snatIPv4: NODE_IP, hashSeed: NODE_HASH_SEED });
    await old.apply(TC_SERVICES);
    const ifindex = inNetns(host.netns, () => ifindexOf('eth0'));
    const r = await old.run('tc_ingress', syn(NODE_IP, REMOTE_NODEPORT), ifindex);
    expect(r.retval).toBe(TcVerdict.REDIRECT);
    firstSyn = tuple(r.data);
  });
  node.writer.apply(TC_SERVICES);
  // The switch begins (the agent attaches the new programs after this first pass).
  node.dp.catchUpMigration();
  handoverInSwitch = node.dp.maps.ferry_handover.lookup(0)?.untilNs ?? 0n;
  // The old program still sees packets until the new one is attached.
  secondSyn = await old.run('tc_ingress', syn(NODE_IP, REMOTE_NODEPORT, { sport: SECOND_PORT }), node.ifindex);
  secondBeforeCatchUp = node.dp.maps.ct4.entries().some(([k]) => k.sport === SECOND_PORT);
  // The backend answers flow 2 at the new program before the last pass copied its binding.
  secondReplyInSwitch = node.run('tc_ingress', replyTo(secondSyn.data.readUInt16BE(34))).retval;
  // And the client's next segment, before its flow entry is copied.
  secondAckInSwitch = node.run('tc_ingress', ackFrom(SECOND_PORT)).retval;
  node.dp.completeMigration();
  handoverAfter = node.dp.maps.ferry_handover.lookup(0)?.untilNs ?? 1n;
}, 60_000);
afterAll(async () => {
  await old?.proc.stop();
  await node?.close();
  release?.remove();
});

describeWith(['root', 'bpffs', 'netns'], 'upgrading the pinned maps across layouts', () => {
  it('converts layout 1 conntrack, and a flow opened by the old program goes on through the new one', () => {
    expect(release.commit).toMatch(/^[0-9a-f]{7,40}$/);
    const ct = node.dp.migrated.find((m) => m.map === 'ct4');
    expect(ct).toMatchObject({ fromLayout: 1, copied: 1, caughtUp: 1, dropped: 0 });
    // Conntrack (layouts 2 and 4) and the reply bindings (layouts 3 and 4) changed shape, and
    // the master entries (layout 5: their first slots); the counters grew a slot (a resize,
    // layout unchanged); the backends became an array (another type, the same entries); the
    // per-CPU scratch grew the clock's copy (replaced empty); every other map was adopted as
    // it was.
    expect(node.dp.migrated.map((m) => m.map).sort()).toEqual(['ct4', 'ferry_scratch', 'ferry_stats', 'lb4_backends', 'lb4_services', 'nat4']);
    expect(node.dp.migrated.find((m) => m.map === 'ferry_scratch')).toMatchObject({ copied: 0, dropped: 0 });
    const services = node.dp.migrated.find((m) => m.map === 'lb4_services');
    expect(services).toMatchObject({ fromLayout: 4, dropped: 0 }); // the shape of layouts 1 to 4
    expect(services?.copied).toBeGreaterThan(TC_SERVICES.length);
    // Converted carrying no first slots, then written again by the agent's first sync.
    const masters = readServiceTable(node.dp.maps).frontends.filter((f) => f.backendIds.length > 0);
    expect(masters.length).toBeGreaterThan(0);
    expect(masters.filter((f) => !firstBackendsMatch(f.master, f.backendIds))).toEqual([]);
    const backends = node.dp.maps.lb4_backends.entries().length;
    expect(backends).toBeGreaterThan(1);
    expect(node.dp.migrated.find((m) => m.map === 'lb4_backends')).toMatchObject({ fromLayout: LAYOUT_VERSION, copied: backends, dropped: 0 });
    expect(node.dp.migrated.find((m) => m.map === 'nat4')).toMatchObject({ fromLayout: 2, copied: 1, caughtUp: 1, dropped: 0 });
    expect(node.dp.migrated.find((m) => m.map === 'ferry_stats')).toMatchObject({ fromLayout: LAYOUT_VERSION, dropped: 0 });
    expect(node.dp.tc.pinReport.adopted).toContain('lb4_reverse_nat');
    expect(readdirSync(node.pinDir).filter((f) => f.endsWith('_next'))).toEqual([]);

    const flows = node.dp.maps.ct4.entries();
    const first = flows.find(([k]) => k.sport === CLIENT_PORT);
    expect(first).toBeDefined();
    const [key, entry] = first!;
    expect(key).toMatchObject({ sport: CLIENT_PORT, dport: REMOTE_NODEPORT });
    expect(entry).toMatchObject({ ifindex: 0, natAddr: NODE_IP, natPort: CLIENT_PORT, hopIfindex: 0 });

    expect(firstSyn).toBe(`${NODE_IP}:${CLIENT_PORT} → ${REMOTE_POD}:8080`);
    const r = node.run('tc_ingress', ackFrom(CLIENT_PORT));
    expect(r.retval).toBe(TcVerdict.REDIRECT);
    expect(tuple(r.data)).toBe(firstSyn);
    // The converted flow kept no next hop (layout 4): the first packet through the new program looked it up.
    expect(node.dp.maps.ct4.lookup(key)?.hopIfindex).toBe(node.ifindex);
    // The old program's reply binding, converted, takes the backend's answer back.
    const binding = node.dp.maps.nat4.entries().find(([k]) => k.dport === CLIENT_PORT);
    expect(binding?.[1]).toMatchObject({ clientPort: CLIENT_PORT, frontendPort: REMOTE_NODEPORT, pendingPort: 0, hopIfindex: 0 });
    const back = node.run('tc_ingress', buildPacket([eth({ src: OTHER_NODE_MAC, dst: NODE_MAC }), ipv4({ src: REMOTE_POD, dst: NODE_IP, ttl: 63, id: 7 }), tcp({ sport: 8080, dport: CLIENT_PORT, flags: 'SA', seq: 5000, ack: 1001 })]));
    expect(back.retval).toBe(TcVerdict.REDIRECT);
    expect(tuple(back.data)).toBe(`${NODE_IP}:${REMOTE_NODEPORT} → ${CLIENT_IP}:${CLIENT_PORT}`);
  });

  it('catches up a flow the old program opened while the new one loaded', () => {
    expect(secondSyn.retval).toBe(TcVerdict.REDIRECT);
    expect(secondBeforeCatchUp).toBe(false);
    expect(node.dp.migrated.find((m) => m.map === 'ct4')).toMatchObject({ caughtUp: 1, dropped: 0 });
    const next = node.run('tc_ingress', ackFrom(SECOND_PORT));
    expect(tuple(next.data)).toBe(tuple(secondSyn.data));
    // Its answer in the switch was dropped (not handed to the host, which would have reset
    // the backend's end); sent again after the last pass, it goes back to the client.
    expect(handoverInSwitch).toBeGreaterThan(monotonicNs());
    expect(secondReplyInSwitch).toBe(TcVerdict.SHOT);
    // Its client's next segment, before its flow entry was copied: dropped too, not
    // balanced afresh (onto a port the backend does not know).
    expect(secondAckInSwitch).toBe(TcVerdict.SHOT);
    expect(total(node.dp, 'ferry_drops', DropReason.DROP_HANDOVER_UNBOUND)).toBe(2n);
    expect(handoverAfter).toBe(0n);
    const again = node.run('tc_ingress', replyTo(secondSyn.data.readUInt16BE(34)));
    expect(again.retval).toBe(TcVerdict.REDIRECT);
    expect(tuple(again.data)).toBe(`${NODE_IP}:${REMOTE_NODEPORT} → ${CLIENT_IP}:${SECOND_PORT}`);
    // A flow the new program opens records the device it came in on.
    node.run('tc_ingress', syn(NODE_IP, REMOTE_NODEPORT, { sport: CLIENT_PORT + 2 }));
    const fresh = node.dp.maps.ct4.entries().find(([k]) => k.sport === CLIENT_PORT + 2);
    expect(fresh?.[1].ifindex).toBe(node.ifindex);
  });
});

describeWith(['root', 'bpffs'], 'resizing and refusing pinned maps', () => {
  const pinDir = join('/sys/fs/bpf', `ferry-layout-${process.pid}`);
  const load = (conntrack: number) => Datapath.load({ objectsDir: defaultObjectsDir(), pinDir, snatIPv4: '10.0.0.1', mapSizes: { conntrack } });

  it('a new conntrack size keeps every flow', () => {
    mkdirSync(pinDir);
    try {
      const first = load(4096);
      const entry = { expiresNs: 1n, createdNs: 1n, backendId: 3, revNatId: 4, natAddr: '10.0.0.1', natPort: 1024, flags: 2, tcpFlags: 2, packets: 1n, bytes: 60n, clientSeqNext: 7, ifindex: 9, hopIfindex: 9, hopMacs: Buffer.from('020000000001020000000002', 'hex') };
      for (let i = 0; i < 100; i++) first.maps.ct4.update({ saddr: '10.1.0.1', daddr: '10.2.0.1', sport: 1000 + i, dport: 80, proto: 6 }, entry);
      // IPv6 flows live in ct6, sized by the same setting.
      const key6 = { saddr: 'fd00:10::2', daddr: 'fd00:100::10', sport: 20000, dport: 80, proto: 6, dir: 0 };
      const entry6 = { expiresNs: 5n, addr: 'fd00:244:1::5', port: 8080, flags: 1, natPort: 0 };
      first.maps.ct6.update(key6, entry6);
      first.release();
      const second = load(8192);
      try {
        expect(second.migrated).toEqual([
          { map: 'ct4', fromLayout: LAYOUT_VERSION, copied: 100, caughtUp: 0, dropped: 0 },
          { map: 'ct6', fromLayout: LAYOUT_VERSION, copied: 1, caughtUp: 0, dropped: 0 },
        ]);
        expect(second.maps.ct4.maxEntries).toBe(8192);
        expect(second.maps.ct6.maxEntries).toBe(8192);
        expect(second.maps.ct6.lookup(key6)).toEqual(entry6);
        expect(second.maps.ct4.entries()).toHaveLength(100);
        expect(second.maps.ct4.lookup({ saddr: '10.1.0.1', daddr: '10.2.0.1', sport: 1042, dport: 80, proto: 6 })).toEqual(entry);
      } finally {
        second.close();
      }
    } finally {
      rmSync(pinDir, { recursive: true, force: true });
    }
  });

  it('a catch-up pass copies again a key the old programs made another flow since its copy, unless the new programs made it theirs', () => {
    mkdirSync(pinDir);
    try {
      const first = load(4096);
      const entry = { expiresNs: 1n, createdNs: 1n, backendId: 3, revNatId: 4, natAddr: '10.0.0.1', natPort: 1024, flags: 2, tcpFlags: 2, packets: 1n, bytes: 60n, clientSeqNext: 7, ifindex: 9, hopIfindex: 0, hopMacs: Buffer.alloc(12) };
      const key = (sport: number) => ({ saddr: '10.1.0.1', daddr: '10.2.0.1', sport, dport: 80, proto: 6 });
      for (const sport of [1000, 1001, 1002]) first.maps.ct4.update(key(sport), entry);
      first.release();
      // The old programs' map, as they go on using it while the new build loads.
      const old = openPinnedMap(join(pinDir, 'ct4'), ct4KeyCodec, ct4EntryCodec);
      const second = load(8192);
      try {
        expect(second.migrated).toEqual([{ map: 'ct4', fromLayout: LAYOUT_VERSION, copied: 3, caughtUp: 0, dropped: 0 }, { map: 'ct6', fromLayout: LAYOUT_VERSION, copied: 0, caughtUp: 0, dropped: 0 }]);
        // 1000: the client reopened it; the old programs wrote the new flow over the old.
        const reopened = { ...entry, createdNs: 5n, backendId: 7, natPort: 2000, packets: 1n };
        old.update(key(1000), reopened);
        // 1001: the same flow went on at the old programs (counters); the new programs
        // counted its packets too: theirs stands.
        old.update(key(1001), { ...entry, packets: 50n });
        second.maps.ct4.update(key(1001), { ...entry, packets: 99n });
        // 1002: reused at the old programs, but the new programs made it a flow of their own.
        old.update(key(1002), { ...entry, createdNs: 6n });
        second.maps.ct4.update(key(1002), { ...entry, createdNs: 8n, backendId: 5 });
        second.catchUpMigration();
        second.completeMigration();
        expect(second.maps.ct4.lookup(key(1000))).toEqual(reopened);
        expect(second.maps.ct4.lookup(key(1001))?.packets).toBe(99n);
        expect(second.maps.ct4.lookup(key(1002))).toMatchObject({ createdNs: 8n, backendId: 5 });
        expect(second.migrated).toEqual([{ map: 'ct4', fromLayout: LAYOUT_VERSION, copied: 3, caughtUp: 1, dropped: 0 }, { map: 'ct6', fromLayout: LAYOUT_VERSION, copied: 0, caughtUp: 0, dropped: 0 }]);
      } finally {
        old.close();
        second.close();
      }
    } finally {
      rmSync(pinDir, { recursive: true, force: true });
    }
  });

  it('a layout 5 IPv6 flow becomes a layout 6 one of the same size, with no SNAT port', () => {
    const [v5] = layoutHistory.ct6!;
    expect(v5!.version).toBe(5);
    const key = { saddr: 'fd00:10::2', daddr: 'fd00:100::10', sport: 20000, dport: 80, proto: 6, dir: 0 };
    const old = { expiresNs: 5n, addr: 'fd00:244:1::5', port: 8080, flags: 1 };
    const bytes = v5!.value.encode(old);
    expect(bytes.length).toBe(mapSpecs.ct6.value.size);
    const { value } = v5!.upgrade(key, v5!.value.decode(bytes));
    expect(mapSpecs.ct6.value.decode(mapSpecs.ct6.value.encode(value as never))).toEqual({ ...old, natPort: 0 });
  });

  it('the fields that tell one flow from another have their names in every past layout (old entries are judged unconverted)', () => {
    for (const [map, fields] of Object.entries(FLOW_IDENTITY_FIELDS)) {
      const codecs = [mapSpecs[map as MapName].value as Codec<unknown>, ...(layoutHistory[map as MapName] ?? []).map((l) => l.value)];
      // nat6 came with layout 6 and has no past layout yet; the others have.
      expect(codecs.length, map).toBeGreaterThan(map === 'nat6' ? 0 : 1);
      for (const codec of codecs) for (const f of fields!) expect(codec.offsetOf?.(f), `${map} ${codec.size} bytes: ${f}`).toBeTypeOf('number');
    }
  });

  it('scratch space of another layout is replaced empty, not refused (it lives for one packet)', () => {
    mkdirSync(pinDir);
    try {
      // A new flow's per-CPU slot as an older build could have left it: another struct,
      // and no BTF to convert from.
      const older = createMap({ type: MapType.PercpuArray, name: 'ct4_fresh', key: u32Codec, value: structCodec('older', { a: { type: 'u64' } }), maxEntries: 1 });
      older.pin(join(pinDir, 'ct4_fresh'));
      older.close();
      const dp = load(4096);
      try {
        expect(dp.migrated).toEqual([{ map: 'ct4_fresh', fromLayout: LAYOUT_VERSION, copied: 0, caughtUp: 0, dropped: 0 }]);
        expect(dp.maps.ct4_fresh.info.valueSize).toBe(ct4EntryCodec.size);
        const pinned = openPinnedMap(join(pinDir, 'ct4_fresh'), u32Codec, ct4EntryCodec);
        expect(pinned.info.valueSize).toBe(ct4EntryCodec.size);
        pinned.close();
      } finally {
        dp.close();
      }
    } finally {
      rmSync(pinDir, { recursive: true, force: true });
    }
  });

  it('a layout it cannot convert is refused, with what to do, and nothing is changed', () => {
    mkdirSync(pinDir);
    try {
      // A conntrack map of a shape no ferry made.
      const alien = createMap({ type: MapType.LruHash, name: 'ct4', key: u32Codec, value: structCodec('alien', { a: { type: 'u64' } }), maxEntries: 16 });
      alien.update(1, { a: 5n });
      alien.pin(join(pinDir, 'ct4'));
      alien.close();
      let err: unknown;
      try {
        load(4096).close();
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(FerryError);
      expect((err as FerryError).code).toBe(ErrorCode.Layout);
      expect((err as FerryError).message).toMatch(/upgrade pinned map .*ct4: .*(no BTF|neither layout).*ferry uninstall --yes/s);
      expect(readdirSync(pinDir).filter((f) => f.endsWith('_next'))).toEqual([]);
    } finally {
      rmSync(pinDir, { recursive: true, force: true });
    }
  });
});
