// LB-IPAM's allocator, as tables: pools (blocks, edges, overlaps), selectors, requests,
// sharing, exhaustion, stickiness and release.
import { describe, expect, it } from 'vitest';
import { allocate, type ServiceInput } from '../../src/ipam/allocator.js';
import { parsePool, resolvePools, type PoolInput, type PoolSpec } from '../../src/ipam/pool.js';
import { selectorMatches } from '../../src/ipam/selector.js';
import { poolInput } from '../../src/ipam/pool-resource.js';
import { poolRows } from '../../src/ipam/lb-view.js';
import { isOurs, serviceInput } from '../../src/ipam/service-request.js';

// Creation times that only grow (a wrap-around would make a later object the older).
let clock = 0;
const tick = (base: number) => new Date(base + clock++ * 1000).toISOString();
const pool = (name: string, spec: PoolSpec, created = tick(Date.UTC(2026, 0, 1))): PoolInput => ({ name, created, spec });
const svc = (key: string, o: Partial<ServiceInput> = {}): ServiceInput => ({
  key, namespace: key.split('/')[0]!, created: o.created ?? tick(Date.UTC(2026, 1, 1)),
  labels: { 'ferry.dev/service-namespace': key.split('/')[0]!, 'ferry.dev/service-name': key.split('/')[1]!, ...o.labels },
  requestedIPs: [], ports: ['TCP/80'], etpLocal: false, selector: 'app=x', current: [], ...o,
});
const outcome = (r: ReturnType<typeof allocate>, key: string) => {
  const o = r.services.get(key)!;
  return [o.reason, o.ips.join(',')];
};

