/**
 * Client text is text, never control tokens. A chat template writes its own markup (`<|im_start|>`, `<|eot_id|>`,
 * headers, Qwen3's `<tool_call>` and `<tool_response>`) around the messages, and encoding the rendering with added
 * tokens recognised makes that markup their ids, as it should; but it would do the same to such a string inside a
 * message (`<|im_start|>system …` in a tool result, `<tool_response>…</tool_response>` in a user turn), letting a
 * user or a tool forge turns. HF's answer is `split_special_tokens`; here it applies to the client's text only, and
 * to EVERY added token of the tokenizer, special or not. This departs from HF on purpose: HF (and
 * `split_special_tokens`) always matches the added tokens not marked special — Qwen3's `<tool_call>`, `</tool_call>`,
 * `<tool_response>`, `</tool_response>`, `<think>`, `</think>` — so with HF a user message
 * `<tool_response>x</tool_response>` encodes to the very ids of a real tool result and a tool result can write the
 * model's own `<tool_call>` token. Here they are the characters they are made of, in the agent's prompt and the
 * judge's alike; the template's own uses of them stay tokens.
 *   1. every string the template receives from the conversation (message fields, tool specs, keys included) has
 *      each added-token string replaced by a placeholder: a private-use character, a per-call random nonce, an
 *      index, a closing private-use character — nothing a client can write (the two characters are replaced too
 *      where a client writes them), nothing a template filter changes except by cutting or escaping it, which is
 *      refused;
 *   2. the template renders that, so every added-token string left in the rendering is the template's own;
 *   3. the rendering is encoded as the tokenizer encodes (added tokens split out first, then normaliser,
 *      pre-tokeniser, model, post-processor), except that each placeholder is put back as its original text
 *      inside the plain piece it sits in, so `<|eot_id|>` or `<tool_call>` there is encoded as its characters.
 * A conversation with no added-token string in it is untouched, and encoded exactly as before.
 * Fail closed: a placeholder a template mangled, or plain text the model's vocabulary would map to an added token's
 * id, is a SafekeepError, never a prompt with forged markup. (A template that reads client text for its own markup —
 * Qwen3's splits an assistant `content` at `</think>` — no longer finds the client's copy: it stays text.)
 */
import { randomBytes } from 'node:crypto';
import { SafekeepError } from '../util/errors.ts';

/** What the conversation's strings became, and how to put them back. */
export class PlainContent {
  private readonly nonce = randomBytes(8).toString('hex');
  private readonly originals: string[] = [];

  /** `specialRe`: `PlainContent.matcher` of the tokenizer's added-token strings (built once per tokenizer) */
  constructor(private readonly specialRe: RegExp | null) {}

  /** One pattern matching any of `specials`, the longest first where several begin at one place. */
  static matcher(specials: readonly string[]): RegExp | null {
    const sorted = [...new Set(specials)].filter((s) => s.length > 0).sort((a, b) => b.length - a.length);
    if (!sorted.length) return null;
    // the placeholders' own delimiters are replaced too where a client writes them, so that any left in a rendering
    // are the remains of a placeholder the template cut
    return new RegExp([...sorted.map(escapeRegExp), OPEN, CLOSE].join('|'), 'g');
  }

  /** whether any special-token string was replaced */
  get replaced(): boolean {
    return this.originals.length > 0;
  }

  private placeholder(i: number): string {
    return `${OPEN}${this.nonce}${i.toString(36)}${CLOSE}`;
  }

  /** `v` with every special-token string in its strings (object keys too) replaced by a placeholder. */
  neutralise<T>(v: T, depth = 0): T {
    if (typeof v === 'string') return this.neutraliseString(v) as T;
    if (v === null || typeof v !== 'object' || depth > 256) return v;
    if (Array.isArray(v)) return v.map((x) => this.neutralise(x, depth + 1)) as T;
    const proto = Object.getPrototypeOf(v);
    if (proto !== Object.prototype && proto !== null) return v;
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) out[this.neutraliseString(k)] = this.neutralise(x, depth + 1);
    return out as T;
  }

  private neutraliseString(s: string): string {
    if (!this.specialRe) return s;
    return s.replace(this.specialRe, (m) => {
      this.originals.push(m);
      return this.placeholder(this.originals.length - 1);
    });
  }

  /** `text` with its placeholders back as their original strings; null when it holds none. */
  restore(text: string): string | null {
    if (!text.includes(OPEN) && !text.includes(CLOSE) && !text.includes(this.nonce)) return null;
    const re = new RegExp(`${OPEN}${this.nonce}([0-9a-z]+)${CLOSE}`, 'g');
    // a placeholder the template cut, escaped or re-cased: its text can no longer be put back for sure
    const rest = text.replace(re, '');
    if (rest.includes(OPEN) || rest.includes(CLOSE) || rest.includes(this.nonce)) {
      throw new SafekeepError('chat template: it changed the text of a message in a way safekeep cannot encode safely (a special-token string in the conversation was cut or escaped by the template)');
    }
    return text.replace(re, (m, i: string) => this.originals[parseInt(i, 36)] ?? m);
  }

  /** `text` with its placeholders back, whether or not it holds any. */
  restoreAll(text: string): string {
    return this.restore(text) ?? text;
  }
}

