/**
 * `safekeep serve --model DIR`: an OpenAI-compatible chat-completions server whose agent is the local engine,
 * guarded by `guardedRespond` — base, safekeep (judge with the same model), refusal-probe (the probe reads the
 * agent call's own prefill: no extra model call), safekeep+probe, probe-cascade (the probe decides outside its
 * calibrated band, the judge inside it) or probe-steer (a flagged request answered by the steered model) — as a handler on the one HTTP core
 * (`src/http/server.ts`: access policy, canonical paths, limits, JSON errors).
 *
 * - `POST /v1/chat/completions` with tools: guarded; without tools: the plain agent call. Calls the model wrote in
 *   its native syntax are also returned as `tool_calls`; end-of-turn tokens are stripped from the content.
 *   `stream: true`: without tools the text as it is generated (SSE chunks; an error after the first chunk ends the
 *   stream with an `error` event and no [DONE]); with tools the finished answer, its calls parsed, as SSE (with a
 *   usage chunk when `stream_options.include_usage`).
 *   `finish_reason`: `tool_calls`, `length` (cut by max_tokens) or `stop`. `stop` (at most 4 strings of at most 128
 *   characters) ends each request's own generation at its first stop string, which the answer does not include.
 *   Sampling (sampling-fields.ts): greedy unless the request names a temperature above 0 (OpenAI's default is 1);
 *   `temperature`, `top_p`, `seed`, `frequency_penalty`, `presence_penalty`, `logit_bias` and vLLM's `top_k`, `min_p`,
 *   `repetition_penalty` apply to the agent's calls (a judge stays greedy); `n` choices (not streamed) run seeds
 *   seed, seed + 1, …; a sampled reply reports its seed (`x-safekeep-seed`, body `safekeep.seed`), drawn when the
 *   request named none; /v1/completions decodes greedily (a sampling field there is a 400). `response_format` and
 *   `tool_choice` are refused unless at their no-op value. `logprobs` / `top_logprobs` (k ≤ 20)
 *   return OpenAI's `choices[0].logprobs.content` (streamed: each chunk with its tokens'), unguarded requests only.
 * - `research` (`serve --model --allow-interventions`, method base only): the request field `safekeep` — per-request
 *   steering, interventions and activation capture (research.ts, docs/serve-research.md); each request's own
 *   sets decode in the same steps as the others'. Without it the field is a 400 naming it.
 * - `POST /v1/completions` (`rawPrompts`, method base only): a raw prompt continued without a template, OpenAI's
 *   completions shape (local-completions.ts); the research fields as here. A guarded server has no such route.
 * - `GET /v1/models` lists the one model. Anything else → 404 JSON.
 * - Bounded: at most 2048 messages and 128 tools (OpenAI's bounds); max_tokens at most `maxTokensLimit`; prompt +
 *   max_tokens above the context length → 400 in vLLM's wording, before any generation (the
 *   prompt is counted by rendering and encoding, stopped once past the context); at most `maxQueue` requests are
 *   admitted at once (running or waiting), more → 429 with `Retry-After`; each request has a deadline
 *   (`requestTimeoutMs`, → 504) and is cancelled — generation stops at the next step — when its client leaves.
 * - Fails closed: an error while the model runs (a step, the judge, the probe) is that request's 500 with no answer
 *   and no internals (the log has the message); the others are answered.
 * - Headers: `x-safekeep-action: forward|refuse|steer`, `x-safekeep-verdict` (judge, when one ran),
 *   `x-safekeep-probe-score` (when the probe ran), `x-safekeep-probe-band` (probe-cascade: run|judge|refuse). One
 *   JSON log line per request (method, verdict, probe score and band, latencies, the guard's cost).
 */
