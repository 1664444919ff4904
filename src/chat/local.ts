/**
 * Local-engine backend: chat template (PromptTokenizer) + greedy generation (Engine). Tool calls stay in the
 * content in the family's native syntax (special tokens kept, end-of-turn tokens stripped). A call's prompt ids come
 * from `encodeChat`: the template's own markup is special tokens, the conversation (every message, tool call and
 * tool spec, the agent's and the judge's alike) plain text even where it spells a special token, so a client or a
 * tool result cannot open a turn of its own.
 * Refusal prefill = the prefix as the content of a final assistant message rendered with
 * `continueFinalMessage` (HF semantics: the rendering stops right after the prefix), then continued.
 * Concurrent calls are batched: each call is one sequence of the engine's scheduler (`generate` with one row runs on
 * the engine's one scheduler, src/engine/run/scheduler.ts), so N calls in flight share decode steps, prefill between them and
 * reuse cached prompt prefixes (shared system prompts and tool specs). `ChatCall.signal` cancels the call's sequence
 * at its next step (its KV slots freed; reply `finish: 'cancelled'` with the text so far); a call cut by
 * `maxTokens` says `finish: 'length'`; `ChatCall.stop` ends it once the text holds one of the strings (engine
 * `stopWhen`) and the reply is cut before the first (`finish: 'stop'`). `ChatCall.onText` receives the answer's text as it is
 * generated (only text no later token can take back: settled-text.ts); the pieces join to the reply's content. `ChatCall.inspect` sees the prefill's
 * last-prompt-token hidden states of the same call (engine `haltAfterPrefill`): no second forward pass. An identical call (same prompt ids, maxTokens and stop,
 * no `inspect`) is answered from an in-memory response cache (`cached: true`), as the endpoint backend's disk cache does;
 * one made while its twin is still generating waits for that generation instead of running a second one.
 */
import type { Engine, GenerateOptions, GenerateResult, GenerationEdits, TokenLogprob } from '../engine/types.ts';
import { openAiLogprobs } from './logprobs.ts';
import { identityKey } from '../engine/run/sae-rows.ts';
import type { PromptTokenizer, RenderOptions } from '../prompts/tokenizer.ts';
import type { CallFormat } from '../outcome/types.ts';
import { stripEndTokens } from '../outcome/parse-calls.ts';
import { sha256Hex } from '../util/hash.ts';
import { cutAtStop, settledText } from './settled-text.ts';
import type { ChatBackend, ChatCall, ChatMessage, ChatReply, ResearchCall, ResearchReply } from './types.ts';

/** a call's edits (ChatCall.edits, the engine's GenerationEdits) and research options (capture, log probabilities) */
function editOptions(edits: GenerationEdits | undefined, r: ResearchCall | undefined): Partial<GenerateOptions> {
  return {
    ...(edits?.interventions?.length ? { interventions: edits.interventions } : {}),
    ...(edits?.hooks?.length ? { hooks: edits.hooks } : {}),
    ...(edits?.saes?.length ? { saes: edits.saes } : {}),
    ...(r?.capture ? { capture: r.capture } : {}),
    ...(r?.topLogprobs !== undefined ? { topLogprobs: r.topLogprobs } : {}),
  };
}

/** what a call's edits are, for the response cache's key: every value that changes the generation */
function editsKey(e: GenerationEdits | undefined): string {
  if (!e) return '';
  const v = (x: ArrayLike<number>) => sha256Hex(new Uint8Array(Float32Array.from(x).buffer));
  return `${JSON.stringify([
    ...(e.interventions ?? []).map((i) => [i.layer, i.kind, i.alpha ?? null, i.positions ?? null, v(i.vector)]),
    ...(e.hooks ?? []).map((h) => [h.hook, h.kind, 'alpha' in h ? h.alpha : null, 'positions' in h ? h.positions ?? null : null,
      'vector' in h ? v(h.vector) : 'heads' in h ? h.heads : null]),
    ...(e.saes ?? []).map((a) => ['sae', identityKey(a.sae), a.hook ?? a.sae.config.hookName, a.splice ?? 'error', a.edits ?? []]),
  ])}:`;
}

type LocalEngine = Pick<Engine, 'generate'>;
/**
 * `encodeChat` is how a call's conversation becomes ids: client strings are plain text, never control tokens. A
 * tokenizer without it (a test's character tokenizer, which has no special tokens) encodes the rendering.
 */
export type LocalTokenizer = Pick<PromptTokenizer, 'render' | 'encode' | 'decode' | 'family'> & Partial<Pick<PromptTokenizer, 'encodeChat'>>;

export interface LocalBackendOptions {
  /** template variables (e.g. `enable_thinking: false` for Qwen3 judges) */
  templateKwargs?: Record<string, unknown>;
  name?: string;
  /**
   * replies kept for identical calls (same prompt ids and maxTokens; greedy decoding makes the reply a function of
   * them), least recently used dropped first; default 1024, 0 = off. Calls with `inspect` are never cached (the hook
   * must see their prefill), nor cancelled replies.
   */
  responseCache?: number;
}

