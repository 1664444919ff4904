/**
 * What a run takes and returns: the options and results of forward, generate, shared-prefix reuse and hook edits.
 * They are the engine's public contract (../types.ts re-exports them beside the `Engine` interface) and live here, in
 * the layer that implements them, so run/ never imports upwards. Conventions (fixed: every analysis, fixture and
 * check relies on them):
 * - hidden[0] = embedding output; hidden[l], l = 1..L = residual stream after decoder block l-1, before the final
 *   norm (also for l = L).
 * - Steering at layer l: hidden[l] -= alpha * v/|v| at every prompt position and every generated token
 *   (HF: forward hook on model.layers[l-1]); with positions 'generated' only at generated tokens (the prompt's
 *   hidden states, hence the first generated token's choice, are unsteered).
 * - Left padding, position ids = cumsum(mask) - 1. Greedy decoding unless `sampling` says otherwise (sample/);
 *   stop ids from generation_config.json.
 */
import type { PrefixCache } from './prefix-cache.ts';
import type { SamplingSettings } from '../sample/settings.ts';
import type { SaeAttachment } from './sae-hooks.ts';

export type { SamplingSettings };

/** Shorthand of one 'add' intervention: hidden[layer] -= alpha * vector/|vector|. */
export interface Steering {
  layer: number;
  /** [d_model] (normalised by the engine) */
  vector: Float32Array | number[];
  alpha: number;
  /**
   * generation only: 'all' (default) steers every prompt position and every generated token (an HF forward hook);
   * 'generated' steers only the generated tokens as they are fed back (the paper's "at each decoding step"): the
   * prefill runs unsteered. forward() always steers every position.
   */
  positions?: SteerPositions;
}

export type SteerPositions = 'all' | 'generated';

/**
 * An intervention on the residual stream hidden[layer] (r̂ = vector/|vector|):
 * - 'add':    h + alpha·r̂
 * - 'ablate': h − (h·r̂)r̂            (directional ablation: the component along r̂ removed)
 * - 'clamp':  h − (h·r̂)r̂ + alpha·r̂  (the projection on r̂ set to alpha)
 * At one layer every add is applied first, then at most one ablate or clamp. `positions` as for `Steering`
 * (generation only; forward() applies every intervention at every position).
 */
export interface Intervention {
  /** 0..L: hidden[0] = embeddings, hidden[l] = output of decoder block l-1 */
  layer: number;
  kind: InterventionKind;
  /** [d_model] (normalised by the engine) */
  vector: Float32Array | number[];
  /** required for 'add' and 'clamp' */
  alpha?: number;
  positions?: SteerPositions;
}

export type InterventionKind = 'add' | 'ablate' | 'clamp';
export const INTERVENTION_KINDS: readonly InterventionKind[] = ['add', 'ablate', 'clamp'];
export const STEER_POSITIONS: readonly SteerPositions[] = ['all', 'generated'];

/** Which positions of each (unpadded) sequence to return. */
export type PositionSelector = 'all' | 'last' | 'none' | number[];

export interface ForwardOptions {
  steer?: Steering;
  /** applied together with `steer` (its shorthand: { kind: 'add', alpha: −alpha }) */
  interventions?: Intervention[];
  /** positions whose hidden states are returned (default 'all') */
  hiddenAt?: PositionSelector;
  /** positions whose logits are returned (default 'all') */
  logitsAt?: PositionSelector;
}

export interface ForwardResult {
  /** number of real tokens in this sequence */
  length: number;
  /** positions (0-based, in the unpadded sequence) that `hidden` rows correspond to */
  hiddenPositions: number[];
  /** [L+1, hiddenPositions.length, d_model] */
  hidden: Float32Array;
  logitPositions: number[];
  /** [logitPositions.length, vocab] */
  logits: Float32Array;
}

