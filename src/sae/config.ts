/**
 * SAELens's cfg.json, read the way SAELens 6 reads it (sae_lens/saes/sae.py `SAEConfig`, sae_lens/saes/topk_sae.py
 * `TopKSAEConfig`, and sae_lens/loading/pretrained_sae_loaders.py `handle_pre_6_0_config` for files written before
 * 6.0 — jbloomAus/SAELens @ 91ca16ccd0684e4dd6323cd4f23ded734339ec54).
 *
 * Every key is one of three kinds, as config.json is for models:
 * - read (changes the math, implemented as SAELens does): architecture, d_in, d_sae, dtype, apply_b_dec_to_input,
 *   normalize_activations (none, constant_norm_rescale, layer_norm; a boolean as pre-6.0 wrote it), k and
 *   rescale_acts_by_decoder_norm (topk), hook_name (top level, or metadata.hook_name), and the pre-6.0 spellings
 *   hook_point, activation_fn ('relu'; 'topk' + activation_fn_kwargs.k = the topk architecture);
 * - accepted at their no-op value only, refused by name otherwise: reshape_activations 'none' (hook_z reshaping is
 *   not implemented), hook_head_index / hook_point_head_index null, finetuning_scaling_factor false,
 *   normalize_activations 'expected_average_only_in' (its scale is not in the files: SAELens folds a factor from
 *   its release table, or, loaded from disk, leaves the input unscaled — fold it into W_enc / W_dec / b_dec first);
 * - harmless (identity at inference): device, metadata.*, and what SAELens's training runner writes beside them.
 * Any other key is refused by name: it might change the forward pass.
 */
import { SafekeepError } from '../util/errors.ts';
import { SAE_ARCHITECTURES, type SaeArchitecture, type SaeConfig, type SaeNormalization, type StoredDtype } from './types.ts';

/** Keys that never change an SAE's inference (SAELens writes them for provenance and training). */
const HARMLESS = new Set([
  'device', 'metadata', 'model_name', 'model_class_name', 'hook_eval', 'dataset_path', 'dataset_trust_remote_code',
  'streaming', 'is_dataset_tokenized', 'context_size', 'use_cached_activations', 'cached_activations_path',
  'from_pretrained_path', 'n_batches_in_buffer', 'training_tokens', 'store_batch_size_prompts', 'seqpos_slice',
  'disable_concat_sequences', 'sequence_separator_token', 'act_store_device', 'seed', 'prepend_bos', 'autocast',
  'autocast_lm', 'compile_llm', 'llm_compilation_mode', 'compile_sae', 'sae_compilation_mode',
  'train_batch_size_tokens', 'lr', 'lr_scheduler_name', 'lr_warm_up_steps', 'lr_end', 'lr_decay_steps',
  'n_restart_cycles', 'dead_feature_window', 'feature_sampling_window', 'dead_feature_threshold', 'n_eval_batches',
  'eval_batch_size_prompts', 'logger', 'n_checkpoints', 'checkpoint_path', 'save_final_checkpoint', 'output_path',
  'resume_from_checkpoint', 'verbose', 'model_kwargs', 'model_from_pretrained_kwargs', 'sae_lens_version',
  'sae_lens_training_version', 'exclude_special_tokens', 'neuronpedia_id', 'l1_coefficient', 'lp_norm',
  'l0_coefficient', 'l0_lambda', 'jumprelu_init_threshold', 'jumprelu_bandwidth', 'jumprelu_sparsity_loss_mode',
  'jumprelu_tanh_scale', 'pre_act_loss_coefficient', 'decoder_init_norm', 'init_encoder_as_decoder_transpose',
  'mse_loss_normalization', 'aux_loss_coefficient', 'use_ghost_grads', 'normalize_sae_decoder',
  'noise_scale', 'decoder_orthogonal_init', 'decoder_heuristic_init', 'scale_sparsity_penalty_by_decoder_norm',
  'l1_warm_up_steps', 'adam_beta1', 'adam_beta2', 'b_dec_init_method', 'wandb_project', 'wandb_log_frequency',
  'log_to_wandb', 'run_name', 'wandb_entity', 'eval_every_n_wandb_logs', 'sae_lens_training', 'expansion_factor',
]);

/** SAELens's DTYPE_MAP names (sae_lens/constants.py) → the stored dtype. float64 is refused: computation is f32. */
const DTYPES: Record<string, StoredDtype> = {
  float32: 'F32', 'torch.float32': 'F32', float16: 'F16', 'torch.float16': 'F16', bfloat16: 'BF16', 'torch.bfloat16': 'BF16',
};

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function positiveInt(v: unknown, key: string, file: string): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) throw new SafekeepError(`${file}: '${key}' must be a positive integer, got ${JSON.stringify(v)}`);
  return v;
}

