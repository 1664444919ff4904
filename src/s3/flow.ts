/**
 * S³ in front of a real agent (the proxy's per-request flow). An OpenAI-compatible request carries the whole
 * trajectory, and the client resends its own copy of it — the raw tool results, not the ones the guard rewrote —
 * so the proxy keeps no conversation state and checks the whole history on every request:
 *
 * 1. input: the whole request (and the tools and the text-bearing settings) is checked for harm: every message the
 *    client sent — assistant turns it wrote, their reasoning and call arguments, tool results — in the one judge
 *    view (`guard/view.ts`); coverage is counted on that whole event (a part no input check read blocks). A risk →
 *    refusal.
 * 2. tool_observation: every `tool` message in the history is checked and, on recovery, rewritten before anything
 *    goes upstream.
 * 3. the upstream answers (the client's own body, messages replaced, not streamed).
 * 4. tool_selection: its `tool_calls` are checked before the client executes them. Recovery drops the risky calls;
 *    when none is left, the blocked calls and their "blocked, and why" results are appended to the conversation and
 *    the upstream is asked again (at most `maxRounds` times), so the model can finish the benign part.
 * 5. output: an answer without calls is checked before it is returned; recovery redacts it.
 * A `block` anywhere → the refusal (prefix prefilled, continued by the upstream) instead. What each decision does is
 * `apply.ts`, shared with the agent loop of `s3 eval`.
 *
 * Each check runs once: decisions are kept in a content-addressed cache (→ the decision and the rewritten text),
 * so turn 3 costs no new judge call for turn 2's result and still sends the upstream its rewritten text. The key is
 * everything the stage's checks and guard agent read: the guard model, the skills, the tools and the whole event
 * (for an observation: the conversation before it, the call it answers and its text), so a result seen in one
 * conversation cannot lend its decision to the same result in another.
 *
 * The work per request is bounded, not the conversation: tool results already cleared (same content, same context
 * key) cost nothing, and the results no earlier request brought are counted before any check runs — more than
 * `maxFreshObservations` of them is refused then, without a single guard call.
 */
import { createHash } from 'node:crypto';
import type { ToolSpec } from '../data/types.ts';
import { SafekeepError } from '../util/errors.ts';
import type { ChatMessage, WireToolCall } from '../guard/types.ts';
import { messageText } from '../guard/judge-context.ts';
import { applyAnswer, applyCalls, applyInput, applyObservation } from './apply.ts';
import type { CheckEnv } from './check.ts';
import { parseArguments, type CallView, type StageEvent } from './event.ts';
import { runStage, type S3Config, type StageDecision } from './guard.ts';

/** What the upstream said. */
export interface UpstreamTurn {
  content: string | null;
  toolCalls: WireToolCall[];
  finish: string;
  promptTokens: number;
  completionTokens: number;
}

interface ProxyStageDecision {
  decision: StageDecision;
  /** what was changed (removed spans, replaced calls, redactions) */
  changed: string[];
  /** taken from the cache (decided on an earlier request) */
  cached: boolean;
}

interface ProxyFlowResult {
  /** the assistant message for the client */
  content: string | null;
  toolCalls: WireToolCall[];
  finish: string;
  action: 'forward' | 'recover' | 'refuse';
  decisions: ProxyStageDecision[];
  /** the messages sent upstream last (after rewriting) */
  upstreamMessages: ChatMessage[];
  usage: { promptTokens: number; completionTokens: number };
}

interface ProxyFlowOptions {
  config: S3Config;
  /** the request's text-bearing settings the upstream also receives (shown at input; `ChatRequest.settings`) */
  settings?: Readonly<Record<string, unknown>>;
  env: CheckEnv;
  /** one upstream call with these messages (the client's body otherwise) */
  upstream: (messages: ChatMessage[]) => Promise<UpstreamTurn>;
  /** the refusal for this conversation (prefix prefilled) */
  refuse: (messages: ChatMessage[]) => Promise<UpstreamTurn>;
  /** upstream rounds after replaced calls (default 3) */
  maxRounds?: number;
  /** decisions of earlier requests (default: none kept) */
  cache?: StageCache;
  /**
   * guard checks one request may cost for tool results no earlier request brought (default 64): without a bound, a
   * history of thousands of fresh results would make one request cost thousands of guard calls
   */
  maxFreshObservations?: number;
}

interface CachedStage {
  decision: StageDecision;
  changed: string[];
  next: 'go' | 'refuse';
  /** tool_observation: the text sent upstream instead of the result */
  content?: string;
}

