/**
 * `safekeep s3 rules --endpoint URL --endpoint-model M [--bench injecagent|agentharm|mixed | --tools FILE]
 *    [--seed FILE] [--out FILE] [--limit N] [--per-tool 2] [--injecagent DIR] [--agentharm DIR] [--api-key-env VAR]
 *    [--timeout-ms 60000] [--retries 3] [--no-cache] [--no-thinking]`
 * Generates the rule-memory skill's SafeHarbor-style rules once from a seed set (default
 * skills/rule-memory/seed.json) for the tools of a benchmark (or a JSON list of tool specs) and saves them as a
 * reviewable file (default skills/rule-memory/memory.json; seed rules are kept, marked "seed").
 *
 * `safekeep s3 rules --false-positives [--skill skills/tool-rules] [--injecagent DIR] [--agentharm DIR] [--out FILE]`
 * (no model): how often a tool_selection rules skill fires on every benign call of the bundled pairs, AgentHarm's
 * benign behaviours and InjecAgent's user tools (false-positive rate), and on InjecAgent's data-stealing sends
 * (hit rate) — src/eval/s3/rules-fp.ts. Prints the table; --out FILE writes it as JSON.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { numberValue, parseArgs, requireValue, type FlagTable } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { writeFileAtomic } from '../../util/atomic.ts';
import { locateDataset, repoRoot } from '../../data/locate.ts';
import { readInjecAgentTools } from '../../data/injecagent.ts';
import { readAgentHarmTools } from '../../data/agentharm.ts';
import { validateToolSpec } from '../../data/validate.ts';
import type { ToolSpec } from '../../data/types.ts';
import { readRuleMemory } from '../../s3/memory.ts';
import { generateRuleMemory } from '../../s3/authoring/rule-gen.ts';
import { dataDirsEnv } from '../env.ts';
import { checkEndpointUrl, endpointBackend, noThinkingBody } from '../backend.ts';

export const summary = 'S³: generate the rule-memory skill\'s safety rules once from a seed set (endpoint)';

export const flags: FlagTable = {
  usage: 's3 rules --endpoint URL --endpoint-model M (--bench injecagent|agentharm|mixed | --tools FILE) [flags]',
  flags: [
    { name: 'endpoint', value: 'URL', help: 'OpenAI-compatible endpoint that writes the rules' },
    { name: 'endpoint-model', value: 'NAME', help: 'model name at the endpoint' },
    { name: 'bench', value: 'injecagent|agentharm|mixed', help: 'take the tools of a benchmark' },
    { name: 'tools', value: 'FILE', help: 'or a JSON list of tool specs' },
    { name: 'seed', value: 'FILE', default: 'skills/rule-memory/seed.json', help: 'seed rules' },
    { name: 'out', value: 'FILE', default: 'skills/rule-memory/memory.json', help: 'the reviewable rule file' },
    { name: 'limit', value: 'N', help: 'first N tools' },
    { name: 'per-tool', value: 'N', default: '2', help: 'rules asked for per tool' },
    { name: 'injecagent', value: 'DIR', default: 'the located dataset', help: 'InjecAgent folder' },
    { name: 'agentharm', value: 'DIR', default: 'the located dataset', help: 'AgentHarm folder' },
    { name: 'api-key-env', value: 'VAR', help: 'environment variable holding the endpoint API key' },
    { name: 'timeout-ms', value: 'MS', default: '60000', help: 'endpoint timeout' },
    { name: 'retries', value: 'N', default: '3', help: 'endpoint retries' },
    { name: 'no-cache', boolean: true, help: 'do not cache endpoint answers' },
    { name: 'no-thinking', boolean: true, help: 'ask the endpoint to answer without thinking' },
    { name: 'false-positives', boolean: true, help: 'measure a rules skill\'s false-positive and hit rates instead (no model)' },
    { name: 'skill', value: 'DIR', default: 'skills/tool-rules', help: 'with --false-positives: the rules skill' },
  ],
  example: 's3 rules --endpoint http://localhost:8000/v1 --endpoint-model M --bench mixed',
};

async function falsePositives(args: ReturnType<typeof parseArgs>): Promise<number> {
  const { loadSkill } = await import('../../s3/skill-file.ts');
  const { rulesFpMarkdown, rulesFpReport } = await import('../../eval/s3/rules-fp.ts');
  const { AGENT_SYSTEM } = await import('../../benchmarks/cases.ts');
  const skill = loadSkill(resolve(args.values.get('skill') ?? join(repoRoot, 'skills', 'tool-rules')));
  if (skill.check !== 'rules' || skill.stage !== 'tool_selection') throw new SafekeepError(`--skill ${skill.dir}: --false-positives measures a "check: rules" skill at tool_selection (this one: check ${skill.check}, stage ${skill.stage})`);
  const dirs = {
    agentharm: resolve(args.values.get('agentharm') ?? locateDataset('agentharm', dataDirsEnv())),
    injecagent: resolve(args.values.get('injecagent') ?? locateDataset('injecagent', dataDirsEnv())),
  };
  const r = await rulesFpReport(skill, dirs, AGENT_SYSTEM, { backend: { name: 'none', callFormat: 'llama3', chat: () => Promise.reject(new SafekeepError('no model')) } });
  process.stdout.write(rulesFpMarkdown(r));
  const out = args.values.get('out');
  if (out !== undefined) {
    writeFileAtomic(resolve(out), JSON.stringify({ ...r, data: dirs }, null, 2) + '\n');
    process.stdout.write(`wrote ${resolve(out)}\n`);
  }
  return 0;
}

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  if (args.booleans.has('false-positives')) return falsePositives(args);
  const endpoint = checkEndpointUrl('endpoint', requireValue(args, 'endpoint'));
  const model = requireValue(args, 'endpoint-model');
  const bench = args.values.get('bench');
  const toolsFile = args.values.get('tools');
  if ((bench === undefined) === (toolsFile === undefined)) throw new SafekeepError('give exactly one of --bench injecagent|agentharm|mixed or --tools FILE');
  let tools: ToolSpec[] = [];
  if (toolsFile !== undefined) {
    let raw: unknown;
    try {
      raw = JSON.parse(readFileSync(toolsFile, 'utf8'));
    } catch (e) {
      throw new SafekeepError(`--tools ${toolsFile}: not readable JSON (${(e as Error).message})`);
    }
    if (!Array.isArray(raw)) throw new SafekeepError(`--tools ${toolsFile}: expected a JSON list of tool specs`);
    tools = raw.map((t, i) => validateToolSpec(t, `${toolsFile}: [${i}]`));
  } else {
    if (!['injecagent', 'agentharm', 'mixed'].includes(bench!)) throw new SafekeepError(`--bench must be injecagent, agentharm or mixed, got '${bench}'`);
    if (bench !== 'agentharm') tools.push(...readInjecAgentTools(resolve(args.values.get('injecagent') ?? locateDataset('injecagent', dataDirsEnv()))).values());
    if (bench !== 'injecagent') {
      const ah = readAgentHarmTools(resolve(args.values.get('agentharm') ?? locateDataset('agentharm', dataDirsEnv())));
      for (const t of [...ah.harmful.values(), ...ah.benign.values()]) if (!tools.some((x) => x.function.name === t.function.name)) tools.push(t);
    }
  }
  const limit = numberValue(args, 'limit', Infinity);
  if (!(Number.isInteger(limit) && limit >= 1) && limit !== Infinity) throw new SafekeepError(`--limit must be a positive integer, got ${limit}`);
  const perTool = numberValue(args, 'per-tool', 2);
  if (!Number.isInteger(perTool) || perTool < 1 || perTool > 10) throw new SafekeepError(`--per-tool must be 1..10, got ${perTool}`);
  tools = tools.slice(0, limit);
  const seedFile = resolve(args.values.get('seed') ?? join(repoRoot, 'skills', 'rule-memory', 'seed.json'));
  const seed = readRuleMemory(seedFile);
  const out = resolve(args.values.get('out') ?? join(repoRoot, 'skills', 'rule-memory', 'memory.json'));
  const { backend } = endpointBackend(args, endpoint, model, { cacheDir: join(repoRoot, 'results', model.replace(/[^\w.-]+/g, '_'), 's3', 'cache'), extraBody: noThinkingBody(args) });
  process.stderr.write(`s3 rules: ${tools.length} tools, ${seed.rules.length} seed rules, ${backend.name}\n`);
  const memory = await generateRuleMemory(tools, seed, backend, {
    perTool,
    onProgress: (d, n) => { if (d === n || d % 10 === 0) process.stderr.write(`s3 rules: ${d}/${n}\n`); },
  });
  writeFileAtomic(out, JSON.stringify(memory, null, 2) + '\n');
  const generated = memory.rules.filter((r) => r.origin === 'generated').length;
  process.stdout.write(`wrote ${out}: ${memory.rules.length} rules (${seed.rules.length} seed + ${generated} generated); review it before use\n`);
  return 0;
}
