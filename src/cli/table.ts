// Plain, kubectl-like tables (no borders) through cli-table3.
import Table from 'cli-table3';

const PLAIN = {
  top: '', 'top-mid': '', 'top-left': '', 'top-right': '', bottom: '', 'bottom-mid': '', 'bottom-left': '', 'bottom-right': '',
  left: '', 'left-mid': '', mid: '', 'mid-mid': '', right: '', 'right-mid': '', middle: '  ',
};

export function table(head: string[], rows: Array<Array<string | number>>): string {
  const t = new Table({ head, chars: PLAIN, style: { head: [], border: [], 'padding-left': 0, 'padding-right': 0 } });
  for (const r of rows) t.push(r.map(String));
  return `${t.toString().split('\n').map((l) => l.trimEnd()).join('\n')}\n`;
}