describe('pools', () => {
  it.each([
    ['a /24 skips .0 and .255', { blocks: [{ cidr: '10.0.100.0/24' }] }, 254, []],
    ['allowFirstLastIPs keeps them', { blocks: [{ cidr: '10.0.100.0/24' }], allowFirstLastIPs: true }, 256, []],
    ['a range across two /24s', { blocks: [{ start: '10.0.100.250', stop: '10.0.101.5' }] }, 10, []],
    ['a /23 skips four edges', { blocks: [{ cidr: '10.0.100.0/23' }] }, 508, []],
    ['not a network', { blocks: [{ cidr: '10.0.100.5/24' }] }, 0, ['"10.0.100.5/24" is not a network: host bits are set (did you mean 10.0.100.0/24?)']],
    ['start after stop', { blocks: [{ start: '10.0.100.9', stop: '10.0.100.1' }] }, 0, ['block 10.0.100.9-10.0.100.1: start is after stop']],
    ['garbage', { blocks: [{ cidr: 'ten/8' }] }, 0, ['"ten/8" is not an IPv4 CIDR']],
    ['no blocks', { blocks: [] }, 0, ['no blocks']],
    ['blocks overlapping each other', { blocks: [{ cidr: '10.0.100.0/24' }, { start: '10.0.100.10', stop: '10.0.100.20' }] }, 0, ['blocks overlap at 10.0.100.10']],
    ['an IPv6 block is kept, and gives nothing yet', { blocks: [{ cidr: 'fd00::/120' }, { cidr: '10.0.100.0/30' }] }, 3, []],
    ['a priority that is no integer', { blocks: [{ cidr: '10.0.100.0/30' }], priority: 1.5 }, 0, ['priority 1.5: an integer from 0 to 2147483647 (1 is tried first; 0 or none after every pool with a priority)']],
    ['a priority of the wrong type (a pool from before the schema)', { blocks: [{ cidr: '10.0.100.0/30' }], priority: 'high' }, 0, ['priority "high": an integer from 0 to 2147483647 (1 is tried first; 0 or none after every pool with a priority)']],
    ['a negative priority', { blocks: [{ cidr: '10.0.100.0/30' }], priority: -3 }, 0, ['priority -3: an integer from 0 to 2147483647 (1 is tried first; 0 or none after every pool with a priority)']],
    ['a malformed namespaceSelector', { blocks: [{ cidr: '10.0.100.0/30' }], namespaceSelector: { matchExpressions: [{ key: 'team', operator: 'In' }] } }, 0, ['namespaceSelector: matchExpressions: team In needs values']],
    ['serviceSelectors that is no list', { blocks: [{ cidr: '10.0.100.0/30' }], serviceSelectors: { matchLabels: { tier: 'web' } } }, 0, ['serviceSelectors: must be a list of selectors']],
    ['a malformed selector among namespaceSelectors', { blocks: [{ cidr: '10.0.100.0/30' }], namespaceSelectors: [{ matchLabels: { team: 'a' } }, { matchExpressions: [{ key: 'team', operator: 'In' }] }] }, 0, ['namespaceSelectors[1]: matchExpressions: team In needs values']],
    ['more serviceSelectors than a pool may hold', { blocks: [{ cidr: '10.0.100.0/30' }], serviceSelectors: Array.from({ length: 17 }, (_, i) => ({ matchLabels: { tier: String(i) } })) }, 0, ['serviceSelectors: 17 selectors, at most 16']],
  ])('%s', (_what, spec, total, errors) => {
    const p = parsePool(pool('p', spec as PoolSpec));
    expect(p.total).toBe(total);
    expect(p.errors).toEqual(errors);
  });

  it('the resource reader passes a priority on, of any type, for the pool to judge', () => {
    const read = (priority: unknown) => parsePool(poolInput({ metadata: { name: 'p', creationTimestamp: '2026-01-01T00:00:00Z' }, spec: { blocks: [{ cidr: '10.0.100.0/30' }], priority } as never }));
    expect(read(7)).toMatchObject({ priority: 7, errors: [] });
    expect(read(undefined)).toMatchObject({ priority: 0, errors: [] });
    expect(read({ high: true })).toMatchObject({ priority: 0, total: 0, errors: [expect.stringMatching(/^priority \{"high":true\}: an integer/)] });
  });

  it('a pool that overlaps an older one is in conflict; the older wins', () => {
    const [a, b, c] = resolvePools([pool('new', { blocks: [{ cidr: '10.0.100.128/25' }] }, '2026-03-01T00:00:00Z'), pool('old', { blocks: [{ cidr: '10.0.100.0/24' }] }, '2026-01-01T00:00:00Z'), pool('other', { blocks: [{ cidr: '10.0.101.0/24' }] }, '2026-02-01T00:00:00Z')]);
    expect([a!.name, a!.conflictWith]).toEqual(['old', undefined]);
    expect([b!.name, b!.conflictWith]).toEqual(['other', undefined]);
    expect([c!.name, c!.conflictWith]).toEqual(['new', 'old']);
  });
});

describe('selectors', () => {
  it.each([
    [undefined, { a: '1' }, true],
    [{ matchLabels: { team: 'web' } }, { team: 'web' }, true],
    [{ matchLabels: { team: 'web' } }, { team: 'db' }, false],
    [{ matchExpressions: [{ key: 'ferry.dev/service-namespace', operator: 'In', values: ['prod'] }] }, { 'ferry.dev/service-namespace': 'prod' }, true],
    [{ matchExpressions: [{ key: 'tier', operator: 'NotIn', values: ['x'] }] }, {}, true],
    [{ matchExpressions: [{ key: 'tier', operator: 'Exists' }] }, {}, false],
    [{ matchExpressions: [{ key: 'tier', operator: 'DoesNotExist' }] }, {}, true],
    [{ matchExpressions: [{ key: 'tier', operator: 'Bogus' }] }, { tier: 'a' }, false],
  ])('%j on %j → %s', (sel, labels, want) => {
    expect(selectorMatches(sel as never, labels)).toBe(want);
  });
});

