/**
 * The `refusal-probe` S³ skill folder for a trained probe: SKILL.md (stage input, check probe) beside copies of the
 * probe's JSON and safetensors, so `--skills <folder>` (s3 eval, serve) and `serve --model DIR --probe <folder>`
 * use it. The format is src/s3/skill-file.ts's; `safekeep probe train` writes one per model.
 */
import { copyFileSync, mkdirSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { writeFileAtomic } from '../../util/atomic.ts';
import type { Probe } from '../../data/probe-file.ts';

const PROBE_SKILL_NAME = 'refusal-probe';

function probeSkillText(p: Probe, json: string, weights: string): string {
  return [
    '---',
    `name: ${PROBE_SKILL_NAME}`,
    'stage: input',
    `description: The agent's own hidden state at the last prompt token (layer ${p.layer}) scored by a ${p.kind} refusal probe; above its threshold the request is refused. No model call on a local engine.`,
    `resources: [${json}, ${weights}]`,
    'check: probe',
    `direction: ${json}`,
    `layer: ${p.layer}`,
    `threshold: ${p.threshold.value}`,
    'mitigation: recover',
    'recovery: "The request was refused by {{skill}}: {{reason}}"',
    '---',
    `A ${p.kind} refusal probe trained by safekeep probe train on the ${p.provenance.condition} condition of`,
    `${p.provenance.dataset.name} (extraction split only; model config hash ${p.provenance.model.configHash.slice(0, 12)}…).`,
    'The request is rendered with the agent\'s tools exactly as the agent sees it; on the local engine the score is read',
    `from the agent call's own prefill: hidden[${p.layer}] at the last prompt position, projected on the probe's weights`,
    `plus its bias. A score above ${p.threshold.value.toPrecision(4)} (chosen so that at most ${(100 * p.threshold.target).toFixed(0)} % of benign extraction`,
    'requests are flagged) means the model\'s own representation places the request on the harmful side. Recovery at the',
    'input stage is the refusal prefill: the reply starts with the refusal prefix and the model continues it, no tools.',
    '',
  ].join('\n');
}

/** Writes `<dir>/refusal-probe/` for the probe at `probePath` (its JSON); returns the folder. */
export function writeProbeSkill(dir: string, p: Probe): string {
  const folder = join(dir, PROBE_SKILL_NAME);
  mkdirSync(folder, { recursive: true });
  const json = basename(p.path);
  copyFileSync(p.path, join(folder, json));
  copyFileSync(join(dirname(p.path), p.weights), join(folder, p.weights));
  writeFileAtomic(join(folder, 'SKILL.md'), probeSkillText(p, json, p.weights));
  return folder;
}