/**
 * Stage decisions by content hash, least recently used evicted first; bounded in entries and in the bytes of the
 * rewritten texts it holds.
 */
export class StageCache {
  private readonly map = new Map<string, { v: CachedStage; bytes: number }>();
  private bytes = 0;
  constructor(private readonly maxEntries = 4096, private readonly maxBytes = 64 * 1024 * 1024) {}

  /** a decision is held for `key` (no change to the eviction order) */
  has(key: string): boolean {
    return this.map.has(key);
  }

  get(key: string): CachedStage | undefined {
    const e = this.map.get(key);
    if (!e) return undefined;
    this.map.delete(key);
    this.map.set(key, e);
    return e.v;
  }

  set(key: string, v: CachedStage): void {
    const bytes = 256 + (v.content?.length ?? 0) * 2;
    if (bytes > this.maxBytes) return;
    const old = this.map.get(key);
    if (old) { this.bytes -= old.bytes; this.map.delete(key); }
    this.map.set(key, { v, bytes });
    this.bytes += bytes;
    for (const [k, e] of this.map) {
      if (this.map.size <= this.maxEntries && this.bytes <= this.maxBytes) break;
      this.map.delete(k);
      this.bytes -= e.bytes;
    }
  }

  get size(): number {
    return this.map.size;
  }
}

const hashOf = (...parts: unknown[]) => createHash('sha256').update(JSON.stringify(parts)).digest('hex');

/** What of the configuration a decision depends on (the skills as loaded, how the guard picks and mitigates). */
function configKey(c: S3Config): string {
  return hashOf(c.skills.map((s) => [s.name, s.stage, s.mandatory, s.inspection, s.check, s.mitigation, s.body, s.prompt, s.rules?.text ?? null, s.memory ?? null, s.filter.patterns?.map((p) => p.source) ?? null, s.filter.tools ?? null, s.filter.roles ?? null]),
    c.guardDecision, c.mitigation, c.filter ?? true, Object.keys(c.checks ?? {}).sort());
}

/** Index of the first message after the last assistant turn. */
export function newMessagesStart(messages: readonly ChatMessage[]): number {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i]!.role === 'assistant') return i + 1;
  return 0;
}

/** End (exclusive) of the conversation through the latest user message (the whole request when there is none): what a refusal answers. */
export function inputEnd(messages: readonly ChatMessage[]): number {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i]!.role === 'user') return i + 1;
  return messages.length;
}

/** The call a tool message answers (by `tool_call_id`, latest first). */
function callOf(messages: readonly ChatMessage[], i: number): WireToolCall | undefined {
  const id = messages[i]!.tool_call_id;
  for (let k = i - 1; k >= 0; k--) {
    const c = ((messages[k]!.tool_calls as WireToolCall[] | undefined) ?? []).find((x) => x.id === id);
    if (c) return c;
  }
  return undefined;
}

/** Each tool result of the request with its decision's cache key (the conversation before it, its call, its text). */
function observationKeys(work: readonly ChatMessage[], tools: readonly ToolSpec[], model: string, cfg: string): { index: number; key: string; name: string; content: string }[] {
  const out: { index: number; key: string; name: string; content: string }[] = [];
  // the conversation before each message as a chained hash: one pass, not one serialisation of the prefix per result
  let prefix = hashOf('conversation');
  for (let i = 0; i < work.length; prefix = hashOf(prefix, work[i]), i++) {
    const m = work[i]!;
    if (m.role !== 'tool' && m.role !== 'function') continue;
    const name = String(m.name ?? callOf(work, i)?.function.name ?? '');
    const content = messageText(m.content);
    out.push({ index: i, name, content, key: hashOf('tool_observation', model, cfg, prefix, tools, m.tool_call_id ?? null, name, content) });
  }
  return out;
}

const toView = (c: WireToolCall, i: number): CallView => ({ id: c.id ?? `call_${i}`, name: c.function.name, arguments: parseArguments(c.function.arguments) });

