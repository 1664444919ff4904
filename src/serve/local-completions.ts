/**
 * `POST /v1/completions` on `serve --model` with method base (`--method base` or `--allow-interventions`): a raw
 * prompt continued without a chat template, in OpenAI's completions shape (`text_completion`; streamed as generated,
 * each piece with its tokens' log probabilities). A guarded server never routes here: a judge reads a conversation,
 * and a raw prompt has none.
 *
 * The prompt text is encoded as the tokenizer encodes any text (its BOS added, as HF's `tokenizer(text)` and vLLM
 * do); a list of ids is taken as given (each below the vocabulary size). `logprobs: k` returns the completions API's
 * `{tokens, token_logprobs, top_logprobs, text_offset}`; `echo` prepends the prompt's text (with `logprobs` it is a 400:
 * the prompt's own log probabilities are not computed). With `--allow-interventions` the research fields
 * (`safekeep`, vllm-lens's `vllm_xargs`) work as on chat completions, capture positions counted in the prompt's ids.
 */
import { badRequest } from '../http/errors.ts';
import type { Exchange } from '../http/server.ts';
import { SseStream, usageOf } from '../http/sse.ts';
import { sendJson } from '../http/errors.ts';
import type { ChatBackend, OpenAiLogprob, ResearchCall } from '../chat/types.ts';
import { DEFAULT_MAX_CAPTURE_BYTES, parseResearchField, resolveCapture, type ResearchOptions } from './research.ts';
import { stopStrings } from '../chat/body.ts';
import { contextLengthMessage } from './context-length.ts';
import { parseCompletionRequest, type CompletionRequest } from './completions-body.ts';
import { parseLensXargs } from './vllm-lens.ts';
import { zstdReady } from './lens-tensor.ts';
import { callWithin, capturedBody, hasEdits, liveText, researchRespond, withSignal, type Live } from './local-call.ts';

/** What the server needs to take raw prompts. */
export interface RawPrompts {
  /** prompt text → ids, as the tokenizer encodes text (BOS added) */
  encode: (text: string) => number[];
  /** ids → text (the echo of an ids prompt) */
  decode: (ids: readonly number[]) => string;
  vocabSize: number;
}

export interface CompletionsContext {
  backend: ChatBackend;
  modelName: string;
  raw: RawPrompts;
  research?: ResearchOptions;
  defaultMaxTokens?: number;
  maxTokensLimit?: number;
  contextLength?: number;
  /** the sampling fields' checks (the chat route's own) */
  checkSampling: (body: Record<string, unknown>) => void;
  deadlineMs: number;
}

/** The engine's log probabilities in the completions API's shape; `offset`: where the first token's text starts. */
export function completionLogprobs(entries: readonly OpenAiLogprob[], offset: number): { tokens: string[]; token_logprobs: number[]; top_logprobs: Record<string, number>[]; text_offset: number[] } {
  const text_offset: number[] = [];
  let at = offset;
  for (const e of entries) {
    text_offset.push(at);
    at += e.token.length;
  }
  return {
    tokens: entries.map((e) => e.token), token_logprobs: entries.map((e) => e.logprob),
    top_logprobs: entries.map((e) => Object.fromEntries(e.top_logprobs.map((t) => [t.token, t.logprob]))), text_offset,
  };
}

interface Planned {
  c: CompletionRequest;
  ids: number[];
  maxTokens: number;
  stop: ReturnType<typeof stopStrings>;
  research: ResearchCall | undefined;
  rq: ReturnType<typeof parseResearchField> | null;
  lens: boolean;
  /** the prompt's text when echoed */
  echo: string;
}

