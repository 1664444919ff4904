/**
 * `safekeep s3 eval (--endpoint URL --endpoint-model M | --model DIR) --bench injecagent|agentharm|mixed|air|multistage
 *    [--configs none,single:<skill>,no-recovery,full,llamafirewall] [--skills DIR[,DIR]] [--no-guard-decision] [--mitigation block]
 *    [--limit N] [--settings base,enhanced] [--max-steps 6] [--max-tokens 256] [--injecagent DIR] [--agentharm DIR]
 *    [--name NAME] [--results DIR | --out DIR] [--shard i/n]
 *    [--unparseable unsafe|safe] [--concurrency 4] [--api-key-env VAR] [--timeout-ms 60000] [--retries 3]
 *    [--prefill none|continue|prefix] [--call-format llama3|qwen|mistral] [--no-cache] [--no-thinking]
 *    [--template FILE] [--dtype ..] [--device ..] [--threads ..]`
 * S³ multi-stage defense: a multi-turn agent loop with simulated tools per task × configuration (src/s3/, src/eval/s3/).
 * Writes results/<name>/s3/s3-<bench>.{md,csv,json}, trajectories-<bench>.jsonl (every trajectory with each stage
 * decision), the per-sample log the tables are computed from (log-<bench>.jsonl: every agent and guard call) and the figure s3-<bench>.{svg,png,vl.json}, and adds the run to results/<name>/results.json (a results
 * shell when the model has no reproduce run) and report.html. `--limit N` keeps the first N tasks of each group
 * (InjecAgent: setting × attack). `--mitigation block` turns single:/full configurations into S³ without recovery.
 * One model plays agent and guard unless --guard-model / --guard-endpoint name another; both are recorded.
 * --no-filter / --no-guidance: the ablations of S³'s Table 4 (also as configurations full-no-filter, full-no-guidance).
 * `--out DIR` puts everything of the run inside DIR (tables, log, figure, results.json, report.html, shards);
 * `--results ROOT` (default results/) writes ROOT/<name>/s3 and ROOT/<name>/report.html.
 * `--shard i/n` (0-based): this shard's token-balanced share of the (configuration × task) items into
 * results/<name>/shards/s3-eval/; `safekeep merge results/<name>` writes the tables, trajectories and report as one
 * process would.
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { choiceValue, parseArgs, positiveIntValue, type FlagTable, type ParsedArgs } from '../args.ts';
import { AGENT_SAMPLING_FLAG_DEFS, agentSamplingFlags, samplingSummary } from '../sampling-flags.ts';
import { checkEndpointUrl, endpointBackend, ENDPOINT_FLAG_DEFS, LOCAL_MODEL_FLAG_DEFS, noThinkingBody, noThinkingPlan, openChatBackend, targetOf, type OpenedBackend, type Target } from '../backend.ts';
import { progressLine } from '../progress.ts';
import type { ChatBackend } from '../../guard/types.ts';
import { SafekeepError } from '../../util/errors.ts';
import { locateDataset, repoRoot } from '../../data/locate.ts';
import { s3Tasks, S3_BENCHES, type S3Bench } from '../../eval/s3/tasks.ts';
import { loadSkills, skillDirsFromFlag } from '../../s3/skill-file.ts';
import { parseConfigs, s3Items, s3Task, type S3EvalOptions } from '../../eval/s3/eval.ts';
import { dropPartial, runTask } from '../../harness/runner.ts';
import { runS3Shard, writeS3Run, type S3MergeOptions } from '../../eval/s3/shard.ts';
import { INJECAGENT_SETTINGS, type InjecAgentSetting } from '../../data/injecagent.ts';
import { parseShard } from '../../util/shard.ts';
import { sha256Hex } from '../../util/hash.ts';
import { argvWithoutShard, SHARD_FLAG_DEF, shortHash } from '../shard-flag.ts';
import { s3MarkdownTable, s3ReportRows } from '../../eval/s3/table.ts';
import { loadSkillProbe, probeCheck, SharedPrefill } from '../../s3/checks/probe.ts';
import { dataDirsEnv } from '../env.ts';
import { rulesFpMarkdown, rulesFpReport, type RulesFpReport } from '../../eval/s3/rules-fp.ts';
import type { Skill } from '../../s3/skill.ts';

export const summary = 'S³: stage-specific safety skills with recovery, multi-turn evaluation (local model or endpoint)';

export const flags: FlagTable = {
  usage: 's3 eval (--endpoint URL --endpoint-model M | --model DIR) --bench injecagent|agentharm|mixed|air|multistage [flags]',
  flags: [
    ...LOCAL_MODEL_FLAG_DEFS,
    ...ENDPOINT_FLAG_DEFS,
    { name: 'bench', value: 'injecagent|agentharm|mixed|air|multistage', help: 'task set (mixed: a benign and a hazardous component per task; air: incident response; multistage: our suite after S³\'s six risk types, scored from a scripted world\'s state)' },
    { name: 'configs', value: 'LIST', default: 'none,full', help: 'none, single:<skill>, no-recovery, full, full-no-filter, full-no-guidance, llamafirewall (the LlamaFirewall-style baseline)' },
    { name: 'skills', value: 'DIR[,DIR]', default: 'the shipped skills/', help: 'skill folders' },
    { name: 'no-guard-decision', boolean: true, help: 'run every skill that passes its filter (no guard-agent pick)' },
    { name: 'no-filter', boolean: true, help: 'ablation: no layer-2 filter (every skill of a stage passes it)' },
    { name: 'no-guidance', boolean: true, help: 'ablation: recovery without post-recovery guidance' },
    { name: 'guard-endpoint', value: 'URL', default: '--endpoint', help: 'OpenAI-compatible endpoint of the guard agent (a different model)' },
    { name: 'guard-model', value: 'NAME', default: 'the agent model', help: 'model name of the guard agent (at --guard-endpoint, else at --endpoint)' },
    { name: 'mitigation', value: 'recover|block', default: 'recover', help: 'block = S³ without recovery' },
    { name: 'limit', value: 'N', help: 'first N tasks of each group (InjecAgent: setting × attack type; multistage: risk type)' },
    { name: 'settings', value: 'base,enhanced', default: 'base,enhanced', help: 'InjecAgent settings (injecagent, mixed)' },
    { name: 'max-steps', value: 'N', default: '6', help: 'agent turns per task' },
    { name: 'max-tokens', value: 'N', default: '256', help: 'agent generation budget per turn' },
    { name: 'injecagent', value: 'DIR', default: 'the located dataset', help: 'InjecAgent folder' },
    { name: 'agentharm', value: 'DIR', default: 'the located dataset', help: 'AgentHarm folder' },
    { name: 'multistage', value: 'DIR', default: 'data/multistage', help: 'the multistage suite\'s folder (worlds.json, tasks.jsonl)' },
    { name: 'name', value: 'NAME', default: 'model folder or endpoint model', help: 'results name (results/<name>/s3)' },
    { name: 'results', value: 'DIR', default: 'results', help: 'results root: tables in DIR/<name>/s3/, report in DIR/<name>/' },
    { name: 'out', value: 'DIR', help: 'one folder for everything of this run (tables, log, figure, results.json, report, shards)' },
    { name: 'unparseable', value: 'unsafe|safe', default: 'unsafe', help: 'verdict when a guard answer cannot be parsed' },
    { name: 'no-thinking', boolean: true, help: 'ask the endpoint to answer without thinking' },
    SHARD_FLAG_DEF,
    ...AGENT_SAMPLING_FLAG_DEFS,
  ],
  example: 's3 eval --model models/planted --bench mixed --limit 2 --configs none,no-recovery,full',
};

/** The tool_selection rules skill's false-positive / hit rates on the data sets' calls (no model), when one is loaded. */
async function rulesFalsePositives(skills: readonly Skill[], dirs: { injecagent?: string; agentharm?: string }): Promise<RulesFpReport | null> {
  const sk = skills.find((s) => s.check === 'rules' && s.stage === 'tool_selection');
  if (!sk) return null;
  const { AGENT_SYSTEM } = await import('../../benchmarks/cases.ts');
  return rulesFpReport(sk, dirs, AGENT_SYSTEM, { backend: { name: 'none', callFormat: 'llama3', chat: () => Promise.reject(new SafekeepError('no model')) } });
}

