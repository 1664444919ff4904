/** How Table 3 and its figure name a steering row: `α (α/‖h‖)`, or `intervene: NAME` for an intervention set. */
import type { SteeringRow } from '../analysis/results.ts';

export function steeringConditionLabel(r: SteeringRow): string {
  if (r.condition !== undefined) return `intervene: ${r.condition}`;
  return `${r.alpha}${r.alphaRelative === undefined ? '' : ` (${r.alphaRelative.toFixed(3)})`}`;
}