import type { Server } from 'node:http';
import { parseToolCalls, stripEndTokens } from '../outcome/parse-calls.ts';
import { contextLengthMessage } from './context-length.ts';
import { sendCompletion } from './completion.ts';
import { HttpError, badRequest, sendJson } from '../http/errors.ts';
import { MAX_TOOLS, parseChatRequest, stopStrings, type ChatRequest } from '../chat/body.ts';
import { SchemaBoundError } from '../prompts/flatten.ts';
import { judgeCall } from '../guard/judge.ts';
import { createHttpServer, type Exchange, type ServerLimits } from '../http/server.ts';
import { SseStream, usageOf } from '../http/sse.ts';
import { redactSecrets } from '../http/upstream.ts';
import { isSafekeepError } from '../util/errors.ts';
import { guardedRespond, plannedCalls, type GuardedResponse, type GuardOptions } from '../guard/respond.ts';
import type { ChatBackend, ChatCall, GuardMethod, ResearchCall } from '../guard/types.ts';
import { DEFAULT_MAX_CAPTURE_BYTES, logprobsOf, parseResearchField, resolveCapture, type ResearchOptions } from './research.ts';
import { parseLensXargs } from './vllm-lens.ts';
import { callWithin, capturedBody, hasEdits, liveText, researchRespond, withSignal, type Live } from './local-call.ts';
import { zstdReady } from './lens-tensor.ts';
import { completionsHandler, type RawPrompts } from './local-completions.ts';
import { withAgentSampling } from '../chat/sampling.ts';
import { samplingFields, type RequestSampling } from './sampling-fields.ts';

export interface LocalServerOptions extends GuardOptions {
  backend: ChatBackend;
  method: GuardMethod;
  /** requests answered unjudged (method base) by the operator's choice: 'no-tools' = those without `tools` (default: none) */
  passUnjudged?: readonly 'no-tools'[];
  /** the model id reported to clients */
  modelName: string;
  /** default agent answer budget when the client gives none (default 256) */
  defaultMaxTokens?: number;
  /** the most tokens a client may ask for (`max_tokens` / `max_completion_tokens` above it → 400); none = the context bounds it */
  maxTokensLimit?: number;
  log?: (line: string) => void;
  /** default 16 MiB */
  maxBodyBytes?: number;
  /** the model's context length (max_position_embeddings, or --max-model-len); none = not checked */
  contextLength?: number;
  /** prompt tokens of a call, counting stopped once above `limit` (`exact: false` then) */
  countPromptTokens?: (call: ChatCall, limit: number) => { tokens: number; exact: boolean };
  /** requests admitted at once, running or waiting (default 8) */
  maxQueue?: number;
  /** per-request deadline (default 10 min) */
  requestTimeoutMs?: number;
  clientKey?: string;
  corsOrigins?: readonly string[];
  allowedHosts?: readonly string[];
  limits?: ServerLimits;
  /** text never shown to a client (the model folder, the template file): *** in the messages of its 400s */
  hidden?: readonly string[];
  /**
   * `--allow-interventions`: the request field `safekeep` (per-request steering, interventions, capture; research.ts)
   * is accepted, checked against these shapes and bounds. Only with method 'base': a guard never runs a client's
   * steering. Absent: the field is a 400 naming it.
   */
  research?: ResearchOptions;
  /** the model's vocabulary size: a `logit_bias` id at or above it is a 400 (none: not checked before generation) */
  vocabSize?: number;
  /**
   * `POST /v1/completions` (a raw prompt, no template; local-completions.ts) with method base only — `--method base`
   * or `--allow-interventions`; a guarded server has no such route (404)
   */
  rawPrompts?: RawPrompts;
}


// the `stop` bounds and parser live with the one request parser (the proxy bounds `stop` too); re-exported here
export { MAX_STOP_CHARS, MAX_STOP_STRINGS, stopStrings } from '../chat/body.ts';

/**
 * OpenAI's bounds on a request's arrays (its API refuses longer ones). The chat template renders every message before
 * the prompt can be counted, so without them a 16 MiB body of tiny messages holds the event loop — and with it every
 * client's decoding — for seconds.
 */
export const MAX_MESSAGES = 2048;
export { MAX_TOOLS };

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
const show = (v: unknown) => JSON.stringify(v)?.slice(0, 40) ?? String(v);

/** Fields that change the answer in ways this engine does not do: accepted at their no-op value only. */
const NO_OP: Readonly<Record<string, { ok: (v: unknown) => boolean; says: string }>> = {
  response_format: { ok: (v) => isObject(v) && v.type === 'text', says: 'answers in text (response_format text)' },
  tool_choice: { ok: (v) => v === 'auto', says: 'lets the model choose its tool calls (tool_choice auto)' },
  parallel_tool_calls: { ok: (v) => v === true, says: 'lets the model make several calls in one turn (parallel_tool_calls true)' },
  // the template's switches are the server's (--chat-template-kwargs, --thinking): a client's would change the prompt
  chat_template_kwargs: { ok: (v) => isObject(v) && Object.keys(v).length === 0, says: 'sets template switches at start (--chat-template-kwargs, --thinking), not per request' },
  reasoning_effort: { ok: () => false, says: 'has no reasoning effort setting (thinking is --thinking on|off)' },
};