/** the request's checks, in the client's terms (400s), before any generation */
function plan(c: CompletionRequest, o: CompletionsContext, x: Exchange): Planned {
  o.checkSampling(c.body);
  const stop = stopStrings(c.body);
  const V = o.raw.vocabSize;
  if (Array.isArray(c.prompt)) c.prompt.forEach((t, i) => { if (t < 0 || t >= V) throw badRequest(`"prompt"[${i}]: token id ${t} is outside this model's vocabulary (0..${V - 1})`); });
  const ids = Array.isArray(c.prompt) ? [...c.prompt] : o.raw.encode(c.prompt);
  if (ids.length === 0) throw badRequest('"prompt" encodes to no tokens');
  x.entry.promptTokens = ids.length;
  const limit = o.maxTokensLimit;
  if (limit !== undefined && c.maxTokens !== undefined && c.maxTokens > limit) throw badRequest(`"max_tokens" ${c.maxTokens} is above this server's limit of ${limit} tokens`);
  let maxTokens = c.maxTokens ?? Math.min(o.defaultMaxTokens ?? 256, limit ?? Infinity);
  const N = o.contextLength;
  if (N !== undefined) {
    if (c.maxTokens === undefined && ids.length < N) maxTokens = Math.min(maxTokens, N - ids.length);
    if (ids.length + maxTokens > N) throw badRequest(contextLengthMessage(N, ids.length, maxTokens, true));
  }
  if (c.echo && c.logprobs !== undefined) throw badRequest('"echo" with "logprobs": the prompt tokens\' log probabilities are not computed by this server (echo without logprobs, or logprobs without echo)');
  if (c.logprobs !== undefined && !o.backend.activations) throw badRequest('"logprobs": this server\'s backend returns no log probabilities');
  if (c.research !== undefined && c.lens !== undefined) throw badRequest('"safekeep" and "vllm_xargs": send one of them');
  const lens = c.lens !== undefined;
  const parsed = !o.research ? null : lens ? parseLensXargs(c.lens, o.research) : parseResearchField(c.research, o.research);
  const rq = parsed && (hasEdits(parsed.edits) || parsed.capture) ? parsed : null;
  let research: ResearchCall | undefined;
  if (rq || c.logprobs !== undefined) {
    research = { ...(c.logprobs !== undefined ? { topLogprobs: c.logprobs } : {}) };
    if (rq?.capture) research.capture = resolveCapture(rq.capture, ids.length, maxTokens, o.research!.maxCaptureBytes ?? DEFAULT_MAX_CAPTURE_BYTES);
  }
  // as the chat route logs it: no vectors, no client text
  if (research) {
    x.entry.research = {
      steer: rq?.steer ?? null, interventions: (rq?.edits.interventions?.length ?? 0) - (rq?.steer ? 1 : 0) + (rq?.edits.hooks?.length ?? 0),
      capture: rq?.capture ? rq.capture.hooks.length : 0, logprobs: c.logprobs ?? null, ...(rq?.edits.saes?.length ? { saes: rq.edits.saes.length } : {}),
    };
  }
  const echo = !c.echo ? '' : typeof c.prompt === 'string' ? c.prompt : o.raw.decode(ids);
  return { c, ids, maxTokens, stop, research, rq, lens, echo };
}

/** The /v1/completions handler (run inside the server's admission queue). */
export function completionsHandler(o: CompletionsContext): (x: Exchange) => Promise<void> {
  return async (x) => {
    const c = parseCompletionRequest(await x.body(), { research: o.research !== undefined });
    if (c.lens !== undefined) await zstdReady();
    const p = plan(c, o, x);
    const headers = { 'x-safekeep-action': 'forward', 'x-safekeep-method': 'base' };
    const live: Live | null = c.stream ? { stream: new SseStream(x.res, x.id, o.modelName, headers, 'text'), lpSent: 0 } : null;
    // the echoed prompt goes out first (the text offsets of the log probabilities count from the completion's start)
    if (live && p.echo) live.stream.write(p.echo);
    let offset = 0;
    const format = (entries: readonly OpenAiLogprob[]) => {
      const lp = completionLogprobs(entries, offset);
      offset = lp.text_offset.length ? lp.text_offset.at(-1)! + entries.at(-1)!.token.length : offset;
      return lp;
    };
    const r = await callWithin(x, live?.stream ?? null, o.deadlineMs, (signal) => researchRespond(withSignal(o.backend, signal), {
      messages: [], promptIds: p.ids, maxTokens: p.maxTokens, purpose: 'agent',
      ...(p.stop?.length ? { stop: p.stop } : {}), ...(p.research ? { research: p.research } : {}),
      ...(hasEdits(p.rq?.edits) ? { edits: p.rq.edits } : {}),
      ...(live ? { onText: liveText(live, format) } : {}),
    }));
    if (!r) return;
    Object.assign(x.entry, { guard: 'base', tools: 0, action: 'forward', completion: 'raw' });
    const reply = r.reply.research;
    const text = p.echo + r.reply.content;
    const finish = r.reply.finish === 'length' ? 'length' : 'stop';
    const usage = usageOf(r.reply.promptTokens, r.reply.completionTokens);
    const captured = capturedBody(p.rq, p.lens, p.research, reply, o.research?.hiddenSize ?? 0);
    x.entry.status = 200;
    if (live) {
      const rest = c.logprobs !== undefined ? (reply?.logprobs ?? []).slice(live.lpSent) : [];
      if (!live.stream.finish({
        content: text, finish, usage: c.includeUsage ? usage : undefined,
        ...(rest.length ? { logprobs: format(rest) } : {}),
        ...(captured ? (captured.ownChunk ? { tailEvent: captured.body } : { finishExtra: captured.body }) : {}),
      })) x.entry.status = 500;
      return;
    }
    const logprobs = c.logprobs !== undefined ? completionLogprobs(reply?.logprobs ?? [], 0) : null;
    sendJson(x.res, 200, {
      id: x.id, object: 'text_completion', created: Math.floor(Date.now() / 1000), model: o.modelName,
      choices: [{ index: 0, text, logprobs, finish_reason: finish }], usage, ...captured?.body,
    }, headers);
  };
}
