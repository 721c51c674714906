// ferry's tc programs on a device, whichever way the agent attached them (tcx where the
// kernel has it, else clsact filters: src/datapath/tc-hooks.ts), for tests that look.
import { attachedPrograms } from '../../src/datapath/attachments.js';
import { tcAttachMode } from '../../src/datapath/tc-hooks.js';

/** How an agent with the default setting (auto) attaches here: 'tcx' or 'tc', as reports and `ferry status` name it. */
export const TC_KIND: 'tcx' | 'tc' = tcAttachMode('auto') === 'tcx' ? 'tcx' : 'tc';

/** The names of ferry's programs on a device's tc hook of a direction (in `netns`), in the order listed. */
export function ferryTcPrograms(netns: string, dev: string, direction: 'ingress' | 'egress' = 'ingress'): string[] {
  return attachedPrograms(netns).filter((a) => a.where === `tc ${direction} ${dev}` || a.where === `tcx ${direction} ${dev}`).map((a) => a.program);
}
