// The operator's status write queue: bounded concurrency, the latest write per object
// wins, and objects read as they will be until the watch has caught up, including an
// echo that arrives before the write's own answer, or a newer version that does.
import { describe, expect, it } from 'vitest';
import { WriteQueue, type WriteResult } from '../../src/operator/write-queue.js';

type Obj = { metadata: { resourceVersion: string }; v: string };
const obj = (rv: string, v: string): Obj => ({ metadata: { resourceVersion: rv }, v });

function harness(concurrency = 2) {
  const calls: Array<{ obj: Obj; resolve: (o: Obj) => void; reject: (e: unknown) => void }> = [];
  const results: Array<[string, WriteResult]> = [];
  const q = new WriteQueue<Obj>({
    concurrency,
    write: (o) => new Promise((resolve, reject) => calls.push({ obj: o, resolve, reject })),
    onResult: (k, r) => results.push([k, r]),
  });
  return { q, calls, results };
}
const tick = () => new Promise((r) => setImmediate(r));

describe('write queue', () => {
  it('never has more than `concurrency` writes in flight; the latest waiting write per key wins', async () => {
    const { q, calls } = harness(2);
    q.push('a', obj('1', 'a1'));
    q.push('b', obj('1', 'b1'));
    q.push('c', obj('1', 'c1'));
    q.push('c', obj('1', 'c2'));
    expect(calls.map((c) => c.obj.v)).toEqual(['a1', 'b1']);
    calls[0]!.resolve(obj('2', 'a1'));
    await tick();
    expect(calls.map((c) => c.obj.v)).toEqual(['a1', 'b1', 'c2']);
    expect(q.size).toBe(2);
  });

  it('reads an object as it will be: waiting, in flight, then written until the echo comes', async () => {
    const { q, calls, results } = harness(1);
    const cached = obj('1', 'old');
    q.push('a', obj('1', 'new'));
    expect(q.view('a', cached).v).toBe('new'); // in flight
    calls[0]!.resolve(obj('2', 'new'));
    await tick();
    expect(results).toEqual([['a', 'written']]);
    expect(q.view('a', cached).v).toBe('new'); // the cache has not caught up
    expect(q.echo('a', obj('2', 'new'))).toBe(true); // the echo: no pass needed
    expect(q.view('a', obj('2', 'new')).metadata.resourceVersion).toBe('2');
    expect(q.echo('a', obj('3', 'someone else'))).toBe(false); // a foreign change: a pass is needed
  });

  it('an echo that comes before the answer needs no pass; a newer version seen meanwhile does', async () => {
    const { q, calls, results } = harness(1);
    q.push('a', obj('1', 'mine'));
    expect(q.echo('a', obj('2', 'mine'))).toBe(true);
    calls[0]!.resolve(obj('2', 'mine'));
    await tick();
    q.push('b', obj('5', 'mine'));
    await tick();
    expect(q.echo('b', obj('6', 'mine'))).toBe(true);
    expect(q.echo('b', obj('7', 'someone else'))).toBe(true);
    calls[1]!.resolve(obj('6', 'mine'));
    await tick();
    expect(results).toEqual([['a', 'written'], ['b', 'superseded']]);
    expect(q.view('b', obj('7', 'someone else')).v).toBe('someone else'); // nothing shadows the newer one
  });

  it('a conflict is reported as such, and cancel drops what waits', async () => {
    const { q, calls, results } = harness(1);
    q.push('a', obj('1', 'x'));
    q.push('b', obj('1', 'y'));
    calls[0]!.reject(Object.assign(new Error('conflict'), { code: 409 }));
    await tick();
    expect(results).toEqual([['a', 'conflict']]);
    q.cancel();
    expect(q.view('b', obj('1', 'cached')).v).toBe('cached');
  });
});
