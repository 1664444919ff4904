/**
 * Sparse autoencoders (the `sae` namespace of the package): load SAELens / Gemma Scope / Llama Scope dictionaries,
 * encode / decode / splice as SAELens does, rank the features of a direction, evaluate a reconstruction.
 */
export { loadSae, PTH_CONVERSION, gemmaScopeHook } from './load.ts';
export type { LoadSaeOptions } from './load.ts';
export { applyFeatureEdits, decode, decoderNorms, encode, splice, FEATURE_EDIT_KINDS } from './math.ts';
export type { Encoded, FeatureEdit, NormState, Spliced } from './math.ts';
export { classMeanActivations, decoderCosines, decoderProjections, featureAttribution, topActivatingRows } from './features.ts';
export type { ClassMeans, FeatureAttribution, FeatureCosine } from './features.ts';
export { directionFeatures } from './direction-features.ts';
export type { ConditionRows, DirectionFeatures, FeatureRow, NamedDirection } from './direction-features.ts';
export { topFeatureVector } from './feature-vector.ts';
export type { FeatureVector } from './feature-vector.ts';
export { engineHookPoint, hiddenRowOf } from './hook.ts';
export { addCe, addReconstruction, newTotals, nextTokenCe, summarize } from './metrics.ts';
export type { SaeEvalSummary, SaeEvalTotals } from './metrics.ts';
export { readNpz } from './npz.ts';
export type { Sae, SaeArchitecture, SaeConfig, SaeLayout, StoredMatrix } from './types.ts';