export interface GenerateOptions {
  maxNewTokens: number;
  /** defaults to the checkpoint's generation_config eos ids; [] = never stop */
  stopIds?: number[];
  steer?: Steering;
  /** applied together with `steer` */
  interventions?: Intervention[];
  /** keep the logits that chose every generated token (row 0 = last prompt position) */
  returnStepLogits?: boolean;
  /** all-layer hidden state of the first generated token (computed when it is fed back) */
  returnFirstTokenHidden?: boolean;
  /** last-prompt-token hidden states of the prefill [L+1, d_model] */
  returnPromptLastHidden?: boolean;
  /**
   * Called once per row right after the prefill with that row's last-prompt-token hidden states [L+1, d_model]
   * (from the same forward pass that yields the first token's logits). `true` ends the row there: no token is
   * generated and `finish` is 'halted'. An activation probe judges the request this way without a second forward.
   */
  haltAfterPrefill?: (row: number, promptLastHidden: Float32Array) => boolean;
  /** checked at every step boundary: once aborted, generation ends there and the rows left say finish 'cancelled' */
  signal?: AbortSignal;
  /**
   * Called after each generated token with the row's tokens so far; `true` ends the row there (finish 'stop'), as a
   * stop id does. Stop strings are checked this way: the text they match spans tokens. A callback that throws fails
   * its own row only. With `topLogprobs`, `logprobs` holds the same tokens' log probabilities so far (a server streams
   * them with their tokens).
   */
  stopWhen?: (generatedIds: readonly number[], logprobs?: readonly TokenLogprob[]) => boolean;
  /**
   * edits at named hook points (graph/hooks.ts) at every prompt position and every generated token: add / ablate /
   * clamp / ablate_heads without `positions` (patch and positions belong to runWithCache, whose positions are fixed)
   */
  hooks?: readonly HookIntervention[];
  /**
   * sparse autoencoders spliced at their hook points at every prompt position and every generated token (run/sae-rows.ts),
   * each with its feature edits (ablate / clamp a feature, add α·W_dec[j]) and splice ('error', the default: an
   * unedited SAE leaves the stream exact; 'reconstruction': decode(edited) replaces it); no activations captured.
   * Rows with different SAE edits decode in one step; a row without SAEs keeps the plain graph.
   */
  saes?: readonly SaeAttachment[];
  /**
   * hidden states to keep (a server's activation capture): `promptPositions` = prompt positions (0-based, each at
   * most once, any order) whose all-layer hidden states are returned in `capturedPrompt`; `generated` = also each
   * generated token's as it is fed back (every generated token but the last, which is never fed). A sequence with
   * prompt positions bypasses the prefix cache and prefill packing, so every position is computed in its own steps.
   * `hooks`: hook points besides the residual stream (graph/hooks.ts names, not `pattern`) kept at the same
   * positions in `capturedHooks` — the sequence runs the graph with those outputs, so it decodes with the rows that
   * capture and edit the same points, and its prefill chunks run as single steps. `layers`: the hidden-state rows
   * kept (0..L, in this order; default all L+1), so a capture of one layer does not hold every layer's.
   */
  capture?: { promptPositions: readonly number[]; generated: boolean; hooks?: readonly string[]; layers?: readonly number[] };
  /**
   * log probabilities of every chosen token (log-softmax of its logits) and of the `topLogprobs` most likely ones
   * (0..20; ties by lower id) in `logprobs`; absent = none computed
   */
  topLogprobs?: number;
  /**
   * how each row chooses its tokens (src/engine/sample/README.md): temperature, top-k, top-p, min-p, penalties,
   * logit bias, seed; absent = greedy, as always. Every row of the call uses these settings and this seed, so a row's
   * tokens depend on its prompt, the settings and the seed only — the same alone or batched with any other rows. A
   * sampled call without a seed gets one drawn, reported in each result's `seed`. Different samples of one prompt
   * take different seeds (the CLI's --samples K and the server's n use seed, seed + 1, …).
   */
  sampling?: SamplingSettings;
}

/** One generated token's log probability and the most likely alternatives at its step (most likely first). */
export interface TokenLogprob {
  token: number;
  logprob: number;
  top: { token: number; logprob: number }[];
}

export interface GenerateResult {
  generatedIds: number[];
  /** why generation ended ('halted': `haltAfterPrefill` returned true) */
  finish: 'stop' | 'length' | 'halted' | 'cancelled';
  /** [steps, vocab] when requested */
  stepLogits?: Float32Array;
  /** [L+1, d_model] when requested */
  firstTokenHidden?: Float32Array;
  /** [L+1, d_model] when requested */
  promptLastHidden?: Float32Array;
  /** with `capture.promptPositions`: [K, n, d_model], K = capture.layers (default L+1), n = the positions in the order given */
  capturedPrompt?: Float32Array;
  /** with `capture.generated`: one [K, d_model] per generated token fed back (generatedIds[k] at row k) */
  capturedGenerated?: Float32Array[];
  /**
   * with `capture.hooks`: per hook point, [n + g, width]: the prompt positions' rows in the order given, then (with
   * `generated`) one per generated token fed back
   */
  capturedHooks?: Record<string, Float32Array>;
  /** with `topLogprobs`: one per generated token */
  logprobs?: TokenLogprob[];
  /** the seed a sampled row drew its tokens with (given, or drawn when the call named none) */
  seed?: number;
}