/**
 * OpenAI wire messages → what HF chat templates expect: assistant `tool_calls[].function.arguments` as an object
 * (templates apply `tojson` to it), not a JSON string.
 */
export function templateMessage(m: ChatMessage): ChatMessage {
  if (!Array.isArray(m.tool_calls)) return m;
  const tool_calls = (m.tool_calls as { function?: { name?: string; arguments?: unknown } }[]).map((c) => {
    const args = c.function?.arguments;
    if (typeof args !== 'string') return c;
    try {
      return { ...c, function: { ...c.function, arguments: JSON.parse(args) as unknown } };
    } catch {
      return c;
    }
  });
  return { ...m, tool_calls };
}

export class LocalBackend implements ChatBackend {
  readonly name: string;
  readonly callFormat: CallFormat;
  readonly activations = true;
  /** identical calls' replies (response cache), by prompt ids + maxTokens */
  private readonly replies = new Map<string, ChatReply>();
  /** generations still running, by the same key: an identical call made meanwhile waits for it instead of generating */
  private readonly running = new Map<string, Promise<ChatReply>>();

  constructor(
    private readonly engine: LocalEngine,
    private readonly tokenizer: LocalTokenizer,
    private readonly opts: LocalBackendOptions = {},
  ) {
    this.callFormat = tokenizer.family === 'unknown' ? 'llama3' : tokenizer.family;
    this.name = opts.name ?? `local:${tokenizer.family}`;
  }

  /** What the chat template is given for a call. */
  private templateInput(call: ChatCall): [ChatMessage[], RenderOptions] {
    const tools = call.tools && call.tools.length > 0 ? call.tools : null;
    const history = call.messages.map(templateMessage);
    if (call.prefix !== undefined) {
      const messages: ChatMessage[] = [...history, { role: 'assistant', content: call.prefix }];
      return [messages, { tools, addGenerationPrompt: false, continueFinalMessage: true, templateKwargs: this.opts.templateKwargs }];
    }
    return [history, { tools, addGenerationPrompt: true, templateKwargs: this.opts.templateKwargs }];
  }

  /** The exact prompt text a call is rendered to. */
  renderCall(call: ChatCall): string {
    return this.tokenizer.render(...this.templateInput(call));
  }

  /** The prompt ids of a call: the template's markup as special tokens, the conversation's text as plain text. */
  promptIds(call: ChatCall): number[] {
    const [messages, ro] = this.templateInput(call);
    return this.tokenizer.encodeChat ? this.tokenizer.encodeChat(messages, ro) : this.tokenizer.encode(this.tokenizer.render(messages, ro));
  }

  async chat(call: ChatCall): Promise<ChatReply> {
    const t0 = performance.now();
    // a raw completion's ids as given; a chat call's from its template
    const ids = call.promptIds ? [...call.promptIds] : this.promptIds(call);
    const inspect = call.inspect;
    const limit = this.opts.responseCache ?? 1024;
    // an edited call's reply depends on its edits too (a patch, which reads another run, is never cached); a research
    // call is never cached; a sampled call's reply is a function of its settings and seed too (one without a seed is
    // not cached: its seed is drawn per generation)
    const patched = call.edits?.hooks?.some((h) => h.kind === 'patch') ?? false;
    const sampled = call.sampling ? (call.sampling.seed !== undefined || !(call.sampling.temperature! > 0) ? `${JSON.stringify(call.sampling)}:` : null) : '';
    const key = !inspect && !call.research && !patched && sampled !== null && limit > 0 ? sha256Hex(`${sampled}${editsKey(call.edits)}${call.maxTokens}:${JSON.stringify(call.stop ?? [])}:${ids.join(',')}`) : null;
    const hit = key === null ? undefined : this.replies.get(key);
    if (hit) {
      this.replies.delete(key!);
      this.replies.set(key!, hit);
      return { ...hit, cached: true, latencyMs: performance.now() - t0 };
    }
    // an identical call still generating (Base's agent call and SafeKeep's execution call of one case, in flight
    // together): share its reply. A call with its own signal generates itself, so it can be cancelled alone; a shared
    // reply that was cancelled is not reused.
    const pending = key === null || call.signal ? undefined : this.running.get(key);
    if (pending) {
      const r = await pending.catch(() => null);
      if (r && r.finish !== 'cancelled') return { ...r, cached: true, latencyMs: performance.now() - t0 };
    }
    if (key === null || this.running.has(key)) return this.generate(call, ids, key, t0);
    const p = this.generate(call, ids, key, t0);
    this.running.set(key, p);
    try {
      return await p;
    } finally {
      this.running.delete(key);
    }
  }

