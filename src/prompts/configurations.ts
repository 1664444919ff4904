/**
 * The agent-context configurations of the paper (§3.1–3.3, Tables 1–2): one rendered prompt per configuration for
 * a request and its tools, always through the model's native chat template.
 *
 * | config          | system message                  | tools                                   |
 * | --------------- | ------------------------------- | --------------------------------------- |
 * | `chatbot`       | none (template default, if any) | none                                    |
 * | `+role`         | role                            | none                                    |
 * | `+instructions` | role + "\n\n" + instructions    | none                                    |
 * | `agent`         | role + "\n\n" + instructions    | the template's `tools=` path            |
 * | `chatbot-long`  | filler prefix (length-matched)  | none                                    |
 *
 * The full agent prompt has three tool representations: `schema` (native JSON via `tools=`), `pseudoword`
 * (pseudoword-randomized JSON via `tools=`) and `flattened` (prose substituted exactly where the template writes
 * the JSON, see toolspan.ts). Templates that drop system messages (Mistral-7B-Instruct-v0.3's HF template) get the
 * system text folded into the user message (`system + "\n\n" + request`), detected by rendering a probe.
 * `chatbot-long` appends whole sentences of the filler text until its token length is as close as possible to the `agent`
 * (schema) prompt's and within ±5 % of it.
 */
import type { ToolSpec } from '../data/types.ts';
import { SafekeepError } from '../util/errors.ts';
import { flattenTools } from './flatten.ts';
import { sha256Hex } from '../util/hash.ts';
import { pseudowordTools } from './pseudoword.ts';
import type { PromptTexts } from './texts.ts';
import type { ChatMessage, PromptTokenizer } from './tokenizer.ts';
import { renderWithToolText } from './toolspan.ts';

export const CONFIGS = ['chatbot', '+role', '+instructions', 'agent', 'chatbot-long'] as const;
export type ConfigName = (typeof CONFIGS)[number];
export const REPRS = ['schema', 'flattened', 'pseudoword'] as const;
export type ToolRepr = (typeof REPRS)[number];

export function isConfigName(s: string): s is ConfigName {
  return (CONFIGS as readonly string[]).includes(s);
}
export function isToolRepr(s: string): s is ToolRepr {
  return (REPRS as readonly string[]).includes(s);
}

/** Relative length tolerance of `chatbot-long` against the agent prompt. */
export const LENGTH_TOLERANCE = 0.05;

export interface RenderedPrompt {
  config: ConfigName;
  /** tool representation; null for configurations without tools */
  repr: ToolRepr | null;
  text: string;
  /** sha256 of `text` */
  hash: string;
  /** token ids (null when the tokenizer has no vocabulary) */
  ids: number[] | null;
  /** chatbot-long: token length of the agent prompt it was matched to, and the filler words used */
  lengthTarget?: { agentTokens: number; fillerWords: number };
}

interface PromptBuilderOptions {
  texts: PromptTexts;
  /** seed of the pseudoword randomization (default 0) */
  seed?: number;
  /** extra template variables for every rendering */
  templateKwargs?: Record<string, unknown>;
}

const PROBE = 'sksystemprobe';

/**
 * The default system text of a template: compare the rendering without a system message (`plain`) with the one
 * whose system message is PROBE; if the template writes some text exactly where PROBE goes, that text is the
 * default. '' when the template writes nothing there.
 */
export function detectDefaultSystem(plain: string, withProbe: string): string {
  const at = withProbe.indexOf(PROBE);
  if (at < 0) return '';
  let p = 0;
  while (p < at && p < plain.length && plain[p] === withProbe[p]) p++;
  let s = 0;
  const maxS = Math.min(withProbe.length - (at + PROBE.length), plain.length - p);
  while (s < maxS && plain[plain.length - 1 - s] === withProbe[withProbe.length - 1 - s]) s++;
  const mid = plain.slice(p, plain.length - s);
  const pre = withProbe.slice(p, at);
  const post = withProbe.slice(at + PROBE.length, withProbe.length - s);
  if (mid.length < pre.length + post.length || !mid.startsWith(pre) || !mid.endsWith(post)) return '';
  return mid.slice(pre.length, mid.length - post.length);
}

