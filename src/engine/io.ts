/**
 * The graph's I/O contract: the names of the session's inputs and outputs and their shapes, shared by the graph
 * builder (graph.ts) and everything that feeds or reads a session (engine.ts, batch.ts, kv.ts).
 */

/** Names of the graph's inputs and outputs (the session contract). */
export const IO = {
  inputIds: 'input_ids', // int64 [B, T]
  positionIds: 'position_ids', // int64 [B, T]
  attnBias: 'attn_bias', // f32 [B, T, C + T], C = past buffer capacity; 0 = visible, large negative = masked (kv.ts capacityBias)
  attnBiasWindow: 'attn_bias_window', // f32 [B, T, C + T]: attn_bias with the sliding window too; only when a layer has one
  ropeInvFreq: 'rope_inv_freq', // f32 [B, hd/2]: RoPE inverse frequencies per row (rope.ts ropeInvFreq)
  steer: 'steer', // f32 [L+1, d]; row l is added to hidden[l]
  hiddenIndex: 'hidden_index', // int64 [N], flat indices into B*T
  logitsIndex: 'logits_index', // int64 [M]
  pastKey: (l: number) => `past_key.${l}`, // f32 [B, kvH, C, hd]: the KV buffer (slots beyond the filled ones masked)
  pastValue: (l: number) => `past_value.${l}`,
  hidden: 'hidden', // f32 [L+1, N, d]
  logits: 'logits', // f32 [M, V]
  newKey: (l: number) => `new_key.${l}`, // f32 [B, kvH, T, hd]: the new slots only (the engine writes them into the buffer)
  newValue: (l: number) => `new_value.${l}`,
} as const;

/** Additive mask value for hidden keys (finite, so fully masked pad rows stay finite). */
export const MASKED = -1e9;
