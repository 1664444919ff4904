import { test } from 'node:test';
import assert from 'node:assert/strict';
import { expectedTensors, parseModelConfig } from '../src/checkpoint/config.ts';
import { SafekeepError } from '../src/util/errors.ts';

const base = { hidden_size: 64, num_attention_heads: 4, num_key_value_heads: 2, num_hidden_layers: 2, intermediate_size: 128, vocab_size: 100 };

test('parseModelConfig: head_dim defaults per family (qwen3 → 128 like Qwen3Config, others hidden/heads)', () => {
  assert.equal(parseModelConfig({ ...base, model_type: 'mistral' }, null).headDim, 16);
  assert.equal(parseModelConfig({ ...base, model_type: 'qwen2' }, null).headDim, 16);
  assert.equal(parseModelConfig({ ...base, model_type: 'qwen3' }, null).headDim, 128);
  assert.equal(parseModelConfig({ ...base, model_type: 'qwen3', head_dim: 32 }, null).headDim, 32);
  assert.equal(parseModelConfig({ ...base, model_type: 'llama', head_dim: 8 }, null).headDim, 8);
  // num_key_value_heads absent → MHA
  assert.equal(parseModelConfig({ ...base, num_key_value_heads: undefined, model_type: 'llama' }, null).numKvHeads, 4);
});

test('parseModelConfig: eos ids from generation_config (int or list), else config.json', () => {
  const c = { ...base, model_type: 'llama', eos_token_id: 9 };
  assert.deepEqual(parseModelConfig(c, null).eosTokenIds, [9]);
  assert.deepEqual(parseModelConfig(c, { eos_token_id: 7 }).eosTokenIds, [7]);
  assert.deepEqual(parseModelConfig(c, { eos_token_id: [128001, 128008, 128009] }).eosTokenIds, [128001, 128008, 128009]);
  assert.deepEqual(parseModelConfig({ ...c, eos_token_id: [3, 4] }, {}).eosTokenIds, [3, 4]);
  assert.deepEqual(parseModelConfig({ ...base, model_type: 'llama' }, null).eosTokenIds, []);
});

test('parseModelConfig: family table (qwen2 qkv bias, qwen3 qk norm) and rope_scaling', () => {
  const q2 = parseModelConfig({ ...base, model_type: 'qwen2' }, null);
  assert.equal(q2.qkvBias, true);
  assert.ok(expectedTensors(q2).has('model.layers.1.self_attn.v_proj.bias'));
  assert.ok(expectedTensors(q2).has('lm_head.weight')); // Qwen2Config default tie = false
  const q3 = parseModelConfig({ ...base, model_type: 'qwen3', head_dim: 16, tie_word_embeddings: true }, null);
  assert.deepEqual(expectedTensors(q3).get('model.layers.0.self_attn.q_norm.weight'), [16]);
  assert.ok(!expectedTensors(q3).has('lm_head.weight'));
  // old-style "type" key
  const l = parseModelConfig({ ...base, model_type: 'llama', rope_scaling: { type: 'llama3', factor: 32, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192 } }, null);
  assert.equal(l.rope.type, 'llama3');
});

test('parseModelConfig: user errors name the file and what is wrong', () => {
  assert.throws(() => parseModelConfig({ ...base, model_type: 'gemma2' }, null, 'm/config.json'),
    (e: unknown) => e instanceof SafekeepError && /m\/config\.json: model_type "gemma2" is not supported \(supported: llama, mistral, qwen2, qwen3\)/.test(e.message));
  assert.throws(() => parseModelConfig({ ...base, model_type: 'llama', hidden_size: undefined }, null, 'c.json'), /c\.json: missing hidden_size/);
  assert.throws(() => parseModelConfig({ ...base, model_type: 'llama', num_key_value_heads: 3 }, null), /not a multiple of num_key_value_heads/);
  assert.throws(() => parseModelConfig({ ...base, model_type: 'llama', rope_scaling: { rope_type: 'longrope', factor: 4 } }, null, 'c.json'), /c\.json: RoPE type "longrope" \(rope_scaling\) is not supported/);
  assert.throws(() => parseModelConfig({ ...base, model_type: 'llama', hidden_act: 'gelu' }, null), /hidden_act "gelu"/);
  assert.throws(() => parseModelConfig({ ...base, model_type: 'llama' }, { eos_token_id: 'x' }, 'c', 'g.json'), /g\.json: eos_token_id\[0\] must be a token id/);
});