  /**
   * Sends each generated token's settled text (settled-text.ts) to `onText` as it comes (none: only the stop strings
   * are checked), and ends the generation at a stop string. The text grows by incremental detokenisation, as vLLM's: decode the ids from a prefix offset with and
   * without the newest ones and keep the difference, once it does not end in a partial character (U+FFFD) — a few
   * ids per token instead of the whole answer, and the boundary effects of decoding a slice (a dropped leading space)
   * cancel out.
   */
  private streamText(stops: readonly string[], onText?: ChatCall['onText']) {
    let sent = '';
    let text = '';
    let prefixAt = 0;
    let readAt = 0;
    /** the tokens' log probabilities so far (with topLogprobs), and how many went out with a piece */
    let logprobs: readonly TokenLogprob[] | undefined;
    let lpSent = 0;
    const send = (settled: string) => {
      if (onText && settled.length > sent.length && settled.startsWith(sent)) {
        const lp = logprobs && logprobs.length > lpSent ? openAiLogprobs(logprobs.slice(lpSent), this.tokenText) : undefined;
        lpSent = logprobs?.length ?? 0;
        onText(settled.slice(sent.length), lp);
        sent = settled;
      }
    };
    return {
      perToken: (ids: readonly number[], lps?: readonly TokenLogprob[]): boolean => {
        logprobs = lps;
        // (a tokenizer may refuse to decode no ids)
        const before = readAt > prefixAt ? this.tokenizer.decode(ids.slice(prefixAt, readAt), { skipSpecial: false }) : '';
        const now = this.tokenizer.decode(ids.slice(prefixAt), { skipSpecial: false });
        if (now.length > before.length && now.startsWith(before) && !now.endsWith('\uFFFD')) {
          text += now.slice(before.length);
          prefixAt = readAt;
          readAt = ids.length;
        }
        const { settled, stopped } = settledText(text, stops);
        send(settled);
        return stopped;
      },
      /** what was held back until the end (the last tokens could have begun a stop string or an end token) */
      flush: send,
    };
  }

  private readonly tokenText = (id: number) => this.tokenizer.decode([id], { skipSpecial: false });

  /** what a research call returns besides the text: the captured hidden states, the log probabilities with token texts */
  private researchReply(ids: number[], g: GenerateResult): ResearchReply {
    return {
      promptIds: ids, generatedIds: g.generatedIds,
      ...(g.capturedPrompt ? { capturedPrompt: g.capturedPrompt } : {}),
      ...(g.capturedGenerated ? { capturedGenerated: g.capturedGenerated } : {}),
      ...(g.capturedHooks ? { capturedHooks: g.capturedHooks } : {}),
      ...(g.logprobs ? { logprobs: openAiLogprobs(g.logprobs, this.tokenText) } : {}),
    };
  }

  private async generate(call: ChatCall, ids: number[], key: string | null, t0: number): Promise<ChatReply> {
    const inspect = call.inspect;
    const limit = this.opts.responseCache ?? 1024;
    const stops = (call.stop ?? []).filter((x) => x !== '');
    // the engine's per-token callback: streams the settled text and checks the stop strings
    const stream = call.onText || stops.length ? this.streamText(stops, call.onText) : null;
    if (call.prefix) call.onText?.(call.prefix);
    const opts: GenerateOptions = {
      maxNewTokens: call.maxTokens,
      ...(inspect ? { haltAfterPrefill: (_row: number, h: Float32Array) => inspect(h) } : {}),
      ...(call.signal ? { signal: call.signal } : {}),
      ...(stream ? { stopWhen: stream.perToken } : {}),
      ...editOptions(call.edits, call.research),
      ...(call.sampling ? { sampling: call.sampling } : {}),
    };
    const [g] = await this.engine.generate([ids], opts);
    // a call halted after its prefill (ChatCall.inspect) generated nothing
    // the answer ends before the first stop string in the whole text (stopWhen only ends the generation early)
    const cut = cutAtStop(g!.generatedIds.length ? this.tokenizer.decode(g!.generatedIds, { skipSpecial: false }) : '', stops);
    const finish = cut.stopped && g!.finish === 'length' ? 'stop' : g!.finish;
    const text = stripEndTokens(cut.text);
    stream?.flush(text);
    const reply: ChatReply = {
      content: (call.prefix ?? '') + text,
      toolCalls: [],
      promptTokens: ids.length,
      completionTokens: g!.generatedIds.length,
      latencyMs: performance.now() - t0,
      cached: false,
      finish,
      ...(call.research ? { research: this.researchReply(ids, g!) } : {}),
    };
    if (key !== null && reply.finish !== 'cancelled') {
      this.replies.set(key, reply);
      for (const k of this.replies.keys()) { if (this.replies.size <= limit) break; this.replies.delete(k); }
    }
    return reply;
  }
}