/**
 * The sampling fields of a request (sampling-fields.ts: ranges, and a filter or n without a temperature is a 400) and
 * the fields of NO_OP, refused unless at their no-op value (an answer the client did not ask for is worse than a clear
 * 400). Unknown fields never get here: the one request parser (chat/body.ts) refuses them by name.
 */
export function checkSampling(b: Record<string, unknown>, vocabSize?: number): RequestSampling {
  for (const [key, r] of Object.entries(NO_OP)) {
    const v = b[key];
    if (v !== undefined && v !== null && !r.ok(v)) throw badRequest(`"${key}": this server ${r.says}, got ${show(v)}`);
  }
  const sampling = samplingFields(b, { vocabSize });
  if (sampling.n > 1 && b.stream === true) throw badRequest(`"n": this server streams one choice; send "stream": false for ${sampling.n} choices`);
  return sampling;
}

/** /v1/completions decodes greedily: a field that would sample or penalise there is a 400 naming it */
function greedyCompletion(b: Record<string, unknown>): void {
  const s = checkSampling(b);
  if (!s.settings && s.n === 1) return;
  const field = ['temperature', 'n', 'top_p', 'top_k', 'min_p', 'repetition_penalty', 'frequency_penalty', 'presence_penalty', 'logit_bias']
    .find((k) => b[k] !== undefined && b[k] !== null) ?? 'temperature';
  throw badRequest(`"${field}": /v1/completions decodes greedily on this server; sample through /v1/chat/completions`);
}

/** the agent's sampling for choice i: seed + i */
const choiceSampling = (s: RequestSampling, i: number) => (s.settings && i > 0 ? { ...s.settings, seed: s.settings.seed! + i } : s.settings);

/** A request past its checks: what its guarded call needs. */
interface Admitted {
  c: ChatRequest;
  messages: ChatRequest['messages'];
  tools: ChatRequest['tools'];
  method: GuardMethod;
  /** the agent answer budget (shrunk to the context when the client gave none) */
  maxTokens: number;
  stop: ReturnType<typeof stopStrings>;
  /** the research field when it asks something (an empty one leaves the request a plain one: cache, live streaming) */
  rq: ReturnType<typeof parseResearchField> | null;
  /** the research fields came as vllm-lens's `vllm_xargs` (its response shape: top-level `activations`) */
  lens: boolean;
  topLogprobs: number | undefined;
  sampling: RequestSampling;
}

/** The request's own checks, in the client's terms (400s), before any counting or generation. */
function admit(c: ChatRequest, o: LocalServerOptions): Admitted {
  if (c.nonTextParts.length > 0) throw badRequest(`${c.nonTextParts[0]}: this server reads text only`);
  const { messages, tools } = c;
  if (messages.length > MAX_MESSAGES) throw badRequest(`"messages": at most ${MAX_MESSAGES} messages, got ${messages.length}`);
  const sampling = checkSampling(c.body, o.vocabSize);
  // a tool schema the judge's view cannot be built for ($ref/allOf fan-out, a bad pointer) is the client's 400 now,
  // not a 500 once the judge is called
  if (tools.length > 0) {
    try {
      judgeCall(messages, tools, { toolView: 'prose' });
    } catch (e) {
      if (e instanceof SchemaBoundError) throw badRequest(e.message);
      throw e;
    }
  }
  const stop = stopStrings(c.body);
  const limit = o.maxTokensLimit;
  if (limit !== undefined && c.maxTokens !== undefined && c.maxTokens > limit) {
    const field = c.body.max_completion_tokens !== undefined && c.body.max_completion_tokens !== null ? 'max_completion_tokens' : 'max_tokens';
    throw badRequest(`"${field}" ${c.maxTokens} is above this server's limit of ${limit} tokens`);
  }
  const maxTokens = c.maxTokens ?? Math.min(o.defaultMaxTokens ?? 256, limit ?? Infinity);
  // every request meets the guard (a prompted agent's tools are in its messages), unless the operator lets
  // tool-less ones through by name
  const method: GuardMethod = tools.length || !o.passUnjudged?.includes('no-tools') ? o.method : 'base';
  // research fields (research.ts): checked before any counting or generation
  if (c.research !== undefined && c.lens !== undefined) throw badRequest('"safekeep" and "vllm_xargs": send one of them');
  const lens = c.lens !== undefined;
  const parsed = !o.research ? null : lens ? parseLensXargs(c.lens, o.research) : parseResearchField(c.research, o.research);
  const rq = parsed && (hasEdits(parsed.edits) || parsed.capture) ? parsed : null;
  const topLogprobs = logprobsOf(c.body);
  if (topLogprobs !== undefined && !o.backend.activations) throw badRequest('"logprobs": this server\'s backend returns no log probabilities');
  if (topLogprobs !== undefined && method !== 'base') throw badRequest(`"logprobs": not under the guard (method ${method}); the answer may be the guard's refusal`);
  if (sampling.n > 1 && rq?.capture) throw badRequest('"n": activations are captured for one choice; send n = 1');
  return { c, messages, tools, method, maxTokens, stop, rq, lens, topLogprobs, sampling };
}

