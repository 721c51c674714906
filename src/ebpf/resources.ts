// Every kernel resource ferry opens (object, map FD, link, tc filter) has one owner and is
// registered here until closed, so tests can fail a run that leaks one.

export interface Resource {
  /** What it is, for leak reports: `map services (fd 12)`. */
  readonly what: string;
  close(): void;
}

const live = new Set<Resource>();

export function track(r: Resource): void {
  live.add(r);
}

export function untrack(r: Resource): void {
  live.delete(r);
}

/** The open resources themselves, oldest first. */
export function liveResourceSet(): Set<Resource> {
  return new Set(live);
}

/** Resources opened and not yet closed, oldest first. */
export function liveResources(): string[] {
  return [...live].map((r) => r.what);
}

/** Close everything still open (newest first): the one cleanup path for crashes in tests. */
export function closeAll(): void {
  for (const r of [...live].reverse()) r.close();
}
