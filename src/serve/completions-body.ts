/**
 * The /v1/completions request parser (OpenAI's legacy completions API, which vLLM serves and vllm-lens's `generate`
 * and logit-lens scripts call): one raw prompt, no chat template. Every field checked, every unknown key a 400
 * naming it.
 * - `prompt`: a string, a list of token ids, or a list holding one of them (one prompt per request: several decode
 *   in the same steps when sent as several requests).
 * - `max_tokens` a positive integer; `stream`, `echo` booleans; `stream_options` `{include_usage}`; `stop` as in chat
 *   completions; `logprobs` the completions API's integer (0..20: the chosen token's and the k most likely);
 *   `suffix` null only; `best_of` 1 only; the sampling fields as chat completions has them (checkSampling).
 * - `safekeep` / `vllm_xargs`: the research fields, with `{ research: true }` only (else refused by name, as in chat).
 */
import { SafekeepError } from '../util/errors.ts';
import { parseJsonBounded } from '../util/json-bounded.ts';
import { badRequest } from '../http/errors.ts';
import { MAX_TOP_LOGPROBS } from '../engine/run/scheduler.ts';

export const COMPLETION_FIELDS = [
  'model', 'prompt', 'suffix', 'max_tokens', 'temperature', 'top_p', 'n', 'stream', 'stream_options', 'logprobs',
  'echo', 'stop', 'presence_penalty', 'frequency_penalty', 'best_of', 'logit_bias', 'user', 'seed',
] as const;

export interface CompletionRequest {
  /** the checked body (its sampling fields, `stop`) */
  body: Record<string, unknown>;
  /** the prompt as text, or as token ids */
  prompt: string | number[];
  maxTokens: number | undefined;
  stream: boolean;
  includeUsage: boolean;
  /** the completions API's `logprobs` (k: the chosen token's and the k most likely); undefined = none */
  logprobs: number | undefined;
  echo: boolean;
  research?: unknown;
  lens?: unknown;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
const given = (v: unknown) => v !== undefined && v !== null;
const show = (v: unknown) => JSON.stringify(v)?.slice(0, 40) ?? String(v);
const isIds = (v: unknown): v is number[] => Array.isArray(v) && v.length > 0 && v.every((t) => Number.isInteger(t));

function promptOf(v: unknown): string | number[] {
  if (typeof v === 'string') return v;
  if (isIds(v)) return v;
  if (Array.isArray(v) && v.length === 1 && (typeof v[0] === 'string' || isIds(v[0]))) return v[0] as string | number[];
  if (Array.isArray(v) && v.length > 1 && v.every((p) => typeof p === 'string' || isIds(p))) {
    throw badRequest(`"prompt": one prompt per request, got ${v.length} (send them as separate requests: they decode in the same steps)`);
  }
  throw badRequest(`"prompt" must be a string or a non-empty list of token ids, got ${show(v)}`);
}

export function parseCompletionRequest(raw: Buffer | string, opts: { research?: boolean } = {}): CompletionRequest {
  let b: unknown;
  try {
    b = parseJsonBounded(typeof raw === 'string' ? raw : raw.toString('utf8'), 'request body');
  } catch (e) {
    if (e instanceof SafekeepError) throw badRequest(e.message);
    throw e;
  }
  if (!isObject(b)) throw badRequest('request body must be a JSON object');
  const research = ['safekeep', 'vllm_xargs'];
  for (const k of Object.keys(b)) {
    if ((COMPLETION_FIELDS as readonly string[]).includes(k) || (opts.research && research.includes(k))) continue;
    if (research.includes(k)) throw badRequest(`"${k}": not accepted: per-request steering, interventions and activation capture are accepted only by serve --model --allow-interventions`);
    throw badRequest(`"${k}": unknown field; /v1/completions reads: ${COMPLETION_FIELDS.join(', ')}`);
  }
  if (b.prompt === undefined) throw badRequest('"prompt": missing');
  const prompt = promptOf(b.prompt);
  const maxTokens = b.max_tokens;
  if (given(maxTokens) && (!Number.isInteger(maxTokens) || (maxTokens as number) < 1)) throw badRequest(`"max_tokens" must be a positive integer, got ${show(maxTokens)}`);
  for (const k of ['stream', 'echo'] as const) if (given(b[k]) && typeof b[k] !== 'boolean') throw badRequest(`"${k}" must be a boolean, got ${show(b[k])}`);
  if (given(b.stream_options)) {
    const so = b.stream_options;
    if (!isObject(so) || Object.keys(so).some((k) => k !== 'include_usage') || (given(so.include_usage) && typeof so.include_usage !== 'boolean')) {
      throw badRequest('"stream_options" must be {"include_usage": boolean}');
    }
  }
  const lp = b.logprobs;
  if (given(lp) && (!Number.isInteger(lp) || (lp as number) < 0 || (lp as number) > MAX_TOP_LOGPROBS)) {
    throw badRequest(`"logprobs" must be an integer 0..${MAX_TOP_LOGPROBS} (the completions API's: the chosen token's and the k most likely), got ${show(lp)}`);
  }
  if (given(b.suffix)) throw badRequest('"suffix": this server completes a prompt; it does not insert text before a suffix');
  if (given(b.best_of) && b.best_of !== 1) throw badRequest(`"best_of": this server returns one greedy completion (best_of 1), got ${show(b.best_of)}`);
  if (given(b.user) && typeof b.user !== 'string') throw badRequest('"user" must be a string');
  if (given(b.seed) && !Number.isInteger(b.seed)) throw badRequest('"seed" must be an integer');
  return {
    body: b, prompt, maxTokens: given(maxTokens) ? (maxTokens as number) : undefined,
    stream: b.stream === true, includeUsage: isObject(b.stream_options) && b.stream_options.include_usage === true,
    logprobs: given(lp) ? (lp as number) : undefined, echo: b.echo === true,
    ...(opts.research && given(b.safekeep) ? { research: b.safekeep } : {}),
    ...(opts.research && given(b.vllm_xargs) ? { lens: b.vllm_xargs } : {}),
  };
}
