/** Poll `fn` until `ok` holds or `ms` pass; returns the last value either way. */
export async function eventually<T>(fn: () => Promise<T>, ok: (v: T) => boolean, ms = 15_000, everyMs = 100): Promise<T> {
  const end = Date.now() + ms;
  let v = await fn();
  while (!ok(v) && Date.now() < end) {
    await new Promise((r) => setTimeout(r, everyMs));
    v = await fn();
  }
  return v;
}
