// Turn libbpf's printed verifier log into the few lines an operator needs.

export interface VerifierFailure {
  program: string;
  /** The full log, for `--verbose` or the error's detail. */
  log: string;
  /** The last lines that explain the failure: source line, instruction, reason. */
  relevant: string[];
  omitted: number;
}

const RELEVANT_LINES = 6;

/**
 * libbpf prints `prog 'NAME': -- BEGIN PROG LOAD LOG --\n<log>-- END PROG LOAD LOG --`
 * when the kernel refuses a program. Returns undefined when no such log was printed.
 */
export function parseVerifierFailure(printed: string): VerifierFailure | undefined {
  const m = /prog '([^']+)': -- BEGIN PROG LOAD LOG --\n([\s\S]*?)-- END PROG LOAD LOG --/.exec(printed);
  if (!m) return undefined;
  const program = m[1]!;
  const log = m[2]!;
  const lines = log.split('\n').map((l) => l.trimEnd()).filter((l) => l.length > 0);
  // The summary lines ("processed N insns ...", "verification time ...") say nothing about why.
  let end = lines.length;
  while (end > 0 && /^(processed \d+ insns|verification time|stack depth|mark_precise)/.test(lines[end - 1]!)) end--;
  const start = Math.max(0, end - RELEVANT_LINES);
  return { program, log, relevant: lines.slice(start, end), omitted: start };
}