/** The resolved config of a SAELens cfg.json (weights are checked against it by the loader). */
export function parseSaeCfg(raw: unknown, file: string, source: string): SaeConfig {
  if (!isObj(raw)) throw new SafekeepError(`${file}: not a JSON object`);
  const cfg: Record<string, unknown> = { ...raw };
  // pre-6.0 spellings (handle_pre_6_0_config): hook_point → hook_name, activation_fn topk → architecture topk
  if ('hook_point' in cfg) { cfg.hook_name ??= cfg.hook_point; delete cfg.hook_point; }
  if ('activation_fn_str' in cfg) { cfg.activation_fn ??= cfg.activation_fn_str; delete cfg.activation_fn_str; }
  if ('hook_point_head_index' in cfg) { cfg.hook_head_index ??= cfg.hook_point_head_index; delete cfg.hook_point_head_index; }
  const fnKwargs = cfg.activation_fn_kwargs;
  if (cfg.activation_fn === 'topk' && isObj(fnKwargs) && fnKwargs.k !== undefined && fnKwargs.k !== null) {
    cfg.architecture = 'topk';
    cfg.k = fnKwargs.k;
  }
  for (const key of Object.keys(cfg)) {
    if (HARMLESS.has(key)) continue;
    if (['architecture', 'd_in', 'd_sae', 'dtype', 'apply_b_dec_to_input', 'normalize_activations', 'k',
      'rescale_acts_by_decoder_norm', 'hook_name', 'reshape_activations', 'hook_head_index', 'finetuning_scaling_factor',
      'activation_fn', 'activation_fn_kwargs'].includes(key)) continue;
    throw new SafekeepError(`${file}: unknown field '${key}' — it may change the SAE's forward pass, so it is refused (safekeep reads SAELens's standard, jumprelu and topk configs)`);
  }
  const architecture = (cfg.architecture ?? 'standard') as SaeArchitecture;
  if (!SAE_ARCHITECTURES.includes(architecture)) {
    throw new SafekeepError(`${file}: architecture '${String(cfg.architecture)}' is not implemented (${SAE_ARCHITECTURES.join(', ')}; gated, batchtopk, matryoshka and transcoders are refused)`);
  }
  const noop = (key: string, ok: (v: unknown) => boolean, why: string): void => {
    if (key in cfg && !ok(cfg[key])) throw new SafekeepError(`${file}: '${key}' = ${JSON.stringify(cfg[key])} is not implemented (${why})`);
  };
  noop('reshape_activations', (v) => v === 'none', "only 'none': hook_z reshaping is not read");
  noop('hook_head_index', (v) => v === null, 'per-head SAEs are not read');
  noop('finetuning_scaling_factor', (v) => v === false, 'a finetuning scale is not read');
  noop('activation_fn', (v) => v === 'relu' || (v === 'topk' && architecture === 'topk'), "'relu' (or topk with its k)");
  if (cfg.activation_fn_kwargs !== undefined && architecture !== 'topk' && !(isObj(cfg.activation_fn_kwargs) && Object.keys(cfg.activation_fn_kwargs).length === 0)) {
    throw new SafekeepError(`${file}: 'activation_fn_kwargs' = ${JSON.stringify(cfg.activation_fn_kwargs)} is not implemented for ${architecture}`);
  }
  let normalize = cfg.normalize_activations ?? 'none';
  if (typeof normalize === 'boolean') normalize = normalize ? 'expected_average_only_in' : 'none';
  if (normalize === 'expected_average_only_in') {
    throw new SafekeepError(`${file}: normalize_activations 'expected_average_only_in' needs a norm scaling factor the files do not hold; fold it first (SAELens: sae.fold_activation_norm_scaling_factor(f), then save)`);
  }
  if (!['none', 'constant_norm_rescale', 'layer_norm'].includes(normalize as string)) {
    throw new SafekeepError(`${file}: normalize_activations '${String(normalize)}' is not one of none, constant_norm_rescale, layer_norm`);
  }
  const dtypeName = cfg.dtype ?? 'float32';
  const dtype = DTYPES[dtypeName as string];
  if (!dtype) throw new SafekeepError(`${file}: dtype '${String(dtypeName)}' is not read (float32, float16, bfloat16)`);
  const metadata = isObj(cfg.metadata) ? cfg.metadata : {};
  const hookName = cfg.hook_name ?? metadata.hook_name ?? null;
  if (hookName !== null && typeof hookName !== 'string') throw new SafekeepError(`${file}: 'hook_name' must be a string`);
  for (const key of ['apply_b_dec_to_input', 'rescale_acts_by_decoder_norm']) {
    if (key in cfg && typeof cfg[key] !== 'boolean') throw new SafekeepError(`${file}: '${key}' must be true or false`);
  }
  if (architecture !== 'topk' && cfg.rescale_acts_by_decoder_norm === true) throw new SafekeepError(`${file}: 'rescale_acts_by_decoder_norm' is a topk field (architecture ${architecture})`);
  if (architecture !== 'topk' && 'k' in cfg) throw new SafekeepError(`${file}: 'k' is a topk field (architecture ${architecture})`);
  const dIn = positiveInt(cfg.d_in, 'd_in', file);
  const dSae = positiveInt(cfg.d_sae, 'd_sae', file);
  // TopKSAEConfig's default k is 100
  const k = architecture === 'topk' ? positiveInt(cfg.k ?? 100, 'k', file) : null;
  if (k !== null && k > dSae) throw new SafekeepError(`${file}: k = ${k} is more than d_sae = ${dSae}`);
  return {
    architecture, dIn, dSae, k, rescaleActsByDecoderNorm: cfg.rescale_acts_by_decoder_norm === true,
    // SAEConfig's default is true
    applyBDecToInput: cfg.apply_b_dec_to_input !== false,
    normalizeActivations: normalize as SaeNormalization, hookName, dtype, layout: 'saelens', source,
  };
}
