/**
 * The engine's flag rows (--model, --dtype, --device, --kv-dtype, --threads, --max-memory), every command that runs a
 * local model lists them. Only the table: reading the flags is engine-flags.ts, which loads the engine.
 */
import type { FlagDef } from './args.ts';

/** flag-table rows every model command shares (--model, --dtype, --device, --kv-dtype, --threads, --max-memory) */
export const ENGINE_FLAG_DEFS: readonly FlagDef[] = [
  { name: 'model', value: 'M', help: 'checkpoint folder or Hugging Face repo id (pulled into models/ on first use)' },
  { name: 'dtype', value: 'f32|bf16|f16|bf16w|q8|q4', default: 'f32 on cpu, f16 on cuda and webgpu', help: 'weight/compute precision' },
  { name: 'device', value: 'cpu|cuda|webgpu', default: 'cpu', help: 'execution provider (webgpu: bundled with onnxruntime-node, Vulkan on Linux; docs/engine.md, GPU)' },
  { name: 'kv-dtype', value: 'f32|f16', default: 'the compute dtype: f16 under --dtype f16 on cuda and webgpu, else f32', help: 'KV cache element type (the attention math stays f32)' },
  { name: 'threads', value: 'N', default: 'one per physical core', help: 'intra-op threads' },
  { name: 'max-memory', value: '6GB', help: 'peak-RSS budget: batches, chunks and prefix cache are planned under it' },
];
export const ENGINE_FLAGS = ENGINE_FLAG_DEFS.map((f) => f.name);