export async function s3ProxyFlow(messages: readonly ChatMessage[], tools: readonly ToolSpec[], o: ProxyFlowOptions): Promise<ProxyFlowResult> {
  const decisions: ProxyStageDecision[] = [];
  const usage = { promptTokens: 0, completionTokens: 0 };
  const work: ChatMessage[] = messages.map((m) => ({ ...m }));
  let action: ProxyFlowResult['action'] = 'forward';
  const skills = o.config.skills;
  const stage = async (e: StageEvent) => runStage(e, o.config, o.env);
  const add = (u: UpstreamTurn) => { usage.promptTokens += u.promptTokens; usage.completionTokens += u.completionTokens; };
  const refuse = async (history: ChatMessage[]): Promise<ProxyFlowResult> => {
    const r = await o.refuse(history);
    add(r);
    return { content: r.content, toolCalls: [], finish: r.finish === 'length' ? 'length' : 'stop', action: 'refuse', decisions, upstreamMessages: history, usage };
  };
  /** a cached decision, else the stage run now and its application cached */
  const decide = async (key: string, run: () => Promise<CachedStage>): Promise<CachedStage> => {
    const hit = o.cache?.get(key);
    if (hit) {
      decisions.push({ decision: hit.decision, changed: hit.changed, cached: true });
      return hit;
    }
    const v = await run();
    o.cache?.set(key, v);
    decisions.push({ decision: v.decision, changed: v.changed, cached: false });
    return v;
  };

  const cfg = configKey(o.config);
  const request = work.slice(0, inputEnd(work));
  const settings = o.settings && Object.keys(o.settings).length > 0 ? o.settings : undefined;
  const observations = observationKeys(work, tools, o.env.model ?? '', cfg);
  const maxFresh = o.maxFreshObservations ?? 64;
  const fresh = observations.filter((x) => !o.cache?.has(x.key));
  if (fresh.length > maxFresh) {
    throw new SafekeepError(`messages[${fresh[maxFresh]!.index}]: this request brings ${fresh.length} tool results no earlier request did, each needing a guard check (at most ${maxFresh} a request); send the conversation as it grows`);
  }
  // the whole request, as the client wrote it, judged for harm
  const input = await decide(hashOf('input', o.env.model ?? '', cfg, work, tools, settings ?? null), async () => {
    const d = await stage({ stage: 'input', messages: work.map((m) => ({ ...m })), tools: [...tools], ...(settings ? { settings } : {}) });
    return { decision: d, ...applyInput(d) };
  });
  if (input.next === 'refuse') return refuse(request);

  for (const { index: i, key, name, content } of observations) {
    const m = work[i]!;
    const before = work.slice(0, i);
    const obs = await decide(key, async () => {
      const d = await stage({ stage: 'tool_observation', messages: before, tools: [...tools], observation: { callId: String(m.tool_call_id ?? ''), name, content } });
      const a = applyObservation(d, skills, content, name);
      return { decision: d, changed: a.changed, next: a.next, content: a.content };
    });
    if (obs.next === 'refuse') return refuse(before);
    if (obs.decision.action === 'recover') {
      work[i] = { ...m, content: obs.content ?? content };
      action = 'recover';
    }
  }

  const maxRounds = o.maxRounds ?? 3;
  let lastBlocked: string[] = [];
  for (let round = 0; round <= maxRounds; round++) {
    const before = [...work];
    const u = await o.upstream(before);
    add(u);
    if (u.toolCalls.length > 0) {
      const calls = u.toolCalls.map(toView);
      const d = await stage({ stage: 'tool_selection', messages: before, tools: [...tools], calls });
      const a = applyCalls(d, skills, calls);
      decisions.push({ decision: d, changed: a.changed, cached: false });
      if (a.next === 'refuse') return refuse(before);
      if (d.action === 'pass') return { content: u.content, toolCalls: u.toolCalls, finish: u.finish, action, decisions, upstreamMessages: before, usage };
      action = 'recover';
      if (a.allowed.length > 0) {
        const keep = new Set(a.allowed.map((c) => c.id));
        return { content: u.content, toolCalls: u.toolCalls.filter((c, i) => keep.has(toView(c, i).id)), finish: u.finish, action, decisions, upstreamMessages: before, usage };
      }
      work.push({ role: 'assistant', content: u.content ?? '', tool_calls: u.toolCalls.map((c, i) => ({ ...c, id: toView(c, i).id })) });
      for (const b of a.blocked) work.push({ role: 'tool', tool_call_id: b.call.id, name: b.call.name, content: b.result });
      lastBlocked = a.blocked.map((b) => b.result);
      continue;
    }
    const text = u.content ?? '';
    const d = await stage({ stage: 'output', messages: before, tools: [...tools], answer: text });
    const a = applyAnswer(d, skills, text);
    decisions.push({ decision: d, changed: a.changed, cached: false });
    if (a.next === 'refuse') return refuse(before);
    if (d.action === 'recover') action = 'recover';
    return { content: a.content, toolCalls: [], finish: u.finish, action, decisions, upstreamMessages: before, usage };
  }
  // the model kept proposing blocked calls: tell the client what was blocked
  return { content: lastBlocked.join('\n'), toolCalls: [], finish: 'stop', action: 'recover', decisions, upstreamMessages: work, usage };
}
