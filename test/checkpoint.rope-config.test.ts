/**
 * Config reading for both generations of transformers keys: RoPE (rope.ts) against the inv_freq and attention
 * scaling transformers 5 computes for the same config.json (test/fixtures/hf5/rope-cases.json, written by
 * scripts/hf-fixtures/generate.py), 5.x `rope_parameters` vs 4.x `rope_theta` + `rope_scaling` resolving alike,
 * sliding windows per family, and every config key read, ignored or refused by name (config.ts).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseModelConfig } from '../src/checkpoint/config.ts';
import { ropeAttentionScaling, ropeInvFreq } from '../src/checkpoint/rope.ts';
import { SafekeepError } from '../src/util/errors.ts';
import { HF5 } from './helpers/hf5.ts';

const base = { hidden_size: 64, num_attention_heads: 4, num_key_value_heads: 2, num_hidden_layers: 4, intermediate_size: 128, vocab_size: 100 };

interface RopeCase { config: Record<string, unknown>; seq_len: number | null; inv_freq: number[]; attention_scaling: number }

test('RoPE: inv_freq and attention scaling equal transformers 5 for yarn (defaults, beta/truncate, mscale, attention_factor, factor null), llama3, 4.x linear, dynamic at 5000 tokens, default with partial_rotary_factor, top-level original_max_position_embeddings', () => {
  const cases = JSON.parse(readFileSync(join(HF5, 'rope-cases.json'), 'utf8')) as RopeCase[];
  assert.ok(cases.length >= 10);
  for (const rc of cases) {
    const c = parseModelConfig(rc.config, null);
    const inv = ropeInvFreq(c, rc.seq_len ?? 0);
    assert.equal(inv.length, rc.inv_freq.length, JSON.stringify(rc.config));
    // transformers computes in f32: relative 1e-6
    inv.forEach((f, j) => assert.ok(Math.abs(f - rc.inv_freq[j]!) <= 1e-6 * rc.inv_freq[j]! + 1e-12, `${JSON.stringify(rc.config)} [${j}]: ${f} vs ${rc.inv_freq[j]}`));
    assert.ok(Math.abs(ropeAttentionScaling(c.rope) - rc.attention_scaling) <= 1e-9, `${JSON.stringify(rc.config)}: attention ${ropeAttentionScaling(c.rope)} vs ${rc.attention_scaling}`);
  }
});

test('5.x rope_parameters and 4.x rope_theta + rope_scaling resolve to the same model (fixture llama-llama3 and its 4.x twin)', () => {
  const read = (tag: string) => parseModelConfig(JSON.parse(readFileSync(join(HF5, tag, 'model', 'config.json'), 'utf8')), null);
  const c5 = read('llama-llama3');
  const c4 = read('llama-llama3-4x');
  assert.deepEqual({ ...c4, configKeys: null }, { ...c5, configKeys: null });
  assert.equal(c5.rope.type, 'llama3');
  assert.equal(c5.ropeTheta, 500000);
  assert.ok(c5.configKeys.read.includes('rope_parameters.rope_theta'));
  assert.ok(c4.configKeys.read.includes('rope_theta') && c4.configKeys.read.includes('rope_scaling.factor'));
  // the key generations and their precedence (transformers' convert_rope_params_to_dict / standardize_rope_params)
  const p = (cfg: Record<string, unknown>) => parseModelConfig({ ...base, model_type: 'llama', ...cfg }, null);
  assert.equal(p({}).ropeTheta, 10000);
  assert.equal(p({ rope_theta: 5e5 }).ropeTheta, 5e5);
  assert.equal(p({ rope_parameters: { rope_type: 'default', rope_theta: 1e6 } }).ropeTheta, 1e6);
  assert.equal(p({ rope_parameters: { rope_type: 'default' }, rope_theta: 7e4 }).ropeTheta, 7e4);
  assert.deepEqual(p({ rope_parameters: { rope_type: 'default', rope_theta: 1e6 }, rope_scaling: { rope_type: 'linear', factor: 2 }, rope_theta: 3e3 }).rope, { type: 'linear', factor: 2 });
  // per-attention-type variants: accepted when they agree (one RoPE per layer in these classes), else refused
  const nested = { full_attention: { rope_type: 'linear', factor: 2, rope_theta: 1e4 }, sliding_attention: { rope_type: 'linear', factor: 2, rope_theta: 1e4 } };
  assert.deepEqual(p({ rope_parameters: nested }).rope, { type: 'linear', factor: 2 });
  assert.throws(() => p({ rope_parameters: { ...nested, sliding_attention: { rope_type: 'default', rope_theta: 1e4 } } }), /different settings per attention type/);
  // llama3 / yarn: original_max_position_embeddings falls back to max_position_embeddings
  const y = p({ max_position_embeddings: 4096, rope_parameters: { rope_type: 'yarn', factor: 4, rope_theta: 1e4 } }).rope;
  assert.ok(y.type === 'yarn' && y.originalMaxPositionEmbeddings === 4096);
  const d = p({ max_position_embeddings: 512, rope_parameters: { rope_type: 'dynamic', factor: 2, rope_theta: 1e4 } });
  assert.deepEqual(d.rope, { type: 'dynamic', factor: 2, maxPositionEmbeddings: 512 });
  assert.deepEqual(ropeInvFreq(d, 512), ropeInvFreq(d, 1), 'dynamic: unscaled up to max_position_embeddings');
  assert.notDeepEqual(ropeInvFreq(d, 513), ropeInvFreq(d, 512));
});

test('RoPE types that are not implemented are refused naming the type and the file', () => {
  for (const [where, type] of [['rope_parameters', 'longrope'], ['rope_scaling', 'su'], ['rope_parameters', 'proportional'], ['rope_scaling', 'mrope'], ['rope_parameters', 'ntk-by-parts']] as const) {
    assert.throws(() => parseModelConfig({ ...base, model_type: 'qwen2', [where]: { rope_type: type, factor: 2, short_factor: [1], long_factor: [1] } }, null, 'm/config.json'),
      (e: unknown) => e instanceof SafekeepError && e.message.startsWith(`m/config.json: RoPE type "${type}" (${where}) is not supported`), type);
  }
  // a scaled type with partial_rotary_factor < 1 cannot run in transformers' classes either
  assert.throws(() => parseModelConfig({ ...base, model_type: 'llama', rope_parameters: { rope_type: 'linear', factor: 2, partial_rotary_factor: 0.5 } }, null),
    /partial_rotary_factor 0.5 with RoPE type linear rotates 8 of 16/);
  // with default RoPE transformers' Llama/Mistral/Qwen classes rotate the whole head whatever the factor: so do we
  assert.equal(ropeInvFreq(parseModelConfig({ ...base, model_type: 'llama', partial_rotary_factor: 0.5 }, null)).length, 8);
});

test('sliding windows: Mistral on every layer (4096 when absent), Qwen2/Qwen3 by use_sliding_window + max_window_layers or layer_types, Llama none', () => {
  const w = (mt: string, cfg: Record<string, unknown>) => parseModelConfig({ ...base, model_type: mt, ...cfg }, null).attentionWindows;
  assert.deepEqual(w('mistral', {}), [4096, 4096, 4096, 4096]);
  assert.deepEqual(w('mistral', { sliding_window: null }), [null, null, null, null]);
  assert.deepEqual(w('mistral', { sliding_window: 8 }), [8, 8, 8, 8]);
  assert.deepEqual(w('qwen2', { sliding_window: 4096, use_sliding_window: false, max_window_layers: 28 }), [null, null, null, null]);
  assert.deepEqual(w('qwen2', { sliding_window: 16, use_sliding_window: true, max_window_layers: 2 }), [null, null, 16, 16]);
  assert.deepEqual(w('qwen2', { use_sliding_window: true, max_window_layers: 1 }), [null, 4096, 4096, 4096]);
  assert.deepEqual(w('qwen3', { sliding_window: 16, use_sliding_window: true, layer_types: ['sliding_attention', 'full_attention', 'sliding_attention', 'full_attention'] }), [16, null, 16, null]);
  assert.deepEqual(w('qwen3', { sliding_window: null, use_sliding_window: false, layer_types: ['full_attention', 'full_attention', 'full_attention', 'full_attention'] }), [null, null, null, null]);
  assert.deepEqual(w('llama', {}), [null, null, null, null]);
  assert.throws(() => w('qwen3', { use_sliding_window: false, layer_types: ['sliding_attention', 'full_attention', 'full_attention', 'full_attention'] }), /marks sliding_attention layers but there is no window/);
  assert.throws(() => w('qwen2', { layer_types: ['full_attention'] }), /layer_types must be a list of 4/);
  assert.throws(() => w('qwen2', { layer_types: ['full_attention', 'chunked_attention', 'full_attention', 'full_attention'] }), /layer_types\[1\] "chunked_attention" is not supported/);
  assert.throws(() => w('mistral', { sliding_window: 0 }), /sliding_window must be a positive integer or null/);
});

test('forward-changing keys are refused by name (one line naming the file and the key); no-op values and harmless keys pass', () => {
  const refused: [string, Record<string, unknown>, RegExp][] = [
    ['llama', { attention_bias: true }, /attention_bias true is not supported/],
    ['qwen3', { attention_bias: true }, /attention_bias true is not supported/],
    ['llama', { mlp_bias: true }, /mlp_bias true is not supported/],
    ['llama', { attn_logit_softcapping: 50 }, /attn_logit_softcapping 50 is not supported \(tanh soft-capping of attention scores\)/],
    ['qwen2', { final_logit_softcapping: 30 }, /final_logit_softcapping 30 is not supported/],
    ['llama', { use_qk_norm: true }, /use_qk_norm true is not supported/],
    ['llama', { layer_types: ['full_attention', 'full_attention', 'full_attention', 'full_attention'] }, /layer_types .*transformers' LlamaForCausalLM does not read per-layer attention types/],
    ['mistral', { layer_types: ['sliding_attention', 'full_attention', 'sliding_attention', 'full_attention'] }, /layer_types .* MistralForCausalLM/],
    ['llama', { sliding_window: 4096 }, /sliding_window 4096 is not supported .*LlamaForCausalLM has no sliding window/],
    ['llama', { quantization_config: { quant_method: 'bnb' } }, /quantization_config .* \(quantized weights\)/],
    ['qwen2', { residual_multiplier: 0.22 }, /residual_multiplier 0.22 is not supported/],
    ['llama', { some_new_switch: true }, /config key "some_new_switch" is not known to safekeep for llama and may change the forward pass/],
  ];
  for (const [mt, extra, re] of refused) {
    assert.throws(() => parseModelConfig({ ...base, model_type: mt, ...extra }, null, 'x/config.json'),
      (e: unknown) => e instanceof SafekeepError && e.message.startsWith('x/config.json: ') && re.test(e.message) && !e.message.includes('\n'), `${mt} ${JSON.stringify(extra)}`);
  }
  const ok = parseModelConfig({
    ...base, model_type: 'llama', attention_bias: false, mlp_bias: false, attn_logit_softcapping: null, final_logit_softcapping: null,
    use_qk_norm: false, quantization_config: null, residual_multiplier: 1, architectures: ['LlamaForCausalLM'], dtype: 'bfloat16',
    transformers_version: '5.18.0', pretraining_tp: 1, initializer_range: 0.02, attention_dropout: 0, use_cache: true, _name_or_path: 'x',
  }, null);
  assert.ok(ok.configKeys.ignored.includes('pretraining_tp') && ok.configKeys.ignored.includes('dtype'));
  // SmolLM2-135M's config.json (keys as on the hub): its extra metadata keys are harmless, rope_interleaved false a no-op
  const smol = parseModelConfig({
    architectures: ['LlamaForCausalLM'], attention_bias: false, attention_dropout: 0.0, bos_token_id: 0, eos_token_id: 0, hidden_act: 'silu',
    hidden_size: 576, initializer_range: 0.041666666666666664, intermediate_size: 1536, is_llama_config: true, max_position_embeddings: 8192,
    mlp_bias: false, model_type: 'llama', num_attention_heads: 9, num_hidden_layers: 30, num_key_value_heads: 3, pad_token_id: 0,
    pretraining_tp: 1, rms_norm_eps: 1e-5, rope_interleaved: false, rope_scaling: null, rope_theta: 100000, tie_word_embeddings: true,
    torch_dtype: 'bfloat16', transformers_version: '4.42.3', 'transformers.js_config': { kv_cache_dtype: { q4f16: 'float16' } }, use_cache: true, vocab_size: 49152,
  }, null);
  assert.deepEqual(smol.rope, { type: 'default' });
  assert.equal(smol.ropeTheta, 100000);
  assert.throws(() => parseModelConfig({ ...base, model_type: 'llama', rope_interleaved: true }, null), /rope_interleaved true is not supported \(interleaved RoPE\)/);
  assert.ok(ok.configKeys.read.includes('hidden_size') && ok.configKeys.read.includes('attention_bias'));
});
