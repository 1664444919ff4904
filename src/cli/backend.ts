/**
 * Every command's chat backend, built from its parsed flags in one place: an OpenAI-compatible endpoint
 * (`endpointBackend`: --endpoint-model, --api-key-env, --timeout-ms, --retries, --concurrency, --prefill,
 * --call-format, --no-cache), a local model (`localBackend`: template kwargs, --no-cache), or either of them as one
 * command opens it (`openChatBackend`, with the thinking setting and the identity shards record). The flag rows of
 * the commands that take both (`guard eval`, `s3 eval`) are declared here once; a command whose defaults differ
 * (a longer timeout, one call in flight) passes them, and a flag it does not declare reads as its default.
 */
import { basename, resolve } from 'node:path';
import { choiceValue, numberValue, positiveIntValue, requireValue, type FlagDef, type ParsedArgs } from './args.ts';
import type { OnnxEngine } from '../engine/engine.ts';
import type { ChatBackend } from '../guard/types.ts';
import { SafekeepError } from '../util/errors.ts';
import { OpenAIBackend, type PrefillMode } from '../chat/openai.ts';
import { LocalBackend, type LocalTokenizer } from '../chat/local.ts';
import { withAgentSampling } from '../chat/sampling.ts';
import type { SamplingSettings } from '../engine/types.ts';
import type { CallFormat } from '../outcome/types.ts';
import { apiKeyFromEnv } from './env.ts';
import { ENGINE_FLAG_DEFS } from './engine-flag-defs.ts';