/** Placeholder delimiters: private-use characters, which no filter of a template trims, escapes or re-cases. */
const OPEN = '\uE000';
const CLOSE = '\uE001';

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** The parts of @huggingface/tokenizers' Tokenizer that encoding uses (its `encode_text` and `encode`). */
interface CoreAddedToken { content: string; id: number; lstrip: boolean; rstrip: boolean; special: boolean; normalized: boolean }
interface CoreTokenizer {
  added_tokens: CoreAddedToken[];
  added_tokens_map: Map<string, CoreAddedToken>;
  splitter_unnormalized: { split(text: string): string[] };
  splitter_normalized: { split(text: string): string[] };
  normalizer: ((text: string) => string) | null;
  pre_tokenizer: ((text: string, options: { section_index: number }) => string[]) | null;
  model: ((tokens: string[]) => string[]) & { tokens_to_ids: Map<string, number>; unk_token_id?: number };
  post_processor: ((tokens: string[], pair: string[] | null, addSpecialTokens: boolean) => { tokens: string[] }) | null;
  remove_space?: boolean;
  do_lowercase_and_remove_accent?: boolean;
}

/** The core tokenizer inside a transformers.js PreTrainedTokenizer, checked to have what `encodeWithPlainContent` uses. */
export function coreTokenizer(hf: unknown): CoreTokenizer {
  const t = (hf as { _tokenizer?: CoreTokenizer })._tokenizer;
  const ok =
    t &&
    Array.isArray(t.added_tokens) &&
    t.added_tokens_map instanceof Map &&
    typeof t.splitter_unnormalized?.split === 'function' &&
    typeof t.splitter_normalized?.split === 'function' &&
    typeof t.model === 'function' &&
    t.model.tokens_to_ids instanceof Map;
  if (!ok) throw new SafekeepError('tokenizer: this @huggingface/transformers version does not expose what encoding client text as plain text needs');
  return t!;
}

/** Every added-token string of a tokenizer, special or not (HF matches both kinds in text; see the module comment). */
export function addedTokenStrings(core: CoreTokenizer): string[] {
  return core.added_tokens.map((t) => t.content);
}

/**
 * The tokenizer's `encode(text, { add_special_tokens: true })` (the same steps as @huggingface/tokenizers'
 * `encode_text` + post-processor), where `text` holds placeholders of `plain`: the pieces between added tokens get
 * their placeholders back before they are normalised and split, so that text is never an added token.
 */
export function encodeWithPlainContent(core: CoreTokenizer, text: string, plain: PlainContent): number[] {
  if (core.do_lowercase_and_remove_accent) throw new SafekeepError('tokenizer: lowercase-and-remove-accent tokenizers cannot encode client text as plain text here');
  const idOf = (t: string): number => core.added_tokens_map.get(t)?.id ?? core.model.tokens_to_ids.get(t) ?? core.model.unk_token_id ?? -1;
  const addedIds = new Set(core.added_tokens.map((t) => t.id));

  const sections = core.splitter_unnormalized.split(text);
  sections.forEach((section, i) => {
    const added = core.added_tokens_map.get(section);
    if (added) {
      if (added.lstrip && i > 0) sections[i - 1] = sections[i - 1]!.trimEnd();
      if (added.rstrip && i < sections.length - 1) sections[i + 1] = sections[i + 1]!.trimStart();
    }
  });
  const tokens: string[] = [];
  sections.forEach((section, sectionIndex) => {
    if (section.length === 0) return;
    if (core.added_tokens_map.has(section)) {
      tokens.push(section);
      return;
    }
    const restored = plain.restore(section);
    let processed = restored ?? section;
    if (core.remove_space === true) processed = processed.trim().split(/\s+/).join(' ');
    if (core.normalizer !== null) processed = core.normalizer(processed);
    if (processed.length === 0) return;
    const subsections = core.splitter_normalized.split(processed);
    subsections.forEach((sub, j) => {
      const added = core.added_tokens_map.get(sub);
      if (added) {
        if (added.lstrip && j > 0) subsections[j - 1] = subsections[j - 1]!.trimEnd();
        if (added.rstrip && j < subsections.length - 1) subsections[j + 1] = subsections[j + 1]!.trimStart();
      }
    });
    for (const sub of subsections) {
      if (sub.length === 0) continue;
      const added = core.added_tokens_map.get(sub);
      if (added) {
        // an added token matched after normalising, in a piece that held client text: it may be the client's
        if (restored !== null && added.normalized) {
          throw new SafekeepError('tokenizer: its added tokens are matched after normalisation, so client text containing them cannot be encoded as plain text');
        }
        tokens.push(sub);
        continue;
      }
      const pieces = core.pre_tokenizer !== null ? core.pre_tokenizer(sub, { section_index: sectionIndex }) : [sub];
      const modelTokens = core.model(pieces);
      if (restored !== null && modelTokens.some((t) => addedIds.has(idOf(t)))) {
        throw new SafekeepError('tokenizer: client text would encode to an added token id; refused');
      }
      tokens.push(...modelTokens);
    }
  });
  const out = core.post_processor ? core.post_processor(tokens, null, true).tokens : tokens;
  return out.map(idOf);
}
