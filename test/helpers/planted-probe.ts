/**
 * A refusal probe written by hand for the planted model: the planted direction r at layer 2, with the threshold
 * halfway between a known harmful and a known benign score (so one request of each side lands on each side).
 * Returns the probe's JSON path and the refusal-probe skill folder written from it.
 */
import { join } from 'node:path';
import { loadCheckpoint } from '../../src/checkpoint/load.ts';
import { readProbe, writeProbe } from '../../src/data/probe-file.ts';
import { writeProbeSkill } from '../../src/experiments/probe/skill.ts';

export async function writePlantedProbe(
  dir: string, model: string, r: readonly number[], scores: { harmful: number; benign: number },
  /** a calibrated probe (probe-cascade, probe-steer): the band and α by hand, the steering direction r */
  calibrated?: { low: number; high: number; alpha: number },
): Promise<{ probeJson: string; skillDir: string }> {
  const ckpt = await loadCheckpoint(model);
  const calibration = { pairs: 1, share: 0.25, seed: 0, idsHash: '' };
  const cal = calibrated ? {
    cascade: { low: calibrated.low, high: calibrated.high, maxBenignFlag: 0.05, maxHarmfulPass: 0.05, benignFlagged: 0, harmfulPassed: 0, band: 0, nBenign: 1, nHarmful: 1, calibration },
    steer: { alpha: calibrated.alpha, layer: 2, targets: 'flagged' as const, flagged: 1, refused: 1, search: 'hand', calibration },
  } : {};
  const probeJson = writeProbe(join(dir, 'probe', 'agent.schema.mean-diff'), {
    kind: 'mean-diff', layer: 2, dModel: 64, bias: 0,
    threshold: { value: (scores.harmful + scores.benign) / 2, target: 0.05, benignFlagged: 0, harmfulFlagged: 1, nBenign: 1, nHarmful: 1 },
    layerChoice: { method: 'given (--layer)' },
    provenance: {
      model: { dir: model, family: 'llama', configHash: ckpt.configHash, weightsFingerprint: '', numLayers: 4, dModel: 64 },
      templateHash: '', condition: 'agent.schema', dataset: { name: 'hand', hash: '' },
      split: { seed: 0, used: 'extraction', extractionPairs: 1, evaluationPairs: 0, extractionIdsHash: '' },
      engine: '', cache: '', created: '',
    },
    ...cal,
  }, Float32Array.from(r), calibrated ? Float32Array.from(r) : undefined);
  // the refusal-probe skill folder (probe train writes one per model)
  return { probeJson, skillDir: writeProbeSkill(join(dir, 'skill'), readProbe(probeJson)) };
}
