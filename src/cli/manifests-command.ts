// `ferry manifests`: what `kubectl kustomize deploy/kubernetes/overlays/<talos|generic>`
// renders, with the image, API server, devices, forwarding mode and XDP chosen on the command
// line, as `cilium install` or `linkerd install` users expect. Pipe it to kubectl apply.
import { Command, Option } from 'commander';
import { deviceEntryProblem } from '../agent/devices.js';
import { renderManifests } from '../deploy/manifests.js';
import { ErrorCode, FerryError } from '../errors.js';

export function registerManifests(program: Command): void {
  program
    .command('manifests')
    .description('print the Kubernetes manifests (CRDs, agent DaemonSet, operator, RBAC) for kubectl apply -f -')
    .option('--talos', 'Talos Linux: the API server through KubePrism (localhost:7445)')
    .option('--api-server <host:port>', 'without --talos: the API server as the nodes reach it (not through a Service)')
    .option('--image <ref>', 'the ferry image (make image, then copied to your registry)')
    .option('--devices <list>', 'the agent\'s devices, comma-separated names or patterns (default: chosen on each node)')
    .addOption(new Option('--mode <mode>', 'forwarding for NodePort and LB traffic to remote backends').choices(['snat', 'dsr', 'hybrid']))
    .addOption(new Option('--acceleration <mode>', 'XDP before tc on the devices: none, native (the driver runs it), best-effort (native where it can, none elsewhere)').choices(['none', 'native', 'best-effort']))
    .option('--xdp-devices <list>', 'which devices get XDP, comma-separated names or patterns; under best-effort a named device without driver XDP runs generic XDP (default: all but tunnels and VLANs, native only)')
    .action((o: { talos?: boolean; apiServer?: string; image?: string; devices?: string; mode?: 'snat' | 'dsr' | 'hybrid'; acceleration?: 'none' | 'native' | 'best-effort'; xdpDevices?: string }) => {
      const devices = deviceList('--devices', o.devices);
      const xdpDevices = deviceList('--xdp-devices', o.xdpDevices);
      process.stdout.write(renderManifests({ talos: Boolean(o.talos), apiServer: o.apiServer, image: o.image, devices, mode: o.mode, acceleration: o.acceleration, xdpDevices }));
    });
}

/** A comma-separated option of device names or patterns, each checked as the agent checks them. */
function deviceList(option: string, value: string | undefined): string[] | undefined {
  const list = value === undefined ? undefined : value === '' ? [] : value.split(',');
  for (const d of list ?? []) {
    const problem = deviceEntryProblem(d);
    if (problem) throw new FerryError({ code: ErrorCode.Config, op: 'ferry manifests', cause: `${option} entry ${JSON.stringify(d)} ${problem}`, hint: 'names such as enp1s0, or whole-name patterns such as enp.*' });
  }
  return list;
}
