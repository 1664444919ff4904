/**
 * The package entry point (`import { createEngine } from 'safekeep'`): the public API, compiled to dist/ by
 * `npm run build`. Everything not re-exported here is internal and may change without notice.
 */
export { createEngine } from './engine/engine.ts';
export type { EngineOptions } from './engine/engine-config.ts';
export type { Engine, ForwardOptions, ForwardResult, GenerateOptions, GenerateResult, Intervention, Steering } from './engine/types.ts';
export * as analysis from './analysis/index.ts';