describe('allocation', () => {
  const p24 = pool('default', { blocks: [{ cidr: '10.0.100.0/24' }] });

  it('gives the lowest free address, skipping .0, oldest Service first', () => {
    const r = allocate([p24], [svc('d/b', { created: '2026-02-01T00:00:02Z' }), svc('d/a', { created: '2026-02-01T00:00:01Z' })]);
    expect(outcome(r, 'd/a')).toEqual(['Allocated', '10.0.100.1']);
    expect(outcome(r, 'd/b')).toEqual(['Allocated', '10.0.100.2']);
    expect(r.pools.get('default')).toMatchObject({ total: 254, used: 2, available: 252 });
  });

  it('is sticky: what a Service holds stays, even if a lower address is free', () => {
    const r = allocate([p24], [svc('d/a', { current: ['10.0.100.77'] }), svc('d/b')]);
    expect(outcome(r, 'd/a')).toEqual(['Allocated', '10.0.100.77']);
    expect(outcome(r, 'd/b')).toEqual(['Allocated', '10.0.100.1']);
  });

  it.each<[string, Partial<ServiceInput>, PoolInput[], string, string]>([
    ['a requested free address', { requestedIPs: ['10.0.100.50'] }, [p24], 'Allocated', '10.0.100.50'],
    ['a requested address outside every pool', { requestedIPs: ['192.0.2.1'] }, [p24], 'RequestedIPUnavailable', ''],
    ['a requested .255 (not handed out)', { requestedIPs: ['10.0.100.255'] }, [p24], 'RequestedIPUnavailable', ''],
    ['a pool that does not exist', { requestedPool: 'nope' }, [p24], 'NoPool', ''],
    ['no pool selects it', { labels: { team: 'db' } }, [pool('web', { blocks: [{ cidr: '10.0.101.0/24' }], serviceSelector: { matchLabels: { team: 'web' } } })], 'NoPool', ''],
    ['a named pool that does not select it', { requestedPool: 'web' }, [pool('web', { blocks: [{ cidr: '10.0.101.0/24' }], serviceSelector: { matchLabels: { team: 'web' } } })], 'SelectorMismatch', ''],
    ['a pool without autoAssign, named', { requestedPool: 'manual' }, [pool('manual', { blocks: [{ cidr: '10.0.102.0/24' }], autoAssign: false })], 'Allocated', '10.0.102.1'],
    ['a pool without autoAssign, not named', {}, [pool('manual', { blocks: [{ cidr: '10.0.102.0/24' }], autoAssign: false })], 'NoPool', ''],
    ['a disabled pool gives nothing new', {}, [pool('off', { blocks: [{ cidr: '10.0.103.0/24' }], disabled: true })], 'NoPool', ''],
    ['an unreadable request', { requestError: '"10.0.100" is not an IP address' }, [p24], 'RequestedIPUnavailable', ''],
  ])('%s', (_what, o, pools, reason, ips) => {
    expect(outcome(allocate(pools, [svc('d/a', o)]), 'd/a')).toEqual([reason, ips]);
  });

  it('a pool with a serviceSelector comes before a pool for everyone, whatever their age', () => {
    const everyone = pool('everyone', { blocks: [{ cidr: '10.0.100.0/24' }] }, '2026-01-01T00:00:00Z');
    const web = pool('web', { blocks: [{ cidr: '10.0.101.0/24' }], serviceSelector: { matchLabels: { tier: 'web' } } }, '2026-01-02T00:00:00Z');
    const r = allocate([everyone, web], [svc('d/web', { labels: { tier: 'web' } }), svc('d/other')]);
    expect(outcome(r, 'd/web')).toEqual(['Allocated', '10.0.101.1']);
    expect(outcome(r, 'd/other')).toEqual(['Allocated', '10.0.100.1']);
    // When the selective pool is full, the pool for everyone serves.
    const full = allocate([everyone, pool('one', { blocks: [{ start: '10.0.101.1', stop: '10.0.101.1' }], serviceSelector: { matchLabels: { tier: 'web' } } })], [svc('d/w1', { labels: { tier: 'web' } }), svc('d/w2', { labels: { tier: 'web' } })]);
    expect(outcome(full, 'd/w1')).toEqual(['Allocated', '10.0.101.1']);
    expect(outcome(full, 'd/w2')).toEqual(['Allocated', '10.0.100.1']);
  });

  it('pools are tried by priority (1 first, 0 or none last), then selective before for-everyone, then the older', () => {
    const t = (n: number) => `2026-01-0${n}T00:00:00Z`;
    const block = (third: number) => ({ blocks: [{ start: `10.0.${third}.1`, stop: `10.0.${third}.1` }] });
    const web = { serviceSelector: { matchLabels: { tier: 'web' } } };
    // Oldest first in the input; each pool holds one address, so the order shows in who gets which.
    const pools = [
      pool('old-everyone', block(100), t(1)),
      pool('old-web', { ...block(101), ...web }, t(2)),
      pool('zero-web', { ...block(102), ...web, priority: 0 }, t(3)),
      pool('prio-20', block(103), t(4)),
      pool('prio-10-everyone', { ...block(104), priority: 10 }, t(5)),
      pool('prio-10-web', { ...block(105), ...web, priority: 10 }, t(6)),
      pool('prio-20-everyone', { ...block(106), priority: 20 }, t(7)),
    ];
    pools[3]!.spec.priority = 20;
    const services = Array.from({ length: 8 }, (_, i) => svc(`d/s${i}`, { created: `2026-02-01T00:00:0${i}Z`, labels: { tier: 'web' } }));
    const r = allocate(pools, services);
    expect(services.map((s) => r.services.get(s.key)!.pool ?? r.services.get(s.key)!.reason)).toEqual([
      'prio-10-web', 'prio-10-everyone', // priority 10: the selective pool first, though younger
      'prio-20', 'prio-20-everyone', // priority 20: both for everyone, the older first
      'old-web', 'zero-web', 'old-everyone', // none or 0: selective (older first), then for everyone
      'PoolExhausted',
    ]);
    // A Service the prioritized pools do not select gets the first of the rest that does.
    const other = allocate(pools, [svc('d/db', { labels: { tier: 'db' } })]);
    expect(other.services.get('d/db')!.pool).toBe('prio-10-everyone');
    // A priority moves no address already given.
    const kept = allocate(pools, [svc('d/held', { labels: { tier: 'web' }, current: ['10.0.100.1'] })]);
    expect(outcome(kept, 'd/held')).toEqual(['Allocated', '10.0.100.1']);
  });

  it("a namespaceSelector matches the labels of the Service's namespace, with the serviceSelector", () => {
    const everyone = pool('everyone', { blocks: [{ cidr: '10.0.100.0/24' }] }, '2026-01-01T00:00:00Z');
    const teamA = pool('team-a', { blocks: [{ cidr: '10.0.101.0/24' }], namespaceSelector: { matchLabels: { team: 'a' } } }, '2026-01-02T00:00:00Z');
    const teamAWeb = pool('team-a-web', { blocks: [{ cidr: '10.0.102.0/24' }], namespaceSelector: { matchLabels: { team: 'a' } }, serviceSelector: { matchLabels: { tier: 'web' } }, priority: 1 }, '2026-01-03T00:00:00Z');
    const r = allocate([everyone, teamA, teamAWeb], [
      svc('a1/db', { namespaceLabels: { team: 'a' } }),
      svc('a2/web', { namespaceLabels: { team: 'a' }, labels: { tier: 'web' } }),
      svc('b/web', { namespaceLabels: { team: 'b' }, labels: { tier: 'web' } }),
      svc('unknown/db'), // a namespace not (yet) known: no labels
      svc('b/asks', { namespaceLabels: { team: 'b' }, requestedPool: 'team-a' }),
    ]);
    expect(outcome(r, 'a1/db')).toEqual(['Allocated', '10.0.101.1']); // selective (by namespace) before the pool for everyone
    expect(outcome(r, 'a2/web')).toEqual(['Allocated', '10.0.102.1']); // both selectors match
    expect(outcome(r, 'b/web')).toEqual(['Allocated', '10.0.100.1']);
    // Its namespace's event not in yet: it waits rather than take an address that would stick.
    expect(r.services.get('unknown/db')).toMatchObject({ reason: 'NamespacePending', message: 'namespace unknown is not known yet, and a pool selects by namespace labels' });
    expect(r.services.get('b/asks')).toMatchObject({ reason: 'SelectorMismatch', message: 'pool team-a does not select this Service' });
    // The namespace loses its label: the address goes back, and the Service gets one it may have.
    const relabelled = allocate([everyone, teamA], [svc('a1/db', { namespaceLabels: { team: 'c' }, current: ['10.0.101.1'] })]);
    expect(relabelled.released).toEqual([{ service: 'a1/db', ip: '10.0.101.1', why: 'pool team-a does not select the Service any more' }]);
    expect(outcome(relabelled, 'a1/db')).toEqual(['Allocated', '10.0.100.1']);
    // An unknown namespace: what the Service holds stays; a named pool that selects by
    // namespace waits; where no pool selects by namespace, nothing waits.
    const unknown = allocate([everyone, teamA], [svc('x/held', { current: ['10.0.101.1'] }), svc('x/named', { requestedPool: 'team-a' })]);
    expect(unknown.released).toEqual([]);
    expect(outcome(unknown, 'x/held')).toEqual(['Allocated', '10.0.101.1']);
    expect(outcome(unknown, 'x/named')).toEqual(['NamespacePending', '']);
    expect(outcome(allocate([everyone], [svc('x/plain')]), 'x/plain')).toEqual(['Allocated', '10.0.100.1']);
  });

  it('serviceSelectors and namespaceSelectors: any of each list, and the single selectors as well', () => {
    const everyone = pool('everyone', { blocks: [{ cidr: '10.0.100.0/24' }] }, '2026-01-01T00:00:00Z');
    const front = pool('front', {
      blocks: [{ cidr: '10.0.101.0/24' }],
      serviceSelector: { matchExpressions: [{ key: 'internal', operator: 'DoesNotExist' }] },
      serviceSelectors: [{ matchLabels: { tier: 'web' } }, { matchLabels: { tier: 'api' } }],
      namespaceSelectors: [{ matchLabels: { team: 'a' } }, { matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: ['shop'] }] }],
    }, '2026-01-02T00:00:00Z');
    const r = allocate([everyone, front], [
      svc('a/web', { namespaceLabels: { team: 'a' }, labels: { tier: 'web' } }),
      svc('shop/api', { namespaceLabels: { 'kubernetes.io/metadata.name': 'shop' }, labels: { tier: 'api' } }),
      svc('a/db', { namespaceLabels: { team: 'a' }, labels: { tier: 'db' } }), // no serviceSelectors match
      svc('b/web', { namespaceLabels: { team: 'b' }, labels: { tier: 'web' } }), // no namespaceSelectors match
      svc('a/inner', { namespaceLabels: { team: 'a' }, labels: { tier: 'web', internal: 'yes' } }), // the serviceSelector does not
      svc('later/web', { labels: { tier: 'web' } }), // its namespace not known yet
    ]);
    expect(outcome(r, 'a/web')).toEqual(['Allocated', '10.0.101.1']);
    expect(outcome(r, 'shop/api')).toEqual(['Allocated', '10.0.101.2']);
    expect(outcome(r, 'a/db')).toEqual(['Allocated', '10.0.100.1']);
    expect(outcome(r, 'b/web')).toEqual(['Allocated', '10.0.100.2']);
    expect(outcome(r, 'a/inner')).toEqual(['Allocated', '10.0.100.3']);
    expect(outcome(r, 'later/web')).toEqual(['NamespacePending', '']);
    // A list holding an empty selector selects every Service: such a pool is not tried
    // before the older pool for everyone; with only narrowing selectors it is.
    const loose = pool('loose', { blocks: [{ cidr: '10.0.102.0/24' }], serviceSelectors: [{}, { matchLabels: { tier: 'web' } }] }, '2026-01-03T00:00:00Z');
    const narrow = pool('narrow', { blocks: [{ cidr: '10.0.103.0/24' }], serviceSelectors: [{ matchLabels: { tier: 'web' } }] }, '2026-01-04T00:00:00Z');
    expect(outcome(allocate([everyone, loose], [svc('x/web', { labels: { tier: 'web' } })]), 'x/web')).toEqual(['Allocated', '10.0.100.1']);
    expect(outcome(allocate([everyone, narrow], [svc('x/web', { labels: { tier: 'web' } })]), 'x/web')).toEqual(['Allocated', '10.0.103.1']);
  });

  it('ferry lb pools names every selector: the single ones, and each list as "one of"', () => {
    const rows = poolRows([{ metadata: { name: 'p' }, spec: { blocks: [{ cidr: '10.0.100.0/24' }], serviceSelector: { matchLabels: { tier: 'web' } }, serviceSelectors: [{ matchLabels: { a: '1' } }, { matchExpressions: [{ key: 'b', operator: 'Exists' }] }], namespaceSelectors: [{ matchLabels: { team: 'x' } }, {}] } } as never]);
    expect(rows[0]!.selector).toBe('tier=web, one of {a=1} {b Exists}, namespace one of {team=x} {any}');
    expect(poolRows([{ metadata: { name: 'q' }, spec: { blocks: [{ cidr: '10.0.101.0/24' }] } } as never])[0]!.selector).toBe('(every Service)');
    // A pool no schema checked (written before it, or to a server without it) is shown, not a crash.
    const odd = poolRows([{ metadata: { name: 'r' }, spec: { blocks: [], serviceSelector: { matchExpressions: 'tier' }, serviceSelectors: [5, null, { matchLabels: 'x' }] } } as never]);
    expect(odd[0]!.selector).toBe('one of {any} {any} {any}');
  });

  it('the resource reader passes selector lists on, cut to one more than a pool may hold', () => {
    const read = (serviceSelectors: unknown) => parsePool(poolInput({ metadata: { name: 'p', creationTimestamp: '2026-01-01T00:00:00Z' }, spec: { blocks: [{ cidr: '10.0.100.0/30' }], serviceSelectors } as never }));
    expect(read([{ matchLabels: { tier: 'web' } }]).serviceSelectors).toEqual([{ matchLabels: { tier: 'web' } }]);
    expect(read(Array.from({ length: 5000 }, () => ({}))).errors).toEqual(['serviceSelectors: 17 selectors, at most 16']);
    expect(read('web').errors).toEqual(['serviceSelectors: must be a list of selectors']);
  });

  it('a requested address in use by another Service is not taken from it', () => {
    const r = allocate([p24], [svc('d/first', { current: ['10.0.100.5'] }), svc('d/second', { requestedIPs: ['10.0.100.5'] })]);
    expect(outcome(r, 'd/first')).toEqual(['Allocated', '10.0.100.5']);
    expect(r.services.get('d/second')).toMatchObject({ reason: 'RequestedIPUnavailable', message: "10.0.100.5 is d/first's alone (no sharing key)" });
  });

  it('a disabled pool keeps what it gave', () => {
    const r = allocate([pool('off', { blocks: [{ cidr: '10.0.103.0/24' }], disabled: true })], [svc('d/a', { current: ['10.0.103.9'] })]);
    expect(outcome(r, 'd/a')).toEqual(['Allocated', '10.0.103.9']);
  });

  it('the pool runs out, then grows: the waiting Service gets an address', () => {
    const tiny = (stop: string) => pool('tiny', { blocks: [{ start: '10.0.100.1', stop }] }, '2026-01-01T00:00:00Z');
    const services = [svc('d/a', { created: '2026-02-01T00:00:01Z' }), svc('d/b', { created: '2026-02-01T00:00:02Z' })];
    const first = allocate([tiny('10.0.100.1')], services);
    expect(outcome(first, 'd/b')).toEqual(['PoolExhausted', '']);
    const grown = allocate([tiny('10.0.100.2')], [{ ...services[0]!, current: ['10.0.100.1'] }, services[1]!]);
    expect(outcome(grown, 'd/a')).toEqual(['Allocated', '10.0.100.1']);
    expect(outcome(grown, 'd/b')).toEqual(['Allocated', '10.0.100.2']);
  });

  it('an address that falls out of every pool is released, and the Service gets a new one', () => {
    const r = allocate([pool('small', { blocks: [{ cidr: '10.0.100.0/25' }] })], [svc('d/a', { current: ['10.0.100.200'] })]);
    expect(r.released).toEqual([{ service: 'd/a', ip: '10.0.100.200', why: 'no pool holds it any more' }]);
    expect(outcome(r, 'd/a')).toEqual(['Allocated', '10.0.100.1']);
  });

  it('a Service that now names another pool moves to it', () => {
    const pools = [pool('a', { blocks: [{ cidr: '10.0.100.0/24' }] }), pool('b', { blocks: [{ cidr: '10.0.101.0/24' }] })];
    const r = allocate(pools, [svc('d/x', { current: ['10.0.100.1'], requestedPool: 'b' })]);
    expect(r.released.map((x) => x.why)).toEqual(['the Service asks for pool b']);
    expect(outcome(r, 'd/x')).toEqual(['Allocated', '10.0.101.1']);
  });

  describe('sharing', () => {
    const dns = (key: string, ports: string[], o: Partial<ServiceInput> = {}) => svc(key, { sharingKey: 'dns', ports, ...o });

    it('TCP/53 and UDP/53 share one address', () => {
      const r = allocate([p24], [dns('d/tcp', ['TCP/53']), dns('d/udp', ['UDP/53'])]);
      expect(outcome(r, 'd/tcp')).toEqual(['Allocated', '10.0.100.1']);
      expect(outcome(r, 'd/udp')).toEqual(['Allocated', '10.0.100.1']);
      expect(r.pools.get('default')!.used).toBe(1);
      // Both say so, and the same on the next pass (when both hold it already).
      expect(r.services.get('d/tcp')!.message).toBe('10.0.100.1 from pool default, shared with d/udp');
      expect(r.services.get('d/udp')!.message).toBe('10.0.100.1 from pool default, shared with d/tcp');
      const next = allocate([p24], [dns('d/tcp', ['TCP/53'], { current: ['10.0.100.1'] }), dns('d/udp', ['UDP/53'], { current: ['10.0.100.1'] })]);
      expect([...next.services.values()].map((o) => o.message)).toEqual([...r.services.values()].map((o) => o.message));
    });

    it.each<[string, Partial<ServiceInput>, string]>([
      ['the same port', { ports: ['TCP/53'] }, '10.0.100.1: ports TCP/53 are already d/tcp\'s'],
      ['another externalTrafficPolicy', { ports: ['UDP/53'], etpLocal: true }, '10.0.100.1: externalTrafficPolicy differs from d/tcp\'s'],
    ])('not with %s: a clear conflict', (_what, o, message) => {
      const r = allocate([p24], [dns('d/tcp', ['TCP/53']), dns('d/other', [], o)]);
      expect(r.services.get('d/other')).toEqual({ ips: [], reason: 'SharingConflict', message });
    });

    it('under ETP=Local only with the same selector', () => {
      const r = allocate([p24], [dns('d/tcp', ['TCP/53'], { etpLocal: true, selector: 'app=a' }), dns('d/udp', ['UDP/53'], { etpLocal: true, selector: 'app=b' })]);
      expect(r.services.get('d/udp')!.reason).toBe('SharingConflict');
      const same = allocate([p24], [dns('d/tcp', ['TCP/53'], { etpLocal: true }), dns('d/udp', ['UDP/53'], { etpLocal: true })]);
      expect(outcome(same, 'd/udp')).toEqual(['Allocated', '10.0.100.1']);
    });

    it('keys are per namespace: the same key in two namespaces shares nothing', () => {
      const r = allocate([p24], [dns('a/tcp', ['TCP/53']), dns('b/udp', ['UDP/53'])]);
      expect(outcome(r, 'a/tcp')).toEqual(['Allocated', '10.0.100.1']);
      expect(outcome(r, 'b/udp')).toEqual(['Allocated', '10.0.100.2']);
      const asked = allocate([p24], [dns('a/tcp', ['TCP/53']), dns('b/udp', ['UDP/53'], { requestedIPs: ['10.0.100.1'] })]);
      expect(asked.services.get('b/udp')).toMatchObject({ reason: 'SharingConflict', message: '10.0.100.1 is shared under key a/dns, not b/dns (sharing keys are per namespace)' });
    });

    it('a requested address is shared with the Services already on it', () => {
      const r = allocate([p24], [dns('d/tcp', ['TCP/53'], { requestedIPs: ['10.0.100.53'] }), dns('d/udp', ['UDP/53'], { requestedIPs: ['10.0.100.53'] })]);
      expect(outcome(r, 'd/udp')).toEqual(['Allocated', '10.0.100.53']);
    });

    it('a restart rebuilds sharing from the status, changing nothing', () => {
      const r = allocate([p24], [dns('d/tcp', ['TCP/53'], { current: ['10.0.100.9'] }), dns('d/udp', ['UDP/53'], { current: ['10.0.100.9'] })]);
      expect([outcome(r, 'd/tcp'), outcome(r, 'd/udp'), r.released]).toEqual([['Allocated', '10.0.100.9'], ['Allocated', '10.0.100.9'], []]);
    });
  });

  it('10k Services, in one pass', () => {
    const services = Array.from({ length: 10_000 }, (_, i) => svc(`ns${i % 50}/s${i}`, { created: `2026-02-01T00:00:00.${String(i).padStart(5, '0')}Z` }));
    const r = allocate([pool('big', { blocks: [{ cidr: '10.64.0.0/16' }] })], services);
    const ips = new Set([...r.services.values()].map((o) => o.ips[0]));
    expect(ips.size).toBe(10_000);
    expect(r.pools.get('big')!.used).toBe(10_000);
  });
});

