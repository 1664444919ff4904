/**
 * The paper's pipeline, step by step, for notebooks and scripts (`import { experiments } from 'safekeep'`): open a
 * run (model, tokenizer, template, data, split), cache activations per prompt configuration, read them back, and
 * the steering sweep. The planted model gives every step a known answer.
 */
export {
  type Condition, type ContextOptions, type ExtractContext, conditionName, extractCondition, extractFirstToken, firstTokenCacheName, openContext,
  promptCacheName, stratifiedSubset,
} from './extract.ts';
export { readActivationCache } from '../cache/store.ts';
export { loadPairSet } from '../data/load.ts';
export { groupMap, splitPairs } from '../data/split.ts';
export { PLANTED, writePlantedModel } from './planted.ts';
export { PLANTED_SAE, writePlantedSae } from './planted-sae.ts';
export { parseAlphas } from './steer/conditions.ts';
export { type DirectionChoice, type SteerOptions } from './steer/setup.ts';
export { steerSweep } from './steer/sweep.ts';
export { trainProbes } from './probe/train.ts';
export { calibrationSplit, cascadeBandFor, searchSteerAlpha, type CalibrateOptions } from './probe/calibrate.ts';
export { LODO_SETS, groupBootstrap, injecAgentRows, lodoMarkdown, pairRows, runLodo, tprAtFpr, type LodoResult, type LodoSet } from './probe/lodo.ts';