/** Builds the configurations for one tokenizer/template. */
export class PromptBuilder {
  readonly tok: PromptTokenizer;
  readonly texts: PromptTexts;
  readonly seed: number;
  readonly templateKwargs: Record<string, unknown>;
  /** does the template render a system message? (if not, system text is folded into the user message) */
  readonly systemSupported: boolean;
  /**
   * The system prompt the template injects when no system message is given and drops when one is (Qwen2.5's
   * "You are Qwen, created by Alibaba Cloud..."); kept in front of our system texts so that every configuration
   * only adds to `chatbot`. '' when there is none.
   */
  readonly defaultSystem: string;
  /** tokens per filler word (measured on first use) */
  private fillerRate: number | null = null;

  constructor(tok: PromptTokenizer, opts: PromptBuilderOptions) {
    this.tok = tok;
    this.texts = opts.texts;
    this.seed = opts.seed ?? 0;
    this.templateKwargs = opts.templateKwargs ?? {};
    const kw = { addGenerationPrompt: true, templateKwargs: this.templateKwargs };
    let supported = false;
    let withProbe = '';
    try {
      withProbe = tok.render([{ role: 'system', content: PROBE }, { role: 'user', content: 'x' }], kw);
      supported = withProbe.includes(PROBE);
    } catch {
      supported = false;
    }
    this.defaultSystem = supported ? detectDefaultSystem(tok.render([{ role: 'user', content: 'x' }], kw), withProbe) : '';
    this.systemSupported = supported;
  }

  /** The system text each configuration adds ('' = none). */
  systemText(config: Exclude<ConfigName, 'chatbot-long'>): string {
    switch (config) {
      case 'chatbot':
        return '';
      case '+role':
        return this.texts.role;
      case '+instructions':
      case 'agent':
        return `${this.texts.role}\n\n${this.texts.instructions}`;
    }
  }

  /** Chat messages for a request with the given system text. */
  messages(request: string, system: string): ChatMessage[] {
    if (!system) return [{ role: 'user', content: request }];
    if (this.systemSupported) {
      return [{ role: 'system', content: this.defaultSystem ? `${this.defaultSystem}\n\n${system}` : system }, { role: 'user', content: request }];
    }
    return [{ role: 'user', content: `${system}\n\n${request}` }];
  }

  /**
   * A prompt from `build`, which renders it passing the request's messages, tool specs and spliced-in text through
   * `plain` (encodeRendered): the data's text is encoded as plain text even where it spells a special token.
   */
  private finish(config: ConfigName, repr: ToolRepr | null, build: (plain: <T>(v: T) => T) => string): RenderedPrompt {
    if (this.tok.vocab === 'none') {
      const text = build((v) => v);
      return { config, repr, text, hash: sha256Hex(text), ids: null };
    }
    const { text, ids } = this.tok.encodeRendered(build);
    return { config, repr, text, hash: sha256Hex(text), ids };
  }

  private plain(messages: ChatMessage[], tools: readonly ToolSpec[] | null): string {
    return this.tok.render(messages, { tools, addGenerationPrompt: true, templateKwargs: this.templateKwargs });
  }

  /** `plain(messages, tools)` with the messages and tools passed through `p` first. */
  private plainVia(messages: readonly ChatMessage[], tools: readonly ToolSpec[] | null): (p: <T>(v: T) => T) => string {
    return (p) => this.plain(p([...messages]), tools ? p(structuredClone(tools) as ToolSpec[]) : null);
  }

