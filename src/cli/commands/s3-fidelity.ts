/**
 * `safekeep s3 fidelity --skill DIR --original safekeep-judge|tool-rules --bench pairs|agentharm|FILE.jsonl
 *    [--endpoint URL --endpoint-model M | --model DIR] [--limit N] [--no-guard-decision] [--unparseable unsafe|safe]
 *    [--out DIR] [--data DIR] [--api-key-env VAR] [--timeout-ms 60000] [--no-thinking] [--dtype ..] [--device ..]`
 * S³'s Table 3 (src/eval/s3/fidelity.ts): disagreement rates between a skill and the original implementation it
 * came from, hazardous and benign instances separately, with Wilson intervals. pairs / agentharm give input-stage
 * requests (hazardous = harmful, pairs: the first --limit pairs); a JSONL file gives any stage's instances.
 * The skill runs as the guard agent reads its SKILL.md text (--skill-run text, the default; needs a model) or through
 * the guard with its own check code (--skill-run check). A skill folder written by `s3 transform` (it has
 * transform/transform.json) is compared in both versions, its draft (round 1) and its final skill: S³'s Table 3 rows.
 * Writes <out>/fidelity-<skill>-vs-<original>.{md,json} (default results/<name>/s3/) and prints the table.
 * A rules-only comparison (--skill-run check --no-guard-decision, original tool-rules) needs no model.
 */
import { join, resolve } from 'node:path';
import { numberValue, parseArgs, requireValue, type FlagTable } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { writeFileAtomic } from '../../util/atomic.ts';
import { locateDataset, repoRoot } from '../../data/locate.ts';
import { loadPairSet } from '../../data/load.ts';
import { AGENT_SYSTEM, agentHarmCases } from '../../benchmarks/cases.ts';
import { loadSkill } from '../../s3/skill-file.ts';
import { fidelityMarkdown, fidelityTable3, ORIGINALS, readInstances, runFidelity, type FidelityInstance, type FidelityResult, type OriginalName, type SkillRun } from '../../eval/s3/fidelity.ts';
import { existsSync, readFileSync } from 'node:fs';
import type { Skill } from '../../s3/skill.ts';
import type { ChatBackend } from '../../guard/types.ts';
import { dataDirsEnv } from '../env.ts';
import { noThinkingPlan, openChatBackend, targetIfAny } from '../backend.ts';

export const summary = 'S³ Table 3: disagreement of a skill with its original implementation (hazardous / benign)';

