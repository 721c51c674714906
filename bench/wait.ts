// Waiting in benchmarks: poll until a condition holds, or fail naming what never came.

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function until<T>(what: string, fn: () => Promise<T> | T, ok: (v: T) => boolean, ms = 60_000, every = 50): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (ok(v)) return v;
    if (Date.now() > end) throw new Error(`${what}: not after ${ms} ms`);
    await sleep(every);
  }
}
