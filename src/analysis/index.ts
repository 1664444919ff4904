/**
 * The paper's analyses as pure functions over cached activations ([n, L+1, d] Float32, Float64 accumulation).
 * Entry point for extraction/experiments: `analyze(input) → AnalysisResults`; the pieces are exported for
 * steering (directions, norms, intervals) and notebooks.
 */
export { type Activations, type Labels, allRows, hiddenAt, makeActivations, rowsOfPairs } from './activations.ts';
export { type AnalysisInput, type ConfigActivations, type FirstTokenInput, analyze } from './analyze.ts';
export { auroc, averageRanks } from './auroc.ts';
export { type Band, permutationCosineBand, randomCosineBand } from './baselines.ts';
export { type AurocEstimate, type BootstrapResult, type ScoredSet, bootstrapAuroc, pairUnion } from './bootstrap.ts';
export { type LayerChoice, chooseLayerByCV, pairFolds } from './crossval.ts';
export {
  type Directions,
  directionAt,
  directionNorms,
  layerCosines,
  meanActivation,
  meanDifference,
  meanHiddenNorm,
  refusalDirection,
  subtractDirections,
} from './direction.ts';
export { type EvalSet, type LayerwiseAuroc, layerwiseAuroc } from './format-transfer.ts';
export { type ProjectionStats, projectionStats, projections, projectionsAllLayers } from './projection.ts';
export type * from './results.ts';
export { type Rng, makeRng, shuffleInPlace } from '../util/rng.ts';
export { matchRows, schemaDirection } from './schema-direction.ts';
export { type Interval, mean, percentileInterval, quantile, sd, wilsonInterval } from './stats.ts';
export { cosine, dot, norm, unit } from './vector.ts';
