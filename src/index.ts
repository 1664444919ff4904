/**
 * The package entry point (`import { createEngine } from 'safekeep'`): the public API, compiled to dist/ by
 * `npm run build`. Everything not re-exported here is internal and may change without notice.
 */
export { createEngine } from './engine/engine.ts';
export type { EngineOptions } from './engine/engine-config.ts';
export type { Engine, ForwardOptions, ForwardResult, GenerateOptions, GenerateResult, Intervention, Steering } from './engine/types.ts';
export * as analysis from './analysis/index.ts';
// the pipeline step by step (notebooks): extraction to activation caches, data, split, steering sweep
export * as experiments from './experiments/index.ts';
// figures: a vega-lite spec to SVG and PNG with the report's font and theme
export * as report from './report/index.ts';
