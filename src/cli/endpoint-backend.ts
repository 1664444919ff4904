/**
 * The flags and the backend of commands that run an agent either on the local engine or at an OpenAI-compatible
 * endpoint (`guard eval`, `s3 eval`): one declaration of each flag, one place that turns them into an
 * OpenAIBackend.
 */
import { join } from 'node:path';
import { choiceValue, numberValue, positiveIntValue, type FlagDef, type ParsedArgs } from './args.ts';
import { OpenAIBackend, type PrefillMode } from '../guard/backends/openai.ts';
import type { CallFormat } from '../experiments/outcome/types.ts';
import { apiKeyFromEnv } from './env.ts';

/** Local model flags (the engine's, without --max-memory) */
export const LOCAL_MODEL_FLAG_DEFS: readonly FlagDef[] = [
  { name: 'model', value: 'M', help: 'local checkpoint folder or Hugging Face repo id' },
  { name: 'dtype', value: 'f32|bf16|f16|bf16w|q8|q4', default: 'f32 on cpu, f16 on cuda', help: 'local model precision' },
  { name: 'device', value: 'cpu|cuda', default: 'cpu', help: 'local model device' },
  { name: 'threads', value: 'N', default: 'one per physical core', help: 'intra-op threads' },
  { name: 'template', value: 'FILE', help: 'chat template file instead of the model folder\'s' },
];

/** `--endpoint URL --endpoint-model NAME` and how to talk to it */
export const ENDPOINT_FLAG_DEFS: readonly FlagDef[] = [
  { name: 'endpoint', value: 'URL', help: 'OpenAI-compatible endpoint instead of a local model' },
  { name: 'endpoint-model', value: 'NAME', help: 'model name at the endpoint' },
  { name: 'concurrency', value: 'N', default: '4 (endpoint), 1 (local)', help: 'requests in flight' },
  { name: 'api-key-env', value: 'VAR', help: 'environment variable holding the endpoint API key' },
  { name: 'timeout-ms', value: 'MS', default: '60000', help: 'endpoint timeout' },
  { name: 'retries', value: 'N', default: '3', help: 'endpoint retries' },
  { name: 'prefill', value: 'none|continue|prefix', default: 'none', help: 'how guard verdicts are prefilled' },
  { name: 'call-format', value: 'llama3|qwen|mistral', default: 'llama3', help: 'native call syntax left in content by an endpoint' },
  { name: 'no-cache', boolean: true, help: 'do not cache endpoint answers' },
];

/** The endpoint backend of `--endpoint`; answers are cached under `<out>/cache` unless --no-cache. */
export function openEndpointBackend(
  args: ParsedArgs, endpoint: string, model: string, out: string, extraBody?: Record<string, unknown>,
): { backend: OpenAIBackend; concurrency: number } {
  const concurrency = positiveIntValue(args, 'concurrency', 4);
  const backend = new OpenAIBackend({
    baseUrl: endpoint,
    model,
    apiKey: apiKeyFromEnv('api-key-env', args.values.get('api-key-env'), 'OPENAI_API_KEY'),
    timeoutMs: numberValue(args, 'timeout-ms', 60_000),
    retries: numberValue(args, 'retries', 3),
    concurrency,
    cacheDir: args.booleans.has('no-cache') ? undefined : join(out, 'cache'),
    prefill: choiceValue<PrefillMode>(args, 'prefill', ['none', 'continue', 'prefix'], 'none'),
    callFormat: choiceValue<CallFormat>(args, 'call-format', ['llama3', 'qwen', 'mistral'], 'llama3'),
    ...(extraBody ? { extraBody } : {}),
  });
  return { backend, concurrency };
}