  /** The full agent prompt in one tool representation. */
  agent(request: string, tools: readonly ToolSpec[], repr: ToolRepr): RenderedPrompt {
    if (tools.length === 0) throw new SafekeepError('the agent configuration needs at least one tool');
    const msgs = this.messages(request, this.systemText('agent'));
    switch (repr) {
      case 'schema': {
        const text = this.plain(msgs, tools);
        if (text === this.plain(msgs, null)) {
          throw new SafekeepError(`chat template ${this.tok.templateSource} ignores tools= (no tool support); pass --template with a tool-calling template`);
        }
        return this.finish('agent', repr, this.plainVia(msgs, tools));
      }
      case 'pseudoword':
        return this.finish('agent', repr, this.plainVia(msgs, pseudowordTools(tools, this.seed)));
      case 'flattened':
        return this.finish('agent', repr, (p) => renderWithToolText(this.tok, p(msgs), p(flattenTools(tools)), { addGenerationPrompt: true, templateKwargs: this.templateKwargs }).text);
    }
  }

  /** Filler prefix of `n` words, with the filler's own spacing (whole copies joined by a blank line when n exceeds it). */
  fillerWords(n: number): string {
    const filler = this.texts.filler;
    const ends = [...filler.matchAll(/\S+/g)].map((m) => m.index + m[0].length);
    const copies = Math.floor(n / ends.length);
    const rest = n % ends.length;
    const parts: string[] = new Array<string>(copies).fill(filler);
    if (rest > 0) parts.push(filler.slice(0, ends[rest - 1]));
    return parts.join('\n\n');
  }