/** Tables' folder and results folder: `--out DIR` = both DIR; else ROOT/<name>/s3 and ROOT/<name>. */
function s3Folders(args: ParsedArgs, name: string): { out: string; resultsDir: string } {
  const out = args.values.get('out');
  if (out !== undefined && args.values.has('results')) throw new SafekeepError('give --results ROOT (ROOT/<name>/s3) or --out DIR (everything inside DIR), not both');
  if (out !== undefined) return { out: resolve(out), resultsDir: resolve(out) };
  const resultsDir = resolve(args.values.get('results') ?? join(repoRoot, 'results'), name);
  return { out: join(resultsDir, 's3'), resultsDir };
}

/** --settings: InjecAgent settings (injecagent, mixed), every one known. */
function settingsOf(args: ParsedArgs): InjecAgentSetting[] {
  const settingsFlag = args.values.get('settings') ?? INJECAGENT_SETTINGS.join(',');
  const settings = settingsFlag.split(',').map((x) => x.trim()).filter(Boolean) as InjecAgentSetting[];
  for (const x of settings) if (!(INJECAGENT_SETTINGS as readonly string[]).includes(x)) throw new SafekeepError(`--settings: unknown '${x}' (known: ${INJECAGENT_SETTINGS.join(', ')})`);
  if (settings.length === 0) throw new SafekeepError('--settings is empty');
  return settings;
}

