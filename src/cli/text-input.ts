/**
 * Text in, text out for `forward` and `generate`: the input is `--ids IDS.json` (token ids), `--prompt TEXT` (raw
 * text, encoded as is: special tokens parsed, BOS added by the tokenizer) or `--chat TEXT` (one user message rendered
 * with the model's chat template and the assistant-turn header, the message encoded as plain text); the tokenizer,
 * when the model folder has one, decodes what comes out. `--logits none|last|all` says which logits an output file
 * gets.
 */
import { SafekeepError } from '../util/errors.ts';
import { loadPromptTokenizer, type PromptTokenizer } from '../prompts/tokenizer.ts';
import { choiceValue, type FlagDef, type ParsedArgs } from './args.ts';
import { readIdsFile } from './engine-flags.ts';

export const TEXT_INPUT_FLAG_DEFS: readonly FlagDef[] = [
  { name: 'ids', value: 'IDS.json', help: '{"input_ids": [[int, ...], ...]} (or --prompt / --chat)' },
  { name: 'prompt', value: 'TEXT', help: 'raw text, tokenized as is (special tokens parsed, BOS added by the tokenizer)' },
  { name: 'chat', value: 'TEXT', help: "one user message, rendered with the model's chat template and the assistant-turn header" },
];

export const LOGITS_CHOICES = ['none', 'last', 'all'] as const;
export type LogitsChoice = (typeof LOGITS_CHOICES)[number];

export const logitsFlag = (fallback: LogitsChoice, what: string): FlagDef => ({
  name: 'logits', value: LOGITS_CHOICES.join('|'), default: fallback, help: `logits written to the output: ${what}`,
});

export const logitsValue = (args: ParsedArgs, fallback: LogitsChoice): LogitsChoice => choiceValue(args, 'logits', LOGITS_CHOICES, fallback);

/** The token ids of the call and the tokenizer (null: ids input and no tokenizer in the model folder). */
export async function readTextInput(args: ParsedArgs, modelDir: string): Promise<{ ids: number[][]; tok: PromptTokenizer | null }> {
  const given = ['ids', 'prompt', 'chat'].filter((f) => args.values.has(f));
  if (given.length !== 1) throw new SafekeepError(`give exactly one of --ids, --prompt, --chat${given.length ? ` (got ${given.map((g) => `--${g}`).join(', ')})` : ''}`);
  if (given[0] === 'ids') {
    const ids = readIdsFile(args.values.get('ids')!);
    return { ids, tok: await loadPromptTokenizer(modelDir).catch(() => null) };
  }
  const text = args.values.get(given[0]!)!;
  if (text.length === 0 || text.length > 1_000_000) throw new SafekeepError(`--${given[0]}: needs 1 to 1,000,000 characters`);
  let tok: PromptTokenizer;
  try {
    tok = await loadPromptTokenizer(modelDir);
  } catch (e) {
    throw new SafekeepError(`--${given[0]} needs the model's tokenizer: ${(e as Error).message.split('\n')[0]}`);
  }
  if (tok.vocab === 'none') throw new SafekeepError(`--${given[0]}: ${modelDir} has a chat template but no tokenizer.json`);
  // --chat is a message: its text stays text even where it spells a special token (--prompt is raw, parsed as is)
  const ids = given[0] === 'chat' ? tok.encodeChat([{ role: 'user', content: text }], { addGenerationPrompt: true }) : tok.encode(text);
  return { ids: [ids], tok };
}
