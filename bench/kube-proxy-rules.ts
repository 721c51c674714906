// kube-proxy's rules for N Services, as kube-proxy 1.31 writes them (the structure is
// stated in bench/README.md): the filler Services are ClusterIP-only with one TCP port and
// one endpoint; the measured one is added last and also has a NodePort.

/** The filler Services' ClusterIPs (ClusterIP-only, one port), then the measured one last. */
export const clusterIP = (i: number) => `10.${97 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`;

/** The measured Service: its ClusterIP, and its port (a NodePort too) chosen per cell. */
export const TARGET_IP = '10.96.0.10';

/**
 * kube-proxy's iptables mode (nat table): PREROUTING/OUTPUT → KUBE-SERVICES, one rule per
 * Service port matching ClusterIP:port → KUBE-SVC-*, then the KUBE-NODEPORTS jump for local
 * destinations at the end; KUBE-EXT-* marks for masquerade; KUBE-SEP-* DNATs.
 */
/** The measured Service's protocol and its pod's port (the fillers are TCP, to :8080). */
export interface TargetOptions {
  proto?: 'tcp' | 'udp';
  podPort?: number;
}

export function iptablesRules(fillers: number, podIP: string, targetPort: number, target: TargetOptions = {}): string {
  const out = ['*nat', ':KUBE-SERVICES - [0:0]', ':KUBE-NODEPORTS - [0:0]', ':KUBE-POSTROUTING - [0:0]', ':KUBE-MARK-MASQ - [0:0]'];
  const rules: string[] = [];
  const service = (id: string, ip: string, port: number, nodePort?: number, proto = 'tcp', podPort = 8080) => {
    out.push(`:KUBE-SVC-${id} - [0:0]`, `:KUBE-SEP-${id} - [0:0]`);
    rules.push(`-A KUBE-SERVICES -d ${ip}/32 -p ${proto} -m ${proto} --dport ${port} -j KUBE-SVC-${id}`);
    rules.push(`-A KUBE-SVC-${id} -j KUBE-SEP-${id}`);
    rules.push(`-A KUBE-SEP-${id} -s ${podIP}/32 -j KUBE-MARK-MASQ`);
    rules.push(`-A KUBE-SEP-${id} -p ${proto} -m ${proto} -j DNAT --to-destination ${podIP}:${podPort}`);
    if (nodePort) {
      out.push(`:KUBE-EXT-${id} - [0:0]`);
      rules.push(`-A KUBE-NODEPORTS -p ${proto} -m ${proto} --dport ${nodePort} -j KUBE-EXT-${id}`);
      rules.push(`-A KUBE-EXT-${id} -j KUBE-MARK-MASQ`, `-A KUBE-EXT-${id} -j KUBE-SVC-${id}`);
    }
  };
  for (let i = 0; i < fillers; i++) service(`F${i}`, clusterIP(i), 80);
  service('TARGET', TARGET_IP, targetPort, targetPort, target.proto, target.podPort);
  // Concatenated, not pushed: 100k Services are more arguments than a call can take.
  return [
    ...out,
    ...rules,
    '-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS',
    '-A PREROUTING -j KUBE-SERVICES',
    '-A OUTPUT -j KUBE-SERVICES',
    '-A POSTROUTING -j KUBE-POSTROUTING',
    '-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000',
    '-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN',
    '-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000',
    '-A KUBE-POSTROUTING -j MASQUERADE --random-fully',
    'COMMIT',
    '',
  ].join('\n');
}

/**
 * kube-proxy's nftables mode (table ip kube-proxy): one verdict map keyed by
 * address . protocol . port for ClusterIPs and one keyed by protocol . port for NodePorts,
 * a chain per Service, per external entry and per endpoint.
 */
export function nftRules(fillers: number, podIP: string, targetPort: number, target: TargetOptions = {}): string {
  const chain = (name: string, ...rules: string[]) => [`  chain ${name} {`, ...rules.map((r) => `    ${r}`), '  }'];
  const chains: string[] = [];
  const serviceIPs: string[] = [];
  const nodePorts: string[] = [];
  const service = (id: string, ip: string, port: number, nodePort?: number, proto = 'tcp', podPort = 8080) => {
    chains.push(...chain(`endpoint-${id}`, `ip saddr ${podIP} jump mark-for-masquerade`, `meta l4proto ${proto} dnat to ${podIP}:${podPort}`));
    chains.push(...chain(`service-${id}`, `numgen random mod 1 vmap { 0 : goto endpoint-${id} }`));
    serviceIPs.push(`${ip} . ${proto} . ${port} : goto service-${id}`);
    if (nodePort) {
      chains.push(...chain(`external-${id}`, 'jump mark-for-masquerade', `goto service-${id}`));
      nodePorts.push(`${proto} . ${nodePort} : goto external-${id}`);
    }
  };
  for (let i = 0; i < fillers; i++) service(`f${i}`, clusterIP(i), 80);
  service('target', TARGET_IP, targetPort, targetPort, target.proto, target.podPort);
  const map = (name: string, type: string, elements: string[]) => [`  map ${name} {`, `    type ${type}`, `    elements = { ${elements.join(',\n      ')} }`, '  }'];
  return [
    'table ip kube-proxy {',
    ...chain('mark-for-masquerade', 'meta mark set meta mark or 0x4000'),
    ...chain('masquerading', 'meta mark & 0x4000 == 0 return', 'meta mark set meta mark xor 0x4000', 'masquerade fully-random'),
    ...chains,
    ...map('service-ips', 'ipv4_addr . inet_proto . inet_service : verdict', serviceIPs),
    ...map('service-nodeports', 'inet_proto . inet_service : verdict', nodePorts),
    ...chain('services', 'ip daddr . meta l4proto . th dport vmap @service-ips', 'fib daddr type local meta l4proto . th dport vmap @service-nodeports'),
    ...chain('nat-prerouting', 'type nat hook prerouting priority dstnat; policy accept;', 'jump services'),
    ...chain('nat-output', 'type nat hook output priority -100; policy accept;', 'jump services'),
    ...chain('nat-postrouting', 'type nat hook postrouting priority srcnat; policy accept;', 'jump masquerading'),
    '}',
    '',
  ].join('\n');
}
