/**
 * The engine's public contract: the `Engine` interface, and (re-exported from run/types.ts, where the run layer that
 * implements them defines them) its options and results, with the conventions every analysis relies on.
 */
import type {
  FirstTokenSharedOptions, FirstTokenSharedResult, ForwardOptions, ForwardResult, GenerateOptions, GenerateResult, SharedForwardOptions,
  SharedForwardResult,
} from './run/types.ts';

export { INTERVENTION_KINDS, STEER_POSITIONS } from './run/types.ts';
export type {
  ActivationSource, FirstTokenSharedOptions, FirstTokenSharedResult, ForwardOptions, ForwardResult, GenerateOptions, GenerateResult,
  GenerationEdits, HookIntervention, Intervention, InterventionKind, PositionSelector, ReuseStats, SamplingSettings,
  SharedForwardOptions, SharedForwardResult, SteerPositions, Steering, TokenLogprob,
} from './run/types.ts';

export interface EngineInfo {
  modelType: string;
  numLayers: number;
  dModel: number;
  vocabSize: number;
  eosIds: number[];
}

export interface Engine extends EngineInfo {
  forward(inputIds: number[][], opts?: ForwardOptions): Promise<ForwardResult[]>;
  /** `forward` with shared-prefix KV reuse (src/engine/run/prefix.ts); optional for other engines */
  forwardShared?(inputIds: number[][], opts?: SharedForwardOptions): Promise<SharedForwardResult>;
  /** generate(maxNewTokens 1, prompt-last + first-token hidden states) with shared-prefix reuse; optional */
  firstTokenShared?(inputIds: number[][], opts?: FirstTokenSharedOptions): Promise<FirstTokenSharedResult>;
  generate(inputIds: number[][], opts: GenerateOptions): Promise<GenerateResult[]>;
  /**
   * One prompt, continuously batched with every other sequence in flight (concurrent calls are safe and share decode
   * steps); `opts.signal` cancels it alone. Optional for other engines.
   */
  submit?(ids: number[], opts: GenerateOptions): Promise<GenerateResult>;
  dispose(): Promise<void>;
}