  /** Word counts (≥ 1) at which the filler ends a sentence (a word ending in . ! or ?, or a whole copy): `k` each side of n. */
  sentenceEndsAround(n: number, k: number): number[] {
    const words = this.texts.filler.split(/\s+/).filter((w) => w);
    const ends = words.flatMap((w, i) => (/[.!?]["'”’)\]]*$/.test(w) || i === words.length - 1 ? [i + 1] : []));
    const W = words.length;
    const below: number[] = [];
    const above: number[] = [];
    for (let copy = Math.max(0, Math.floor(n / W) - 1); copy <= Math.floor(n / W) + 1; copy++) {
      for (const e of ends) {
        const c = copy * W + e;
        if (c <= n) below.push(c); else above.push(c);
      }
    }
    return [...below.slice(-k), ...above.slice(0, k)];
  }

  /**
   * `chatbot-long`: chatbot + filler whose token length is closest to the agent (schema) prompt's, ending on a
   * sentence boundary of the filler text (never mid-sentence), within ±5 %.
   */
  chatbotLong(request: string, tools: readonly ToolSpec[]): RenderedPrompt {
    if (this.tok.vocab === 'none') {
      throw new SafekeepError('chatbot-long needs token lengths, but this model folder has no tokenizer.json; pass --tokenizer DIR');
    }
    const target = this.agent(request, tools, 'schema').ids!.length;
    const memo = new Map<number, number>();
    const length = (n: number): number => {
      let l = memo.get(n);
      if (l === undefined) {
        l = this.tok.encodeRendered(this.plainVia(this.messages(request, n > 0 ? this.fillerWords(n) : ''), null)).ids.length;
        memo.set(n, l);
      }
      return l;
    };
    if (length(0) >= target) {
      const r = this.finish('chatbot-long', null, this.plainVia(this.messages(request, ''), null));
      return { ...r, lengthTarget: { agentTokens: target, fillerWords: 0 } };
    }
    // tokens per filler word, measured once on one copy of the filler
    if (this.fillerRate === null) {
      const words = this.texts.filler.split(/\s+/).filter((w) => w).length;
      this.fillerRate = Math.max(0.1, (length(words) - length(0)) / words);
    }
    const rate = this.fillerRate;
    // step up from an estimate until the length reaches the target (adding words never shortens a prompt) ...
    let n = Math.max(1, Math.floor((target - length(0)) / rate));
    let len = length(n);
    let guard = 0;
    while (len < target) {
      n += Math.max(1, Math.ceil((target - len) / rate));
      len = length(n);
      if (++guard > 1000) throw new SafekeepError('chatbot-long: filler text cannot reach the agent prompt length');
    }
    // ... then the filler must end on a sentence boundary: of the sentence ends around n (up to two on each side),
    // keep the one whose prompt length is closest to the target
    const cands = this.sentenceEndsAround(n, 2);
    n = cands.reduce((best, c) => (Math.abs(length(c) - target) < Math.abs(length(best) - target) ? c : best), cands[0]!);
    const r = this.finish('chatbot-long', null, this.plainVia(this.messages(request, this.fillerWords(n)), null));
    const got = r.ids!.length;
    if (Math.abs(got - target) > LENGTH_TOLERANCE * target) {
      throw new SafekeepError(`chatbot-long: reached ${got} tokens for an agent prompt of ${target} (outside ±5 %)`);
    }
    return { ...r, lengthTarget: { agentTokens: target, fillerWords: n } };
  }

  /**
   * Any agent context (e.g. a history with a tool call and a tool result, as InjecAgent cases have) with its
   * tools in one representation: `schema` through `tools=`, `flattened` at the template's tool span. `pseudoword`
   * is refused when the history contains tool calls (their names and arguments would no longer match the specs).
   */
  renderContext(messages: readonly ChatMessage[], tools: readonly ToolSpec[], repr: ToolRepr, opts: { addGenerationPrompt?: boolean } = {}): RenderedPrompt {
    if (tools.length === 0) throw new SafekeepError('an agent context needs at least one tool');
    const ro = { addGenerationPrompt: opts.addGenerationPrompt ?? true, templateKwargs: this.templateKwargs };
    switch (repr) {
      case 'schema':
        return this.finish('agent', repr, (p) => this.tok.render(p([...messages]), { ...ro, tools: p(structuredClone(tools) as ToolSpec[]) }));
      case 'flattened':
        return this.finish('agent', repr, (p) => renderWithToolText(this.tok, p([...messages]), p(flattenTools(tools)), ro).text);
      case 'pseudoword':
        if (messages.some((m) => m.tool_calls !== undefined || m.role === 'tool')) {
          throw new SafekeepError('pseudoword specs cannot be combined with a history of tool calls/results');
        }
        return this.finish('agent', repr, (p) => this.tok.render(p([...messages]), { ...ro, tools: p(structuredClone(pseudowordTools(tools, this.seed)) as ToolSpec[]) }));
    }
  }

  /** One configuration (repr applies to `agent` only). */
  render(request: string, tools: readonly ToolSpec[], config: ConfigName, repr: ToolRepr = 'schema'): RenderedPrompt {
    if (config !== 'agent' && repr !== 'schema') throw new SafekeepError(`--repr ${repr} only applies to the agent configuration`);
    switch (config) {
      case 'agent':
        return this.agent(request, tools, repr);
      case 'chatbot-long':
        return this.chatbotLong(request, tools);
      default:
        return this.finish(config, null, this.plainVia(this.messages(request, this.systemText(config)), null));
    }
  }

  /** What to record in a run manifest about how prompts were built. */
  manifest(): PromptManifest {
    return {
      family: this.tok.family,
      templateSource: this.tok.templateSource,
      templateHash: this.tok.templateHash,
      vocab: this.tok.vocab,
      systemSupported: this.systemSupported,
      defaultSystem: this.defaultSystem,
      seed: this.seed,
      templateKwargs: this.templateKwargs,
      texts: { role: this.texts.role, instructions: this.texts.instructions, fillerHash: this.texts.hashes.filler },
      textHashes: this.texts.hashes,
    };
  }
}

interface PromptManifest {
  family: string;
  templateSource: string;
  templateHash: string;
  vocab: string;
  systemSupported: boolean;
  defaultSystem: string;
  seed: number;
  templateKwargs: Record<string, unknown>;
  texts: { role: string; instructions: string; fillerHash: string };
  textHashes: { role: string; instructions: string; filler: string };
}