/** The guard agent as a different model (the paper compares a strong and a fast guard); none: the agent's model. */
function guardBackendOf(args: ParsedArgs, target: Target, out: string): ChatBackend | undefined {
  const guardEndpoint = args.values.get('guard-endpoint') ?? target.endpoint;
  const guardModel = args.values.get('guard-model');
  if (!args.values.has('guard-endpoint') && guardModel === undefined) return undefined;
  if (guardEndpoint === undefined) throw new SafekeepError('--guard-model needs an endpoint: give --guard-endpoint URL (the agent is a local --model)');
  checkEndpointUrl('guard-endpoint', guardEndpoint);
  if (guardModel === undefined) throw new SafekeepError('--guard-endpoint needs --guard-model NAME');
  return endpointBackend(args, guardEndpoint, guardModel, { cacheDir: join(out, 'cache'), extraBody: noThinkingBody(args) }).backend;
}

/**
 * The agent's backend — behind a shared prefill when probe skills read its hidden states — and the report's results
 * shell for a model without results.json (an endpoint knows no activations).
 */
function agentOf(opened: OpenedBackend, target: Target, probeSkills: readonly Skill[], maxTokens: number): { backend: ChatBackend; shared?: SharedPrefill; shell: S3MergeOptions['shell'] } {
  const engine = opened.engine;
  if (!engine) return { backend: opened.backend, shell: { layers: 1, dModel: 0, synthetic: false, note: `none: an endpoint (${target.endpoint ?? ''}) exposes no hidden states` } };
  const shell = {
    layers: engine.numLayers + 1, dModel: engine.dModel, synthetic: existsSync(join(opened.modelDir!, 'PLANTED.json')),
    note: 'no reproduce run for this model yet: the report shows the S³ evaluation only',
  };
  if (!probeSkills.length) return { backend: opened.backend, shell };
  for (const sk of probeSkills) {
    const p = loadSkillProbe(sk);
    if (p.dModel !== engine.dModel || p.layer > engine.numLayers) throw new SafekeepError(`skill ${sk.name}: probe for d_model ${p.dModel} at layer ${p.layer}; ${target.model} has d_model ${engine.dModel}, ${engine.numLayers} layers`);
  }
  const shared = new SharedPrefill(opened.backend, maxTokens, { numLayers: engine.numLayers, dModel: engine.dModel });
  return { backend: shared.backend, shared, shell };
}