describe('which Services are ours', () => {
  const s = (spec: object, annotations: Record<string, string> = {}) => ({ metadata: { name: 'x', namespace: 'd', annotations }, spec } as never);
  it.each([
    [{ type: 'ClusterIP' }, true, false],
    [{ type: 'LoadBalancer' }, true, true],
    [{ type: 'LoadBalancer' }, false, false],
    [{ type: 'LoadBalancer', loadBalancerClass: 'ferry.dev/lb' }, false, true],
    [{ type: 'LoadBalancer', loadBalancerClass: 'io.cilium/bgp' }, true, false],
  ])('%j (unclassed handled: %s) → %s', (spec, handleUnclassed, want) => {
    expect(isOurs(s(spec), { handleUnclassed })).toBe(want);
  });

  it('reads requests, pool, sharing key, ports and policy', () => {
    const input = serviceInput(s({ type: 'LoadBalancer', loadBalancerIP: '10.0.100.5', externalTrafficPolicy: 'Local', selector: { b: '2', a: '1' }, ports: [{ port: 53, protocol: 'UDP' }, { port: 53 }] }, { 'ferry.dev/load-balancer-ips': '10.0.100.6, fd00::6', 'ferry.dev/pool': 'p', 'ferry.dev/sharing-key': 'k' }));
    expect(input).toMatchObject({ requestedIPs: ['10.0.100.5', '10.0.100.6'], requestedPool: 'p', sharingKey: 'k', ports: ['UDP/53', 'TCP/53'], etpLocal: true, selector: 'a=1,b=2' });
    expect(serviceInput(s({ type: 'LoadBalancer' }, { 'ferry.dev/load-balancer-ips': '10.0.100' })).requestError).toBe('"10.0.100" is not an IP address');
  });
});
