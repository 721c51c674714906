// RBAC as the API server applies it, over the ClusterRoles, Roles and bindings of the
// rendered manifests: a ServiceAccount may do what a rule bound to it allows (verb, API
// group, resource with its subresource, resource name), cluster-wide through a
// ClusterRoleBinding, in one namespace through a RoleBinding. Nothing else is allowed.
// (Aggregated ClusterRoles and non-resource URLs are not modelled; discovery, /version and
// health are open to every authenticated user, as system:discovery grants them.)

export interface RequestAttributes {
  verb: string;
  group: string;
  /** With its subresource: services/status. */
  resource: string;
  namespace?: string | undefined;
  name?: string | undefined;
}

export interface PolicyRule {
  apiGroups?: string[];
  resources?: string[];
  verbs: string[];
  resourceNames?: string[];
}

type Subject = { kind: string; name: string; namespace?: string };
type RbacObject = {
  kind: string;
  metadata: { name: string; namespace?: string };
  rules?: PolicyRule[];
  roleRef?: { kind: string; name: string };
  subjects?: Subject[];
};

/** A rule and where it comes from, so a test can take one away. */
export interface BoundRule {
  role: string;
  index: number;
  rule: PolicyRule;
  /** undefined: every namespace (ClusterRoleBinding). */
  namespace: string | undefined;
  subjects: Subject[];
}

const has = (list: readonly string[] | undefined, v: string) => (list ?? []).includes('*') || (list ?? []).includes(v);

export function ruleAllows(rule: PolicyRule, a: RequestAttributes): boolean {
  if (!has(rule.verbs, a.verb) || !has(rule.apiGroups, a.group) || !has(rule.resources, a.resource)) return false;
  // resourceNames narrow a rule to named objects: a list, watch or create names none.
  return !rule.resourceNames?.length || (a.name !== undefined && rule.resourceNames.includes(a.name));
}

export class RbacPolicy {
  readonly rules: BoundRule[];
  /** 'manifests', or which rules were taken away. */
  readonly label: string;

  constructor(
    private readonly objects: readonly { kind: string }[],
    private readonly without: ReadonlySet<string> = new Set(),
  ) {
    this.label = without.size ? `without ${[...without].join(', ')}` : 'manifests';
    const rbac = objects.filter((o) => ['ClusterRole', 'Role', 'ClusterRoleBinding', 'RoleBinding'].includes(o.kind)) as RbacObject[];
    const roleKey = (kind: string, name: string, ns?: string) => `${kind}/${kind === 'Role' ? `${ns}/` : ''}${name}`;
    const roles = new Map(rbac.filter((o) => o.kind === 'ClusterRole' || o.kind === 'Role').map((r) => [roleKey(r.kind, r.metadata.name, r.metadata.namespace), r]));
    this.rules = rbac
      .filter((b) => b.kind === 'ClusterRoleBinding' || b.kind === 'RoleBinding')
      .flatMap((b) => {
        // A RoleBinding may name a ClusterRole: its rules, in the binding's namespace only.
        const key = roleKey(b.roleRef!.kind, b.roleRef!.name, b.metadata.namespace);
        const role = roles.get(key);
        return (role?.rules ?? []).map((rule, index) => ({ role: key, index, rule, namespace: b.kind === 'RoleBinding' ? b.metadata.namespace : undefined, subjects: b.subjects ?? [] }));
      })
      .filter((r) => !without.has(`${r.role}#${r.index}`))
      .map((r) => {
        const verbs = r.rule.verbs.filter((v) => !without.has(`${r.role}#${r.index}:${v}`));
        return verbs.length === r.rule.verbs.length ? r : { ...r, rule: { ...r.rule, verbs } };
      });
  }

  /** The same policy without a rule (`role#index`, as BoundRule names it) or one of its verbs (`role#index:verb`). */
  withoutRule(id: string): RbacPolicy {
    return new RbacPolicy(this.objects, new Set([...this.without, id]));
  }

  allows(user: string, a: RequestAttributes): boolean {
    const sa = /^system:serviceaccount:([^:]+):([^:]+)$/.exec(user);
    return this.rules.some((r) => {
      if (r.namespace !== undefined && r.namespace !== a.namespace) return false;
      const subject = r.subjects.some((s) => (s.kind === 'ServiceAccount' && sa !== null && s.name === sa[2] && (s.namespace ?? r.namespace) === sa[1]) || (s.kind === 'User' && s.name === user));
      return subject && ruleAllows(r.rule, a);
    });
  }

  /** Why a request is refused, in the API server's words. */
  static forbidden(user: string, a: RequestAttributes): string {
    const [resource, sub] = a.resource.split('/');
    const what = `${resource}${a.name ? ` "${a.name}"` : ''}`;
    return `${what} is forbidden: User "${user}" cannot ${a.verb} resource "${resource}"${sub ? ` subresource "${sub}"` : ''} in API group "${a.group}"${a.namespace ? ` in the namespace "${a.namespace}"` : ' at the cluster scope'}`;
  }
}