export const flags: FlagTable = {
  usage: 's3 fidelity --skill DIR --original safekeep-judge|tool-rules --bench pairs|agentharm|FILE.jsonl [--endpoint URL --endpoint-model M | --model DIR] [flags]',
  flags: [
    { name: 'skill', value: 'DIR', help: 'the skill folder (SKILL.md)' },
    { name: 'original', value: 'safekeep-judge|tool-rules', help: 'the implementation in code it came from' },
    { name: 'bench', value: 'pairs|agentharm|FILE.jsonl', help: 'input-stage requests, or a JSONL file of {id, hazardous, event}' },
    { name: 'endpoint', value: 'URL', help: 'OpenAI-compatible endpoint (guard agent, judge, llm checks)' },
    { name: 'endpoint-model', value: 'NAME', help: 'model name at the endpoint' },
    { name: 'model', value: 'DIR', help: 'a local model instead of an endpoint' },
    { name: 'limit', value: 'N', help: 'first N pairs / cases / instances' },
    { name: 'no-guard-decision', boolean: true, help: 'run the skill without the guard agent\'s pick' },
    { name: 'skill-run', value: 'text|check', default: 'text', help: 'text: the guard agent reads the SKILL.md text; check: the guard runs the skill\'s own check code' },
    { name: 'unparseable', value: 'unsafe|safe', default: 'unsafe', help: 'an answer that is neither YES nor NO counts as' },
    { name: 'out', value: 'DIR', default: 'results/<name>/s3', help: 'output folder' },
    { name: 'name', value: 'NAME', default: 'model folder, endpoint model, or rules', help: 'results name' },
    { name: 'data', value: 'DIR', default: 'the located dataset', help: 'AgentHarm folder (--bench agentharm)' },
    { name: 'api-key-env', value: 'VAR', help: 'environment variable holding the endpoint API key' },
    { name: 'timeout-ms', value: 'MS', default: '60000', help: 'endpoint timeout' },
    { name: 'dtype', value: 'f32|bf16|f16|bf16w|q8|q4', default: 'f32 on cpu, f16 on cuda', help: 'local model precision' },
    { name: 'device', value: 'cpu|cuda', default: 'cpu', help: 'local model device' },
    { name: 'threads', value: 'N', default: 'one per physical core', help: 'intra-op threads' },
    { name: 'template', value: 'FILE', help: 'chat template file instead of the model folder\'s' },
    { name: 'no-thinking', boolean: true, help: 'enable_thinking=false (Qwen3): template kwarg locally, chat_template_kwargs at an endpoint' },
  ],
  example: 's3 fidelity --skill skills/safekeep-judge --original safekeep-judge --bench pairs --limit 20 --model models/planted',
};

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const skill = loadSkill(resolve(requireValue(args, 'skill')));
  const original = requireValue(args, 'original');
  if (!(ORIGINALS as readonly string[]).includes(original)) throw new SafekeepError(`--original must be one of ${ORIGINALS.join(', ')}, got '${original}'`);
  const bench = requireValue(args, 'bench');
  const limit = args.values.has('limit') ? numberValue(args, 'limit') : Infinity;
  if (!(limit === Infinity || (Number.isInteger(limit) && limit >= 1))) throw new SafekeepError(`--limit must be a positive integer, got ${limit}`);
  const unparseable = args.values.get('unparseable') ?? 'unsafe';
  if (unparseable !== 'unsafe' && unparseable !== 'safe') throw new SafekeepError(`--unparseable must be unsafe or safe, got '${unparseable}'`);
  const guardDecision = !args.booleans.has('no-guard-decision');
  const skillRun = args.values.get('skill-run') ?? 'text';
  if (skillRun !== 'text' && skillRun !== 'check') throw new SafekeepError(`--skill-run must be text or check, got '${skillRun}'`);
  // a transformed skill: its draft (round 1) too, when that round parsed
  const versions: { version: string; skill: Skill }[] = [{ version: 'Final', skill }];
  const history = join(skill.dir, 'transform', 'transform.json');
  if (existsSync(history)) {
    const h = JSON.parse(readFileSync(history, 'utf8')) as { draft?: string | null };
    if (h.draft) versions.unshift({ version: 'Draft', skill: loadSkill(resolve(skill.dir, h.draft)) });
    else process.stderr.write('s3 fidelity: the transform\'s draft (round 1) is not a valid skill; only the final version is compared\n');
  }

  let instances: FidelityInstance[];
  if (bench === 'pairs') {
    const set = await loadPairSet('pairs', dataDirsEnv());
    instances = set.pairs.slice(0, limit).flatMap((p) => (['harmful', 'benign'] as const).map((k) => ({
      id: `${k}/${p.id}`, hazardous: k === 'harmful',
      event: { stage: 'input' as const, messages: [{ role: 'system', content: AGENT_SYSTEM }, { role: 'user', content: p[k].prompt }], tools: [...p.tools] },
    })));
  } else if (bench === 'agentharm') {
    instances = agentHarmCases(resolve(args.values.get('data') ?? locateDataset('agentharm', dataDirsEnv())), limit).map((c) => ({
      id: c.id, hazardous: c.kind === 'harmful', event: { stage: 'input' as const, messages: c.request.messages, tools: c.request.tools },
    }));
  } else {
    instances = readInstances(resolve(bench)).slice(0, limit);
  }

  const target = targetIfAny(args);
  const needsModel = skillRun === 'text' || guardDecision || original === 'safekeep-judge' || versions.some((v) => v.skill.check === 'llm');
  if (!target && needsModel) throw new SafekeepError('this comparison calls a model (guard agent, judge or llm check): give --endpoint URL --endpoint-model M or --model DIR (or --skill-run check --no-guard-decision for rules vs rules)');
  // no cache folder: the command has no --no-cache to turn one off, so its endpoint answers are never cached
  const opened = target ? await openChatBackend(args, target, noThinkingPlan(args)) : undefined;
  const backend: ChatBackend = opened?.backend ?? { name: 'none', callFormat: 'llama3', chat: () => Promise.reject(new SafekeepError('no model was given')) };
  const model = target?.model;
  try {
    const results: { version: string; result: FidelityResult }[] = [];
    for (const v of versions) {
      results.push({
        version: v.version,
        result: await runFidelity(v.skill, original as OriginalName, instances, { backend, onUnparseable: unparseable }, {
          guardDecision, skillRun: skillRun as SkillRun, repoSkills: join(repoRoot, 'skills'),
          onProgress: (d, t) => { if (d === t || d % 20 === 0) process.stderr.write(`s3 fidelity (${v.version}): ${d}/${t}\n`); },
        }),
      });
    }
    const r = results.at(-1)!.result;
    const name = (args.values.get('name') ?? (model ? resolve(model).split('/').pop()! : args.values.get('endpoint-model') ?? 'rules')).replace(/[^\w.-]+/g, '_');
    const out = resolve(args.values.get('out') ?? join(repoRoot, 'results', name, 's3'));
    const base = join(out, `fidelity-${skill.name}-vs-${original}`);
    const md = versions.length > 1 ? `${fidelityTable3(results)}\n${results.map((x) => `## ${x.version}\n\n${fidelityMarkdown(x.result)}`).join('\n')}` : fidelityMarkdown(r);
    writeFileAtomic(`${base}.md`, md);
    writeFileAtomic(`${base}.json`, JSON.stringify({ ...r, bench, backend: backend.name, versions: results.map((x) => ({ version: x.version, groups: x.result.groups, rows: x.result.rows })) }, null, 2) + '\n');
    process.stdout.write(`${md}\nwrote ${base}.md, ${base}.json\n`);
  } finally {
    await opened?.dispose();
  }
  return 0;
}
