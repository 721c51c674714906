// Kubernetes label selectors (matchLabels and matchExpressions), for a pool's selectors.
// An empty or missing selector matches everything; so does an empty list of them.

export interface LabelSelectorRequirement {
  key: string;
  operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist';
  values?: string[];
}

export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: LabelSelectorRequirement[];
}

export function selectorMatches(sel: LabelSelector | undefined, labels: Readonly<Record<string, string>>): boolean {
  if (!sel) return true;
  for (const [k, v] of Object.entries(sel.matchLabels ?? {})) if (labels[k] !== v) return false;
  for (const e of sel.matchExpressions ?? []) {
    const has = Object.prototype.hasOwnProperty.call(labels, e.key);
    const values = e.values ?? [];
    switch (e.operator) {
      case 'In':
        if (!has || !values.includes(labels[e.key]!)) return false;
        break;
      case 'NotIn':
        if (has && values.includes(labels[e.key]!)) return false;
        break;
      case 'Exists':
        if (!has) return false;
        break;
      case 'DoesNotExist':
        if (has) return false;
        break;
      default:
        return false; // an operator we do not know matches nothing, never everything
    }
  }
  return true;
}

/** Does a selector narrow what it selects (is it not empty)? */
export function selectorNarrows(sel: LabelSelector | undefined): boolean {
  return Object.keys(sel?.matchLabels ?? {}).length > 0 || (sel?.matchExpressions ?? []).length > 0;
}

/** Any of a list of selectors (MetalLB's serviceSelectors, namespaceSelectors): an empty
 * list matches everything, as an empty selector does. */
export function anySelectorMatches(list: readonly LabelSelector[], labels: Readonly<Record<string, string>>): boolean {
  return list.length === 0 || list.some((sel) => selectorMatches(sel, labels));
}

/** Does a list of selectors (any of them) narrow what it selects? Not when one is empty. */
export function anySelectorNarrows(list: readonly LabelSelector[]): boolean {
  return list.length > 0 && list.every(selectorNarrows);
}

/** Why a selector is malformed (undefined: it is fine). */
export function selectorError(sel: LabelSelector | undefined): string | undefined {
  if (sel === undefined || sel === null) return undefined;
  if (typeof sel !== 'object' || Array.isArray(sel)) return 'is not an object';
  const labels = sel.matchLabels ?? {};
  if (typeof labels !== 'object' || Array.isArray(labels) || Object.values(labels).some((v) => typeof v !== 'string')) return 'matchLabels: must map keys to strings';
  if (!Array.isArray(sel.matchExpressions ?? [])) return 'matchExpressions: must be a list';
  for (const e of sel.matchExpressions ?? []) {
    if (typeof e !== 'object' || e === null || typeof e.key !== 'string') return 'matchExpressions: each needs a key';
    if (e.values !== undefined && (!Array.isArray(e.values) || e.values.some((v) => typeof v !== 'string'))) return `matchExpressions: ${e.key}: values must be a list of strings`;
    if (!['In', 'NotIn', 'Exists', 'DoesNotExist'].includes(e.operator)) return `matchExpressions: operator "${e.operator}" is not In, NotIn, Exists or DoesNotExist`;
    if ((e.operator === 'In' || e.operator === 'NotIn') && !(e.values?.length)) return `matchExpressions: ${e.key} ${e.operator} needs values`;
    if ((e.operator === 'Exists' || e.operator === 'DoesNotExist') && e.values?.length) return `matchExpressions: ${e.key} ${e.operator} takes no values`;
  }
  return undefined;
}