export interface SharedForwardOptions {
  steer?: Steering;
  interventions?: Intervention[];
  hiddenAt?: PositionSelector;
  logitsAt?: PositionSelector;
  /** boundaries per prompt from `prefixPlan` over the whole workload (default: planned over this call's prompts) */
  boundaries?: readonly (readonly number[])[];
  /** prefix KV cache kept across calls (default: a fresh one for this call) */
  cache?: PrefixCache;
}

export interface ReuseStats {
  /** tokens in the prompts */
  promptTokens: number;
  /** tokens actually run through the model (prefix steps + suffixes, no padding) */
  computedTokens: number;
}

export interface SharedForwardResult {
  results: ForwardResult[];
  stats: ReuseStats;
}

export interface FirstTokenSharedResult {
  /** one greedy token per prompt, with `promptLastHidden` and `firstTokenHidden` ([L+1, d] each) */
  results: GenerateResult[];
  stats: ReuseStats;
}

/** `firstTokenShared` options: the shared-forward ones but the positions (always the last), plus stop ids. */
export type FirstTokenSharedOptions = Omit<SharedForwardOptions, 'hiddenAt' | 'logitsAt'> & { stopIds?: number[] };

/** Something activations can be patched from: an ActivationCache (activation-cache.ts), or any object with its `get`. */
export interface ActivationSource {
  /** the activation at a hook point: row-major data of `shape` ([T, width] first axis the token) */
  get(name: string): { data: Float32Array; shape: number[] };
}

/**
 * An edit at a hook point (`hook`: a name or a glob, graph/hooks.ts; a glob applies the edit at every match):
 * - `add`:    x + alpha·r̂ (r̂ = vector/|vector|, width d, or H·hd at z)
 * - `ablate`: x − (x·r̂)r̂;  `clamp`: x − (x·r̂)r̂ + alpha·r̂   (every position)
 * - `patch`:  x at `positions` replaced by the value of the same hook at the same positions in `from` (activation
 *             patching: `from` = the clean run's cache, this run the corrupted one)
 * - `ablate_heads`: zero the given heads' slices of z (`hook` must name z points)
 * `positions` (default every position; negative counts from the end) applies to add, patch and ablate_heads.
 * At one point: patches, head ablations, adds, then at most one ablate/clamp.
 */
/**
 * The one public contract for editing a generation, carried by every caller that edits one (a chat call, the research
 * server's `safekeep` field and vllm-lens's steering vectors, probe-steer's steered answer). Its sign is written once,
 * here: an 'add' is **h + alpha·r̂** (r̂ = vector/|vector|) — a positive alpha moves the state along the vector.
 * The `Steering` shorthand and every flag or field documented in its terms (hidden[l] −= alpha·v̂) convert with
 * `steeringIntervention` (run/batch.ts: alpha negated); vllm-lens's scale·v is an add with alpha = scale·|v|.
 */
export interface GenerationEdits {
  /** at the residual stream hidden[layer] (Intervention: at one layer the adds first, then one ablate or clamp) */
  interventions?: Intervention[];
  /** at named hook points (HookIntervention, without patch: a generation has no clean run to patch from) */
  hooks?: HookIntervention[];
  /** sparse autoencoders spliced with feature edits (GenerateOptions.saes) */
  saes?: SaeAttachment[];
}

export type HookIntervention =
  | { hook: string; kind: 'add'; vector: ArrayLike<number>; alpha: number; positions?: number[] }
  | { hook: string; kind: 'ablate'; vector: ArrayLike<number> }
  | { hook: string; kind: 'clamp'; vector: ArrayLike<number>; alpha: number }
  | { hook: string; kind: 'patch'; from: ActivationSource; positions?: number[] }
  | { hook: string; kind: 'ablate_heads'; heads: number[]; positions?: number[] };