/**
 * Prompt + answer within the context, for the agent call and every call the guard will make for this request (the
 * SafePrompt agent prompt, the judge's context, the refusal): 400s in vLLM's wording before anything runs. A client
 * that gave no max_tokens gets the room that is left.
 */
function fitContext(x: Exchange, o: LocalServerOptions, a: Admitted): void {
  const N = o.contextLength;
  const count = o.countPromptTokens;
  if (N === undefined || !count) return;
  const counted = (call: ChatCall) => {
    try {
      return count(call, N);
    } catch (e) {
      // the chat template refusing this conversation is the client's 400, in its words, but not the server's paths
      if (isSafekeepError(e)) throw badRequest(redactSecrets(e.message, o.hidden ?? []));
      throw e;
    }
  };
  const p = counted({ messages: a.messages, tools: a.tools, maxTokens: a.maxTokens, purpose: 'agent' });
  x.entry.promptTokens = p.tokens;
  if (a.c.maxTokens === undefined && p.exact && p.tokens < N) a.maxTokens = Math.min(a.maxTokens, N - p.tokens);
  if (p.tokens + a.maxTokens > N) throw badRequest(contextLengthMessage(N, p.tokens, a.maxTokens, p.exact));
  for (const call of plannedCalls({ messages: a.messages, tools: a.tools }, a.method, { ...o, maxTokens: a.maxTokens, stop: a.stop })) {
    if (call.purpose === 'agent' && a.method !== 'safeprompt') continue;
    const q = counted(call);
    if (q.tokens + call.maxTokens > N) throw badRequest(`the guard's ${call.purpose} call for this request does not fit: ${contextLengthMessage(N, q.tokens, call.maxTokens, q.exact)}`);
  }
}

/** The agent call's research options (capture, log probabilities; its edits are `rq.edits`), and what the log says of them. */
function researchOf(x: Exchange, o: LocalServerOptions, a: Admitted): ResearchCall | undefined {
  const { rq, topLogprobs } = a;
  if (!rq && topLogprobs === undefined) return undefined;
  const research: ResearchCall = { ...(topLogprobs !== undefined ? { topLogprobs } : {}) };
  if (rq?.capture) {
    const count = o.countPromptTokens;
    if (!count) throw badRequest('safekeep.capture: this server cannot count prompt tokens');
    const n = count({ messages: a.messages, tools: a.tools, maxTokens: a.maxTokens, purpose: 'agent' }, Infinity).tokens;
    research.capture = resolveCapture(rq.capture, n, a.maxTokens, o.research!.maxCaptureBytes ?? DEFAULT_MAX_CAPTURE_BYTES);
  }
  // no vectors, no client text
  x.entry.research = {
    steer: rq?.steer ?? null, interventions: (rq?.edits.interventions?.length ?? 0) - (rq?.steer ? 1 : 0) + (rq?.edits.hooks?.length ?? 0),
    capture: rq?.capture ? rq.capture.hooks.length : 0, logprobs: research.topLogprobs ?? null, ...(rq?.edits.saes?.length ? { saes: rq.edits.saes.length } : {}),
  };
  return research;
}

/**
 * The answer: headers and log fields from the guard's response (the first choice's: the guard's verdict and probe do
 * not depend on the agent's sampling), each choice's calls parsed, then JSON, SSE or the live stream's end.
 */
