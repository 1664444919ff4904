/**
 * The flags and the backend of commands that run an agent either on the local engine or at an OpenAI-compatible
 * endpoint (`guard eval`, `s3 eval`): one declaration of each flag, one place that turns them into an
 * OpenAIBackend.
 */
import { basename, join, resolve } from 'node:path';
import { choiceValue, numberValue, positiveIntValue, requireValue, type FlagDef, type ParsedArgs } from './args.ts';
import type { OnnxEngine } from '../engine/engine.ts';
import type { ChatBackend } from '../guard/types.ts';
import { SafekeepError } from '../util/errors.ts';
import { OpenAIBackend, type PrefillMode } from '../chat/openai.ts';
import type { CallFormat } from '../outcome/types.ts';
import { apiKeyFromEnv } from './env.ts';

/** Local model flags (the engine's, without --max-memory) */
export const LOCAL_MODEL_FLAG_DEFS: readonly FlagDef[] = [
  { name: 'model', value: 'M', help: 'local checkpoint folder or Hugging Face repo id' },
  { name: 'dtype', value: 'f32|bf16|f16|bf16w|q8|q4', default: 'f32 on cpu, f16 on cuda and webgpu', help: 'local model precision' },
  { name: 'device', value: 'cpu|cuda|webgpu', default: 'cpu', help: 'local model device' },
  { name: 'kv-dtype', value: 'f32|f16', default: 'f32 on cpu, f16 on cuda and webgpu', help: 'local model KV cache element type' },
  { name: 'threads', value: 'N', default: 'one per physical core', help: 'intra-op threads' },
  { name: 'template', value: 'FILE', help: 'chat template file instead of the model folder\'s' },
];

/** `--endpoint URL --endpoint-model NAME` and how to talk to it */
export const ENDPOINT_FLAG_DEFS: readonly FlagDef[] = [
  { name: 'endpoint', value: 'URL', help: 'OpenAI-compatible endpoint instead of a local model' },
  { name: 'endpoint-model', value: 'NAME', help: 'model name at the endpoint' },
  { name: 'concurrency', value: 'N', default: '4 (endpoint), 8 (local)', help: 'calls in flight (a local model decodes them together on its scheduler; --max-memory bounds what it admits)' },
  { name: 'api-key-env', value: 'VAR', help: 'environment variable holding the endpoint API key' },
  { name: 'timeout-ms', value: 'MS', default: '60000', help: 'endpoint timeout' },
  { name: 'retries', value: 'N', default: '3', help: 'endpoint retries' },
  { name: 'prefill', value: 'none|continue|prefix', default: 'none', help: 'how guard verdicts are prefilled' },
  { name: 'call-format', value: 'llama3|qwen|mistral', default: 'llama3', help: 'native call syntax left in content by an endpoint' },
  { name: 'no-cache', boolean: true, help: 'do not cache endpoint answers (local model: no in-memory reply cache either)' },
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

/** `--model DIR` or `--endpoint URL --endpoint-model NAME`: exactly one, checked at the edge. */
export interface Target {
  model?: string;
  endpoint?: string;
  endpointModel: string;
  /** the results name when --name is not given: the model folder or the endpoint's model */
  defaultName: string;
}

export function targetOf(args: ParsedArgs): Target {
  const model = args.values.get('model');
  const endpoint = args.values.get('endpoint');
  if ((model === undefined) === (endpoint === undefined)) throw new SafekeepError('give exactly one of --model DIR or --endpoint URL');
  if (endpoint !== undefined && !/^https?:\/\/[^/]+/.test(endpoint)) throw new SafekeepError(`--endpoint must be an http(s) URL, got '${endpoint}'`);
  const endpointModel = endpoint !== undefined ? requireValue(args, 'endpoint-model') : '';
  return { ...(model !== undefined ? { model } : {}), ...(endpoint !== undefined ? { endpoint } : {}), endpointModel, defaultName: model !== undefined ? basename(resolve(model)) : endpointModel };
}

/** How a command sets the template's thinking switch on either kind of backend. */
export interface ThinkingPlan {
  /** an endpoint's template is unknown here: what to send (if anything) and how to name the setting */
  endpoint(): { extraBody?: Record<string, unknown>; thinking: string; templateKwargs: Record<string, unknown> };
  /** a local model's template is known: the kwargs it renders with */
  local(template: string): Promise<{ thinking: string; templateKwargs: Record<string, unknown> }>;
}

/** calls in flight on a local model by default: enough to fill a decode batch of the workloads' agent and judge calls */
export const LOCAL_CONCURRENCY = 8;

/** A model or endpoint opened once for a command: what every evaluation needs from it. */
export interface OpenedBackend {
  backend: ChatBackend;
  /** --concurrency: calls in flight (4 at an endpoint, 8 locally unless given) */
  concurrency: number;
  /** the chat template's hash (local) or 'none (endpoint)' */
  templateHash: string;
  /** the model as shard records name it (must agree across shards) */
  identity: string;
  thinking: string;
  templateKwargs: Record<string, unknown>;
  /** local models: the engine and checkpoint folder (probes read their hidden states) */
  engine?: OnnxEngine;
  modelDir?: string;
  dispose(): Promise<void>;
}

/**
 * The one opener of `guard eval` and `s3 eval`: the endpoint backend (answers cached under `<out>/cache`) or the
 * local engine + tokenizer behind a LocalBackend. `beforeLoad` runs once the thinking setting is known and before
 * any weights load (a budget that cannot work stops there).
 */
export async function openChatBackend(args: ParsedArgs, t: Target, out: string, plan: ThinkingPlan,
  beforeLoad: (thinking: string) => void = () => {}): Promise<OpenedBackend> {
  if (t.endpoint !== undefined) {
    const e = plan.endpoint();
    beforeLoad(e.thinking);
    const { backend, concurrency } = openEndpointBackend(args, t.endpoint, t.endpointModel, out, e.extraBody);
    return { backend, concurrency, templateHash: 'none (endpoint)', identity: `${t.endpoint} ${t.endpointModel}`, thinking: e.thinking, templateKwargs: e.templateKwargs, dispose: async () => {} };
  }
  const { openEngine } = await import('./engine-flags.ts');
  const { loadPromptTokenizer } = await import('../prompts/tokenizer.ts');
  const { LocalBackend } = await import('../chat/local.ts');
  const tokenizer = await loadPromptTokenizer(t.model!, { template: args.values.get('template') });
  const l = await plan.local(tokenizer.template);
  beforeLoad(l.thinking);
  const engine = await openEngine(args);
  return {
    // --no-cache: every call computed (identical calls of different methods are otherwise answered from memory,
    // and a latency comparison between methods would time a lookup)
    backend: new LocalBackend(engine, tokenizer, { templateKwargs: l.templateKwargs, ...(args.booleans.has('no-cache') ? { responseCache: 0 } : {}) }),
    // the scheduler decodes concurrent calls in one batch and shares their prompts' prefix blocks; a sequence it
    // cannot admit under --max-memory waits, so more calls in flight cost memory only up to the plan
    concurrency: positiveIntValue(args, 'concurrency', LOCAL_CONCURRENCY),
    templateHash: tokenizer.templateHash,
    identity: `${basename(resolve(t.model!))} ${args.values.get('dtype') ?? 'default dtype'}`,
    thinking: l.thinking,
    templateKwargs: l.templateKwargs,
    engine,
    modelDir: resolve(t.model!),
    dispose: () => engine.dispose(),
  };
}
