/**
 * What a generation call resolves once before its rows join the scheduler: the prompts and `maxNewTokens` checked,
 * the call's interventions as prefill and decode inputs, its hook edits and SAEs as step feeds. `generate` (many rows, resolved
 * once for all of them) and `Scheduler.submit` (one row) both start here, so a row is prepared the same whichever
 * way it comes in.
 */
import { SafekeepError } from '../../util/errors.ts';
import { checkSampling, drawSeed, hasPenalties, isGreedy, type SamplingSettings } from '../sample/settings.ts';
import type { GenerateOptions } from './types.ts';
import { callInterventions, interventionInputs, type InterventionInputs } from './batch.ts';
import { checkIds } from './forward.ts';
import { generationHooks } from './hooked.ts';
import { mergeHooks, saeGenerationHooks } from './sae-rows.ts';
import type { StepHooks, Stepper } from './step.ts';

export interface GenerationInputs {
  /** the interventions of the prompt's steps: positions 'generated' leave the prefill alone */
  prefillIv: InterventionInputs;
  /** the interventions of every decode step: all of them */
  decodeIv: InterventionInputs;
  /** edits at hook points and spliced SAEs (sae-rows.ts), at every prefill and decode position (undefined: none) */
  hooks: StepHooks | undefined;
  /** the call's sampling with its seed (drawn when a sampling call named none); undefined = plain greedy */
  sampling: SamplingSettings | undefined;
}

/** The checks and the resolved inputs shared by every row of one call; throws a SafekeepError on a bad request. */
export function generationInputs(s: Stepper, inputIds: number[][], opts: GenerateOptions): GenerationInputs {
  checkIds(inputIds, s.vocabSize);
  if (!Number.isInteger(opts.maxNewTokens) || opts.maxNewTokens < 0) {
    throw new SafekeepError(`maxNewTokens must be a non-negative integer, got ${opts.maxNewTokens}`);
  }
  const all = callInterventions(opts);
  const prefillIv = interventionInputs(s.numLayers, s.dModel, all.filter((x) => (x.positions ?? 'all') === 'all'));
  const decodeIv = interventionInputs(s.numLayers, s.dModel, all);
  const hooks = mergeHooks(generationHooks(s, opts.hooks), saeGenerationHooks(opts.saes, s.numLayers, s.dModel));
  return { prefillIv, decodeIv, hooks, sampling: resolvedSampling(opts.sampling, s.vocabSize) };
}

/** the settings checked against the vocabulary, a seed drawn for a sampling call without one; none when they change nothing */
export function resolvedSampling(sampling: SamplingSettings | undefined, vocabSize: number): SamplingSettings | undefined {
  if (!sampling) return undefined;
  checkSampling(sampling, undefined, vocabSize);
  if (isGreedy(sampling) && !hasPenalties(sampling)) return undefined;
  return !isGreedy(sampling) && sampling.seed === undefined ? { ...sampling, seed: drawSeed() } : sampling;
}