function sendReply(x: Exchange, o: LocalServerOptions, a: Admitted, done: readonly GuardedResponse[], live: Live | null, research: ResearchCall | undefined): void {
  const { c, tools, method, rq, topLogprobs } = a;
  const r = done[0]!;
  const researchReply = r.reply.research;
  const action = r.blocked ? 'refuse' : r.steered ? 'steer' : 'forward';
  const headers: Record<string, string> = { 'x-safekeep-action': action, 'x-safekeep-method': method };
  if (r.judge) headers['x-safekeep-verdict'] = r.judge.verdict;
  if (r.probe) headers['x-safekeep-probe-score'] = r.probe.score.toFixed(6);
  if (r.probe?.band) headers['x-safekeep-probe-band'] = r.probe.band;
  const seed = a.sampling.settings?.seed;
  if (seed !== undefined) headers['x-safekeep-seed'] = String(seed);
  Object.assign(x.entry, {
    guard: method, tools: tools.length, action, verdict: r.judge?.verdict ?? null, judgeMs: r.judge ? Math.round(r.judge.latencyMs) : null,
    probeScore: r.probe?.score ?? null, probeUnsafe: r.probe?.unsafe ?? null, probeMs: r.probe?.latencyMs ?? null,
    probeBand: r.probe?.band ?? null, judgeCalls: r.cost.judgeCalls, guardTokens: r.cost.guardTokens, guardMs: Math.round(r.cost.guardMs),
    ...(a.sampling.settings ? { sampling: { ...a.sampling.settings, logitBias: undefined, n: a.sampling.n, seedDrawn: a.sampling.seedDrawn } } : {}),
  });
  const turns = done.map((d) => {
    const content = stripEndTokens(d.reply.content);
    const calls = d.blocked || tools.length === 0 ? [] : parseToolCalls(content, o.backend.callFormat).calls;
    const toolCalls = calls.map((k, i) => ({ id: `call_${i}`, type: 'function', function: { name: k.name, arguments: JSON.stringify(k.arguments) } }));
    const finish = toolCalls.length ? 'tool_calls' : d.reply.finish === 'length' ? 'length' : 'stop';
    return {
      content, toolCalls, finish, promptTokens: d.reply.promptTokens, completionTokens: d.reply.completionTokens,
      ...(topLogprobs !== undefined ? { logprobs: { content: d.reply.research?.logprobs ?? [], refusal: null } } : {}),
    };
  });
  const captured = capturedBody(rq, a.lens, research, researchReply, o.research?.hiddenSize ?? 0);
  if (live) {
    x.entry.status = 200;
    const t = turns[0]!;
    const usage = usageOf(t.promptTokens, t.completionTokens);
    // the log probabilities of the tokens not sent with a piece (held back to the end: an end-of-turn token)
    const rest = topLogprobs !== undefined ? (researchReply?.logprobs ?? []).slice(live.lpSent) : [];
    const body = withSeed(captured?.body, seed);
    if (!live.stream.finish({
      content: t.content, toolCalls: t.toolCalls, finish: t.finish, usage: c.includeUsage ? usage : undefined,
      ...(rest.length ? { logprobs: { content: rest, refusal: null } } : {}),
      ...(body ? (captured?.ownChunk ? { tailEvent: body } : { finishExtra: body }) : {}),
    }, headers)) x.entry.status = 500;
    return;
  }
  const body = withSeed(captured?.body, seed);
  sendCompletion(x, c, o.modelName, turns, headers, { ...(captured ?? {}), ...(body ? { body } : {}) });
}

/** a sampled reply's seed in the body's `safekeep` object (beside captured activations when there are) */
function withSeed(body: Record<string, unknown> | undefined, seed: number | undefined): Record<string, unknown> | undefined {
  if (seed === undefined) return body;
  const own = body?.safekeep && typeof body.safekeep === 'object' ? body.safekeep as Record<string, unknown> : {};
  return { ...body, safekeep: { ...own, seed } };
}

/**
 * The request's call: a research call (steering, interventions, capture, log probabilities; method base) straight to
 * the backend, every other through the guard; a live stream's text (and log probabilities) as generated.
 */
