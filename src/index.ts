/**
 * The package entry point (`import { createEngine } from 'safekeep'`): the public API, compiled to dist/ by
 * `npm run build` (docs/api.md). Everything not re-exported here is internal and may change without notice.
 * One export per line, grouped by topic.
 */

// the engine: Hugging Face decoders on onnxruntime (src/engine/README.md)
export { createEngine } from './engine/engine.ts';
export type { OnnxEngine } from './engine/engine.ts';
export type { EngineOptions } from './engine/engine-config.ts';
export type { Engine, EngineInfo, ForwardOptions, ForwardResult, GenerateOptions, GenerateResult, PositionSelector, TokenLogprob } from './engine/types.ts';

// interventions on the residual stream hidden[l]
export type { GenerationEdits, Intervention, InterventionKind, SamplingSettings, Steering, SteerPositions } from './engine/types.ts';
export { INTERVENTION_KINDS } from './engine/types.ts';

// hook points: names, shapes, TransformerLens correspondence (src/engine/graph/hooks.ts)
export { HOOK_POINTS, allHookNames, hookName, parseHookName, resolveHookNames } from './engine/graph/hooks.ts';
export type { HookPoint } from './engine/graph/hooks.ts';

// run with cache, edits at hook points (add / ablate / clamp / patch / ablate_heads)
export { ActivationCache } from './engine/run/activation-cache.ts';
export type { Activation } from './engine/run/activation-cache.ts';
export { HOOK_INTERVENTION_KINDS } from './engine/run/hooked.ts';
export type { ActivationSource, HookIntervention, RunWithCacheOptions, RunWithCacheResult } from './engine/run/hooked.ts';

// models without downloads: random checkpoints of every family, the planted model with known ground truth
export { writeRandomCheckpoint } from './checkpoint/random.ts';
export type { RandomCheckpointOptions } from './checkpoint/random.ts';
export { writePlantedModel } from './experiments/planted.ts';
export { loadCheckpoint } from './checkpoint/load.ts';

// tokenizers and chat templates
export { loadPromptTokenizer } from './prompts/tokenizer.ts';
export type { ChatMessage, PromptTokenizer } from './prompts/tokenizer.ts';

// directions as files: reproduce's directions.safetensors (refusal directions, Schema Directions, ℓ*)
export { directionFromFile, readDirectionsFile, writeDirectionsFile } from './experiments/directions-file.ts';
export { DIRECTIONS_FILE, DIRECTIONS_FORMAT } from './experiments/directions-file.ts';

// safetensors files (directions, caches)
export { readSafetensorsHeader, writeSafetensors } from './checkpoint/safetensors.ts';

// the paper's analyses over cached activations
export * as analysis from './analysis/index.ts';

// sparse autoencoders: loadSae (SAELens folders, Gemma Scope, Llama Scope), the math, feature rankings; attached to a
// run with runWithCache(ids, { saes: [{ sae, splice, edits }] })
export { loadSae } from './sae/load.ts';
export type { Sae, SaeConfig } from './sae/types.ts';
export * as sae from './sae/index.ts';
export type { SaeAttachment, SaeSplice } from './engine/run/sae-hooks.ts';

// the SafeKeep guard and the S³ stage-specific safety skills
export * as guard from './api/guard.ts';

// errors: bad input is a SafekeepError (one line)
export { SafekeepError, isSafekeepError } from './util/errors.ts';

// the pipeline step by step (notebooks): extraction to activation caches, data, split, steering sweep
export * as experiments from './experiments/index.ts';

// figures: a vega-lite spec to SVG and PNG with the report's font and theme
export * as report from './report/index.ts';
