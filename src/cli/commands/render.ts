/**
 * `safekeep render --model DIR [--template FILE] [--tokenizer DIR] --data pairs|agentharm|PATH
 *    --config chatbot|+role|+instructions|agent (= +tools)|chatbot-long [--repr schema|flattened|pseudoword]
 *    [--which harmful|benign|both] [--limit N] [--seed N] [--thinking on|off] [--chat-template-kwargs JSON] [--json]`
 *
 * Prints the exact rendered prompts (each after a `### ...` header line); `--json` prints one JSON object with
 * the prompt manifest (template hash, our texts), the data set hash, and per prompt its text, sha256 and token ids.
 * A model folder without tokenizer.json (e.g. a Mistral template only) renders text only, and says so; `--tokenizer
 * DIR` borrows another folder's vocabulary for ids and lengths.
 */
import { numberValue, parseArgs, requireValue, type FlagTable } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { loadPairSet } from '../../data/load.ts';
import { CONFIGS, isConfigName, isToolRepr, PromptBuilder, REPRS, type RenderedPrompt } from '../../prompts/configurations.ts';
import { loadPromptTexts } from '../../prompts/texts.ts';
import { loadPromptTokenizer } from '../../prompts/tokenizer.ts';
import { parseTemplateKwargs, resolveTemplateKwargs } from '../../prompts/thinking.ts';
import { THINKING_FLAG_DEFS, thinkingOptions } from '../thinking-flags.ts';
import { dataDirsEnv } from '../env.ts';

export const summary = 'print the exact prompts of a configuration (chatbot … agent, schema/flattened/pseudoword)';

export const flags: FlagTable = {
  usage: 'render --model M [--config C] [--repr R] [--data pairs|agentharm|PATH] [flags]',
  flags: [
    { name: 'model', value: 'DIR', help: 'model folder (its chat template and tokenizer)' },
    { name: 'template', value: 'FILE', help: 'chat template file instead of the model folder\'s' },
    { name: 'tokenizer', value: 'DIR', help: 'borrow another folder\'s tokenizer.json for ids and lengths' },
    { name: 'data', value: 'pairs|agentharm|PATH', default: 'pairs', help: 'pair source' },
    { name: 'config', value: 'chatbot|+role|+instructions|agent|chatbot-long', default: 'agent', help: 'prompt configuration (+tools = agent)' },
    { name: 'repr', value: 'schema|flattened|pseudoword', default: 'schema', help: 'tool representation (agent only)' },
    { name: 'which', value: 'harmful|benign|both', default: 'harmful', help: 'which request of each pair' },
    { name: 'limit', value: 'N', default: '3', help: 'number of pairs' },
    { name: 'seed', value: 'N', default: '0', help: 'pseudoword seed' },
    ...THINKING_FLAG_DEFS,
    { name: 'template-kwargs', value: 'JSON', help: 'the same as --chat-template-kwargs (older name)' },
    { name: 'json', boolean: true, help: 'one JSON object with the prompt manifest, hashes and token ids' },
  ],
  example: 'render --model models/planted --config agent --repr flattened --limit 3',
};

const WHICH = ['harmful', 'benign', 'both'] as const;


export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const model = requireValue(args, 'model');
  // the paper's name for the full agent prompt is "+tools"
  const configArg = args.values.get('config') ?? 'agent';
  const config = configArg === '+tools' ? 'agent' : configArg;
  if (!isConfigName(config)) throw new SafekeepError(`--config must be one of ${CONFIGS.join(', ')}; got '${config}'`);
  const repr = args.values.get('repr') ?? 'schema';
  if (!isToolRepr(repr)) throw new SafekeepError(`--repr must be one of ${REPRS.join(', ')}; got '${repr}'`);
  if (config !== 'agent' && repr !== 'schema') throw new SafekeepError(`--repr ${repr} only applies to --config agent`);
  const whichArg = args.values.get('which') ?? 'harmful';
  if (!(WHICH as readonly string[]).includes(whichArg)) throw new SafekeepError(`--which must be harmful, benign or both; got '${whichArg}'`);
  const sides: Array<'harmful' | 'benign'> = whichArg === 'both' ? ['harmful', 'benign'] : [whichArg as 'harmful' | 'benign'];
  const limit = numberValue(args, 'limit', 3);
  if (!Number.isInteger(limit) || limit < 1) throw new SafekeepError(`--limit must be a positive integer; got ${limit}`);
  const seed = numberValue(args, 'seed', 0);

  const tok = await loadPromptTokenizer(model, { template: args.values.get('template'), tokenizerDir: args.values.get('tokenizer') });
  if (args.values.has('template-kwargs') && args.values.has('chat-template-kwargs')) throw new SafekeepError('give --chat-template-kwargs or --template-kwargs, not both');
  const th = thinkingOptions(args);
  const kw = args.values.has('template-kwargs') ? parseTemplateKwargs(args.values.get('template-kwargs'), '--template-kwargs') : th.chatTemplateKwargs;
  const template = resolveTemplateKwargs(tok.template, th.thinking, kw);
  const builder = new PromptBuilder(tok, { texts: loadPromptTexts(), seed, templateKwargs: template.kwargs });
  const set = await loadPairSet(args.values.get('data') ?? 'pairs', dataDirsEnv());
  const pairs = set.pairs.slice(0, limit);

  const rows: Array<{ pairId: string; category: string; which: 'harmful' | 'benign'; prompt: RenderedPrompt }> = [];
  for (const p of pairs) {
    for (const w of sides) {
      rows.push({ pairId: p.id, category: p.category, which: w, prompt: builder.render(p[w].prompt, p.tools, config, repr) });
    }
  }

  const vocabNote =
    tok.vocab === 'none'
      ? 'text only: no tokenizer.json in the model folder (pass --tokenizer DIR for ids)'
      : tok.vocab === 'other-folder'
        ? `token ids from another folder's vocabulary (${tok.vocabDir})`
        : 'token ids from the model tokenizer';
  if (args.booleans.has('json')) {
    const out = {
      manifest: builder.manifest(),
      thinking: template.thinking,
      data: { name: set.name, hash: set.hash, pairs: set.pairs.length },
      config,
      repr: config === 'agent' ? repr : null,
      vocab: tok.vocab,
      prompts: rows.map((r) => ({
        pairId: r.pairId,
        category: r.category,
        which: r.which,
        text: r.prompt.text,
        sha256: r.prompt.hash,
        tokens: r.prompt.ids?.length ?? null,
        ids: r.prompt.ids,
        ...(r.prompt.lengthTarget ? { lengthTarget: r.prompt.lengthTarget } : {}),
      })),
    };
    process.stdout.write(JSON.stringify(out, null, 2) + '\n');
  } else {
    process.stderr.write(
      `render: template ${tok.templateSource} (${tok.family}, sha256 ${tok.templateHash.slice(0, 12)}), ${vocabNote}; ` +
        `system messages ${builder.systemSupported ? 'kept' : 'folded into the user turn'}; thinking ${template.thinking}; data ${set.name} (${set.pairs.length} pairs)\n`,
    );
    for (const r of rows) {
      const p = r.prompt;
      const tokens = p.ids ? `${p.ids.length} tokens` : 'tokens n/a';
      const target = p.lengthTarget ? ` (agent ${p.lengthTarget.agentTokens}, filler ${p.lengthTarget.fillerWords} words)` : '';
      process.stdout.write(`### ${r.pairId} · ${r.which} · ${config}${p.repr ? '/' + p.repr : ''} · ${tokens}${target} · sha256 ${p.hash}\n${p.text}\n\n`);
    }
  }
  return 0;
}