function runChat(o: LocalServerOptions, a: Admitted, research: ResearchCall | undefined, live: Live | null, choice = 0) {
  return (signal: AbortSignal): Promise<GuardedResponse> => {
    // the agent's calls sample (choice i with seed + i); a judge's stay greedy
    const backend = withAgentSampling(withSignal(o.backend, signal), choiceSampling(a.sampling, choice));
    if (research) {
      return researchRespond(backend, {
        messages: a.messages, tools: a.tools, maxTokens: a.maxTokens, purpose: 'agent', research, ...(a.stop?.length ? { stop: a.stop } : {}),
        ...(hasEdits(a.rq?.edits) ? { edits: a.rq.edits } : {}),
        ...(live ? { onText: liveText(live, (content) => ({ content, refusal: null })) } : {}),
      });
    }
    return guardedRespond({ messages: a.messages, tools: a.tools }, a.method, backend, {
      ...o, maxTokens: a.maxTokens, stop: a.stop,
      // a judge on its own backend is cancelled with the request too
      ...(o.judgeBackend ? { judgeBackend: withSignal(o.judgeBackend, signal) } : {}),
      ...(live ? { onText: (d: string) => live.stream.write(d) } : {}),
    });
  };
}

export function createLocalServer(o: LocalServerOptions): Server {
  if (o.research && o.method !== 'base') throw new Error(`createLocalServer: research fields (--allow-interventions) need method base, not ${o.method}: a guard never runs a client's steering`);
  const maxQueue = o.maxQueue ?? 8;
  const deadlineMs = o.requestTimeoutMs ?? 600_000;
  let admitted = 0;
  /** running mean of request seconds, for Retry-After */
  let meanSeconds = 1;

  /** a handler inside the admission queue: at most maxQueue requests at once, more → 429 */
  const queued = (handle: (x: Exchange) => Promise<void>) => async (x: Exchange): Promise<void> => {
    if (admitted >= maxQueue) {
      const wait = Math.max(1, Math.ceil(meanSeconds * (admitted - maxQueue + 1)));
      throw new HttpError(429, 'rate_limit_error', `server busy: ${admitted} requests admitted (at most ${maxQueue}); retry after ${wait} s`, {}, { 'retry-after': String(wait) });
    }
    admitted++;
    const t0 = performance.now();
    try {
      await handle(x);
    } finally {
      admitted--;
      meanSeconds = 0.8 * meanSeconds + 0.2 * ((performance.now() - t0) / 1000);
    }
  };

  const chatAdmitted = async (x: Exchange): Promise<void> => {
    const c = parseChatRequest(await x.body(), { research: o.research !== undefined });
    // vllm-lens's tensors are zstd frames (a WebAssembly module, instantiated on first use)
    if (c.lens !== undefined) await zstdReady();
    const a = admit(c, o);
    fitContext(x, o, a);
    const research = researchOf(x, o, a);
    // without tools the answer is the model's text as it comes, with its log probabilities (with tools it is parsed
    // for calls when finished); captured activations come with the end
    const live = a.c.stream && a.tools.length === 0 ? { stream: new SseStream(x.res, x.id, o.modelName, { 'x-safekeep-action': 'forward', 'x-safekeep-method': a.method }), lpSent: 0 } : null;
    // n choices: the request n times with seeds seed, seed + 1, … in flight together (the scheduler batches them, the
    // prefix cache shares their prompt); an answer only when every one finished
    const done = await Promise.all(Array.from({ length: a.sampling.n }, (_, i) => callWithin(x, live?.stream ?? null, deadlineMs, runChat(o, a, research, live, i))));
    if (done.every((d) => d !== null)) sendReply(x, o, a, done as GuardedResponse[], live, research);
  };

  return createHttpServer({
    routes: {
      'chat/completions': { methods: ['POST'], handle: queued(chatAdmitted) },
      // raw prompts only where no guard runs: a judge reads a conversation
      ...(o.rawPrompts && o.method === 'base' ? {
        completions: { methods: ['POST'], handle: queued(completionsHandler({ ...o, raw: o.rawPrompts, checkSampling: greedyCompletion, deadlineMs })) },
      } : {}),
      models: {
        methods: ['GET'],
        handle: async (x) => sendJson(x.res, 200, { object: 'list', data: [{ id: o.modelName, object: 'model', owned_by: 'safekeep', ...(o.contextLength ? { max_model_len: o.contextLength } : {}) }] }),
      },
    },
    policy: { clientKey: o.clientKey, corsOrigins: o.corsOrigins, allowedHosts: o.allowedHosts },
    limits: { ...o.limits, ...(o.maxBodyBytes !== undefined ? { maxBodyBytes: o.maxBodyBytes } : {}) },
    log: o.log,
  });
}