/** The end of a one-process run: the log, tables and report written, the partial log dropped, the table printed. */
async function writeRun(m: S3MergeOptions, samples: Parameters<typeof writeS3Run>[1], resume: Parameters<typeof dropPartial>[0], models: string): Promise<void> {
  const { summaries, files } = writeS3Run(m, samples);
  dropPartial(resume);
  const { writeS3ReportOf } = await import('../../report/s3-section.ts');
  const rep = await writeS3ReportOf(m, s3ReportRows(summaries));
  process.stdout.write(s3MarkdownTable(m.bench, m.name, summaries));
  process.stdout.write(models);
  const { log, ...tables } = files;
  process.stdout.write(`\nwrote ${[...Object.values(tables), `${rep.figure}.{svg,png,vl.json}`, rep.html].join(', ')}\nper-sample log: ${log}\n`);
}

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const target = targetOf(args);
  const bench = choiceValue<S3Bench>(args, 'bench', S3_BENCHES, 'mixed');
  const mitigation = choiceValue(args, 'mitigation', ['recover', 'block'] as const, 'recover');
  const skills = loadSkills(skillDirsFromFlag(args.values.get('skills'), repoRoot));
  // check: probe (the refusal-probe skill) reads the local agent's own prefill (s3/checks/probe.ts); endpoints have none
  const probeSkills = skills.filter((s) => s.check === 'probe');
  const checks = probeSkills.length && target.model !== undefined ? { probe: probeCheck } : undefined;
  const ablation = { filter: !args.booleans.has('no-filter'), guidance: !args.booleans.has('no-guidance') };
  let configs = parseConfigs(args.values.get('configs') ?? 'none,full', skills, !args.booleans.has('no-guard-decision'), checks, ablation,
    { llamafirewall: () => loadSkills([join(repoRoot, 'baselines', 'llamafirewall')]) });
  if (mitigation === 'block') configs = configs.map((c) => (c.config ? { ...c, config: { ...c.config, mitigation: 'block' } } : c));
  if (probeSkills.length && target.model === undefined) {
    throw new SafekeepError(`skill(s) ${probeSkills.map((s) => s.name).join(', ')} (check: probe) read the agent's hidden states: they need --model DIR, not --endpoint`);
  }
  const limit = positiveIntValue(args, 'limit', Infinity);
  const name = (args.values.get('name') ?? target.defaultName).replace(/[^\w.-]+/g, '_');
  const { out, resultsDir } = s3Folders(args, name);
  const multistage = bench === 'multistage';
  const dirs = {
    injecagent: bench !== 'agentharm' && !multistage ? resolve(args.values.get('injecagent') ?? locateDataset('injecagent', dataDirsEnv())) : undefined,
    agentharm: bench !== 'injecagent' && bench !== 'air' && !multistage ? resolve(args.values.get('agentharm') ?? locateDataset('agentharm', dataDirsEnv())) : undefined,
    ...(multistage ? { multistage: resolve(args.values.get('multistage') ?? join(repoRoot, 'data', 'multistage')) } : {}),
  };
  const settings = settingsOf(args);
  const shardArg = args.values.get('shard');
  const shard = shardArg !== undefined ? parseShard(shardArg) : null;
  const tasks = s3Tasks(bench, dirs, limit, settings);
  if (tasks.length === 0) throw new SafekeepError(`--bench ${bench}: no tasks`);
  const guardBackend = guardBackendOf(args, target, out);
  const maxTokens = positiveIntValue(args, 'max-tokens', 256);
  const agent = agentSamplingFlags(args);
  if (agent.settings) process.stderr.write(`s3 eval: agent ${samplingSummary(agent)}\n`);
  const opened = await openChatBackend(args, target, noThinkingPlan(args), { cacheDir: join(out, 'cache'), agentSampling: agent.settings });
  try {
    const { backend, shared, shell } = agentOf(opened, target, probeSkills, maxTokens);
    process.stderr.write(`s3 eval: ${tasks.length} ${bench} tasks × ${configs.map((c) => c.name).join(',')} on ${backend.name}\n`);
    const evalOptions: S3EvalOptions = {
      backend,
      env: { onUnparseable: choiceValue(args, 'unparseable', ['unsafe', 'safe'] as const, 'unsafe'), ...(shared ? { hidden: shared } : {}), ...(guardBackend ? { backend: guardBackend } : {}) },
      maxSteps: positiveIntValue(args, 'max-steps', 6),
      maxTokens,
      concurrency: opened.concurrency,
      onProgress: progressLine('s3 eval'),
    };
    const guardDecision = !args.booleans.has('no-guard-decision');
    // the rules' false-positive rate is measured on the public data sets' calls, which a multistage run does not read
    const rulesFp = multistage ? null : await rulesFalsePositives(skills, dirs);
    const injecSettings = bench === 'agentharm' || multistage ? [] : settings;
    const m: S3MergeOptions = {
      bench, dirs, settings, limit: Number.isFinite(limit) ? limit : null, configs: configs.map((c) => c.name), name, out, resultsDir, maxTokens,
      meta: {
        backend: backend.name, data: dirs, limit: Number.isFinite(limit) ? limit : null, tasks: tasks.length, settings: injecSettings,
        skills: skills.map((s) => s.name), guardDecision, mitigation,
        models: { agent: backend.name, guard: (guardBackend ?? backend).name }, ablation, ...(rulesFp ? { rulesFalsePositives: rulesFp } : {}),
        ...(agent.settings ? { agentSampling: agent.settings } : {}),
      },
      run: { bench, backend: backend.name, tasks: tasks.length, settings: injecSettings, guardDecision, mitigation },
      shell,
    };
    const items = s3Items(tasks, configs);
    if (shard) {
      const identity = {
        model: opened.identity,
        template: opened.templateHash,
        data: `${bench} ${tasks.length} tasks ${shortHash(tasks.map((t) => t.id))}`,
        skills: shortHash(skills),
        options: shortHash(argvWithoutShard(argv)),
      };
      const r = await runS3Shard(items, evalOptions, shard, m, identity);
      process.stdout.write(`shard ${shardArg}: ${r.items} items (~${r.tokens} tokens) in ${r.seconds.toFixed(1)} s → ${r.dir}\nwhen every shard is done: safekeep merge ${resultsDir}\n`);
      return 0;
    }
    // an interrupted run resumes from its finished items (same model, template, tasks, skills and flags)
    const resume = { file: join(out, `.log-${bench}.partial`), key: sha256Hex(JSON.stringify([opened.identity, opened.templateHash, tasks.map((t) => t.id), skills, argv, ...(agent.settings ? [agent.settings] : [])])) };
    const { samples, resumed } = await runTask(s3Task(evalOptions), items, { concurrency: evalOptions.concurrency, onProgress: evalOptions.onProgress, resume });
    if (resumed) process.stderr.write(`s3 eval: resumed ${resumed} finished items from ${resume.file}\n`);
    await writeRun(m, samples, resume, `\nagent ${backend.name}, guard ${(guardBackend ?? backend).name}\n${rulesFp ? `\n${rulesFpMarkdown(rulesFp)}` : ''}`);
  } finally {
    await opened.dispose();
  }
  return 0;
}