/** Local model flags: the engine's (--max-memory bounds what the scheduler admits) and the chat template */
export const LOCAL_MODEL_FLAG_DEFS: readonly FlagDef[] = [
  { name: 'model', value: 'M', help: 'local checkpoint folder or Hugging Face repo id' },
  ...ENGINE_FLAG_DEFS.filter((f) => f.name !== 'model').map((f) => ({ ...f, help: `local model: ${f.help}` })),
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

/** `--FLAG URL` must name an http(s) endpoint. */
export function checkEndpointUrl(flag: string, url: string): string {
  if (!/^https?:\/\/[^/]+/.test(url)) throw new SafekeepError(`--${flag} must be an http(s) URL, got '${url}'`);
  return url;
}

/** `--no-thinking` at an endpoint: the request body that switches a Qwen3-style template's thinking off (else none). */
export function noThinkingBody(args: ParsedArgs): Record<string, unknown> | undefined {
  return args.booleans.has('no-thinking') ? { chat_template_kwargs: { enable_thinking: false } } : undefined;
}

/** What a command sets for an endpoint beyond the flags: where answers are cached, the body, its own defaults. */
export interface EndpointSettings {
  /** answers are cached here unless --no-cache; none: never cached */
  cacheDir?: string;
  /** merged into every request body (e.g. chat_template_kwargs) */
  extraBody?: Record<string, unknown>;
  /** defaults of --timeout-ms (60000), --retries (3) and --concurrency (4) where the command's differ */
  timeoutMs?: number;
  retries?: number;
  concurrency?: number;
}

/** The endpoint backend of `url` (checked by the caller, under its own flag's name) and model `model`. */
export function endpointBackend(args: ParsedArgs, url: string, model: string, s: EndpointSettings = {}): { backend: OpenAIBackend; concurrency: number } {
  const concurrency = positiveIntValue(args, 'concurrency', s.concurrency ?? 4);
  const backend = new OpenAIBackend({
    baseUrl: url,
    model,
    apiKey: apiKeyFromEnv('api-key-env', args.values.get('api-key-env'), 'OPENAI_API_KEY'),
    timeoutMs: numberValue(args, 'timeout-ms', s.timeoutMs ?? 60_000),
    retries: numberValue(args, 'retries', s.retries ?? 3),
    concurrency,
    cacheDir: args.booleans.has('no-cache') ? undefined : s.cacheDir,
    prefill: choiceValue<PrefillMode>(args, 'prefill', ['none', 'continue', 'prefix'], 'none'),
    callFormat: choiceValue<CallFormat>(args, 'call-format', ['llama3', 'qwen', 'mistral'], 'llama3'),
    ...(s.extraBody ? { extraBody: s.extraBody } : {}),
  });
  return { backend, concurrency };
}

/**
 * A local model's backend: its template rendered with `templateKwargs`. --no-cache: every call computed (identical
 * calls of different methods are otherwise answered from memory, and a latency comparison between methods would
 * time a lookup).
 */
export function localBackend(args: ParsedArgs, engine: ConstructorParameters<typeof LocalBackend>[0], tokenizer: LocalTokenizer,
  templateKwargs: Record<string, unknown> = {}): LocalBackend {
  return new LocalBackend(engine, tokenizer, { templateKwargs, ...(args.booleans.has('no-cache') ? { responseCache: 0 } : {}) });
}

/** `--model DIR` or `--endpoint URL --endpoint-model NAME`: exactly one, checked at the edge. */
export interface Target {
  model?: string;
  endpoint?: string;
  endpointModel: string;
  /** the results name when --name is not given: the model folder or the endpoint's model */
  defaultName: string;
}

/** `--model DIR` or `--endpoint URL --endpoint-model NAME`, exactly one. */
export function targetOf(args: ParsedArgs): Target {
  const t = targetIfAny(args, 'give exactly one of --model DIR or --endpoint URL');
  if (!t) throw new SafekeepError('give exactly one of --model DIR or --endpoint URL');
  return t;
}

/** At most one of `--model DIR` and `--endpoint URL --endpoint-model NAME` (none: undefined); `both` says why not both. */
export function targetIfAny(args: ParsedArgs, both = 'give at most one of --model DIR or --endpoint URL'): Target | undefined {
  const model = args.values.get('model');
  const endpoint = args.values.get('endpoint');
  if (model !== undefined && endpoint !== undefined) throw new SafekeepError(both);
  if (model !== undefined) return { model, endpointModel: '', defaultName: basename(resolve(model)) };
  if (endpoint === undefined) return undefined;
  checkEndpointUrl('endpoint', endpoint);
  const endpointModel = requireValue(args, 'endpoint-model');
  return { endpoint, endpointModel, defaultName: endpointModel };
}

/** How a command sets the template's thinking switch on either kind of backend. */
export interface ThinkingPlan {
  /** an endpoint's template is unknown here: what to send (if anything) and how to name the setting */
  endpoint(): { extraBody?: Record<string, unknown>; thinking: string; templateKwargs: Record<string, unknown> };
  /** a local model's template is known: the kwargs it renders with */
  local(template: string): Promise<{ thinking: string; templateKwargs: Record<string, unknown> }>;
}

/** `--no-thinking` or the template's own default: what `s3 eval` and `s3 fidelity` run with. */
export function noThinkingPlan(args: ParsedArgs): ThinkingPlan {
  const off = args.booleans.has('no-thinking');
  const kwargs = off ? { enable_thinking: false } : {};
  return {
    endpoint: () => ({ thinking: off ? 'off' : 'endpoint default', templateKwargs: kwargs, ...(off ? { extraBody: { chat_template_kwargs: kwargs } } : {}) }),
    local: async () => ({ thinking: off ? 'off' : 'template default', templateKwargs: kwargs }),
  };
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

/** Where an opened endpoint caches its answers, and what runs before any weights load. */
export interface OpenOptions {
  /** endpoint answers are cached here unless --no-cache; none: never cached */
  cacheDir?: string;
  /** runs once the thinking setting is known and before any weights load (a budget that cannot work stops there) */
  beforeLoad?: (thinking: string) => void;
  /** every agent call samples with these settings (guard eval / s3 eval --temperature …); judge calls stay greedy */
  agentSampling?: SamplingSettings;
}

/** The one opener of a model or endpoint: the endpoint backend, or the local engine + tokenizer behind a LocalBackend. */
export async function openChatBackend(args: ParsedArgs, t: Target, plan: ThinkingPlan, o: OpenOptions = {}): Promise<OpenedBackend> {
  const beforeLoad = o.beforeLoad ?? (() => {});
  if (t.endpoint !== undefined) {
    const e = plan.endpoint();
    beforeLoad(e.thinking);
    const { backend, concurrency } = endpointBackend(args, t.endpoint, t.endpointModel, { cacheDir: o.cacheDir, extraBody: e.extraBody });
    return { backend: withAgentSampling(backend, o.agentSampling), concurrency, templateHash: 'none (endpoint)', identity: `${t.endpoint} ${t.endpointModel}`, thinking: e.thinking, templateKwargs: e.templateKwargs, dispose: async () => {} };
  }
  const { openEngine } = await import('./engine-flags.ts');
  const { loadPromptTokenizer } = await import('../prompts/tokenizer.ts');
  const tokenizer = await loadPromptTokenizer(t.model!, { template: args.values.get('template') });
  const l = await plan.local(tokenizer.template);
  beforeLoad(l.thinking);
  const engine = await openEngine(args);
  return {
    backend: withAgentSampling(localBackend(args, engine, tokenizer, l.templateKwargs), o.agentSampling),
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
