/**
 * `safekeep serve --upstream URL [--port 8080] [--host 127.0.0.1] [--judge-model M] [--judge-upstream URL]
 *    [--method safekeep|safejudge | --skills DIR[,DIR] [--no-guard-decision] [--mitigation recover|block]]
 *    [--api-key-env VAR] [--judge-api-key-env VAR] [--timeout-ms 60000] [--prefill none|continue|prefix]
 *    [--unparseable unsafe|safe] [--judge-max-tokens 8]`
 * `safekeep serve --model DIR [--method base|safekeep|refusal-probe|safekeep+probe] [--probe FILE] [--max-tokens 256]
 *    [--no-thinking] [--template FILE] [--dtype ..] [--device ..] [--threads N] [--max-memory ..] [--port ..] [--host ..]
 *    [--unparseable unsafe|safe] [--judge-max-tokens 8]`
 * The same API served by the local engine itself (src/guard/local-server.ts): the refusal probe reads the agent's own
 * prefill, so it guards without an extra model call.
 *
 * The --upstream form: an OpenAI-compatible proxy applying the SafeKeep guard — or, with `--skills`, S³ stage-specific skills at every stage
 * (input, tool observations, tool calls, final answer) — in front of any chat-completions endpoint
 * (see src/guard/proxy.ts). One JSON log line per request (and per S³ stage decision) on stderr. Stops on
 * SIGINT/SIGTERM. Keys: `--api-key-env` for the upstream (else the client's own header is forwarded),
 * `--judge-api-key-env` for a separate judge host (which never receives the client's header).
 */
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { basename } from 'node:path';
import { numberValue, parseArgs, requireValue, type ParsedArgs } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { createGuardProxy } from '../../guard/proxy.ts';
import type { PrefillMode } from '../../guard/backends/openai.ts';
import { loadSkills, skillDirsFromFlag } from '../../guard/s3/skill-file.ts';
import { requireChecks } from '../../guard/s3/guard.ts';
import { repoRoot } from '../../data/locate.ts';

export const summary = 'OpenAI-compatible proxy: the SafeKeep guard, or S³ skills at every stage, in front of an endpoint';

function oneOf<T extends string>(name: string, v: string | undefined, allowed: readonly T[], fallback: T): T {
  if (v === undefined) return fallback;
  if (!(allowed as readonly string[]).includes(v)) throw new SafekeepError(`--${name} must be one of ${allowed.join(', ')}, got '${v}'`);
  return v as T;
}

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, {
    values: ['upstream', 'port', 'host', 'judge-model', 'judge-upstream', 'method', 'api-key-env', 'judge-api-key-env', 'timeout-ms', 'prefill',
      'unparseable', 'judge-max-tokens', 'skills', 'mitigation', 'model', 'probe', 'max-tokens', 'template', 'dtype', 'device', 'threads',
      'max-memory'],
    booleans: ['no-guard-decision', 'no-thinking'],
  });
  if (args.values.has('model')) return serveLocal(args);
  for (const f of ['probe', 'max-tokens', 'template', 'dtype', 'device', 'threads', 'max-memory']) {
    if (args.values.has(f)) throw new SafekeepError(`--${f} applies to serve --model DIR (the local engine), not to the --upstream proxy`);
  }
  const skillsFlag = args.values.get('skills');
  if (skillsFlag !== undefined && args.values.has('method')) throw new SafekeepError('give --method or --skills, not both (--method safekeep = the safekeep-judge skill alone)');
  if (skillsFlag === undefined && (args.values.has('mitigation') || args.booleans.has('no-guard-decision'))) {
    throw new SafekeepError('--mitigation and --no-guard-decision need --skills DIR');
  }
  const skills = skillsFlag !== undefined ? loadSkills(skillDirsFromFlag(skillsFlag, repoRoot)) : undefined;
  if (skills) requireChecks(skills);
  const upstream = requireValue(args, 'upstream');
  for (const f of ['upstream', 'judge-upstream']) {
    const u = args.values.get(f);
    if (u !== undefined && !/^https?:\/\/[^/]+/.test(u)) throw new SafekeepError(`--${f} must be an http(s) URL, got '${u}'`);
  }
  const port = numberValue(args, 'port', 8080);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new SafekeepError(`--port must be 0..65535, got ${port}`);
  const host = args.values.get('host') ?? '127.0.0.1';
  const server = createGuardProxy({
    upstream,
    judgeUpstream: args.values.get('judge-upstream'),
    judgeModel: args.values.get('judge-model'),
    method: oneOf('method', args.values.get('method'), ['safekeep', 'safejudge'] as const, 'safekeep'),
    apiKeyEnv: args.values.get('api-key-env'),
    judgeApiKeyEnv: args.values.get('judge-api-key-env'),
    skills,
    guardDecision: !args.booleans.has('no-guard-decision'),
    mitigation: oneOf('mitigation', args.values.get('mitigation'), ['recover', 'block'] as const, 'recover') === 'block' ? 'block' : 'skill',
    timeoutMs: numberValue(args, 'timeout-ms', 60_000),
    prefill: oneOf<PrefillMode>('prefill', args.values.get('prefill'), ['none', 'continue', 'prefix'], 'none'),
    onUnparseable: oneOf('unparseable', args.values.get('unparseable'), ['unsafe', 'safe'] as const, 'unsafe'),
    judgeMaxTokens: numberValue(args, 'judge-max-tokens', 8),
  });
  await listenUntilStopped(server, host, port, `${upstream}${skills ? ` (S³ skills: ${skills.map((s) => `${s.name}@${s.stage}`).join(', ')})` : ''}`);
  return 0;
}

async function listenUntilStopped(server: Server, host: string, port: number, target: string): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) => reject(new SafekeepError(`cannot listen on ${host}:${port}: ${e.code ?? e.message}`)));
    server.listen(port, host, () => resolve());
  });
  const addr = server.address() as AddressInfo;
  process.stdout.write(`safekeep serve: http://${host}:${addr.port}/v1 → ${target}\n`);
  await new Promise<void>((resolve) => {
    const stop = () => server.close(() => resolve());
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
}

/** `serve --model DIR`: the local engine behind the same API, guarded by guardedRespond. */
async function serveLocal(args: ParsedArgs): Promise<number> {
  for (const f of ['upstream', 'judge-upstream', 'judge-model', 'api-key-env', 'judge-api-key-env', 'timeout-ms', 'prefill', 'skills', 'mitigation']) {
    if (args.values.has(f)) throw new SafekeepError(`--${f} applies to the --upstream proxy, not to serve --model DIR`);
  }
  const method = oneOf('method', args.values.get('method'), ['base', 'safekeep', 'refusal-probe', 'safekeep+probe'] as const, 'safekeep');
  const probeFile = args.values.get('probe');
  if ((method === 'refusal-probe' || method === 'safekeep+probe') && probeFile === undefined) {
    throw new SafekeepError(`--method ${method} needs --probe FILE (safekeep probe train writes results/<model>/probe/agent.schema.<kind>.json)`);
  }
  const port = numberValue(args, 'port', 8080);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new SafekeepError(`--port must be 0..65535, got ${port}`);
  const host = args.values.get('host') ?? '127.0.0.1';
  const { openEngine } = await import('../../engine/cli-common.ts');
  const { loadPromptTokenizer } = await import('../../prompts/tokenizer.ts');
  const { resolveModel } = await import('../../hub/resolve.ts');
  const { loadCheckpoint } = await import('../../checkpoint/load.ts');
  const { LocalBackend } = await import('../../guard/backends/local.ts');
  const { createLocalServer } = await import('../../guard/local-server.ts');
  const { ProbeGuard } = await import('../../guard/probe.ts');
  const { readProbe, checkProbeFits } = await import('../../experiments/probe/file.ts');
  const { existsSync, statSync, readFileSync } = await import('node:fs');
  const { join } = await import('node:path');
  const modelDir = await resolveModel(requireValue(args, 'model'));
  // --probe: a probe file, or a refusal-probe skill folder (SKILL.md with check: probe; probe train writes one)
  let probe: InstanceType<typeof ProbeGuard> | undefined;
  let probeFileToCheck: string | undefined;
  let probeLabel = '';
  if (probeFile !== undefined && existsSync(probeFile) && statSync(probeFile).isDirectory()) {
    const { loadSkill } = await import('../../guard/s3/skill-file.ts');
    const { probeGuardFromSkill } = await import('../../guard/s3/checks/probe.ts');
    const skill = loadSkill(probeFile);
    if (skill.check !== 'probe' || skill.stage !== 'input') throw new SafekeepError(`${join(probeFile, 'SKILL.md')}: serve --model --probe needs an input-stage skill with check: probe (got ${skill.stage}/${skill.check})`);
    probe = probeGuardFromSkill(skill);
    const j = JSON.parse(readFileSync(skill.probe!.direction, 'utf8')) as { format?: string };
    if (j.format === 'safekeep-probe') probeFileToCheck = skill.probe!.direction;
    probeLabel = `skill ${skill.name} ℓ=${skill.probe!.layer}`;
  } else if (probeFile !== undefined) {
    probeFileToCheck = probeFile;
  }
  const tokenizer = await loadPromptTokenizer(modelDir, { template: args.values.get('template') });
  const engine = await openEngine(args);
  try {
    if (probeFileToCheck !== undefined) {
      const p = readProbe(probeFileToCheck);
      const ckpt = await loadCheckpoint(modelDir);
      checkProbeFits(p, { configHash: ckpt.configHash, numLayers: engine.numLayers, dModel: engine.dModel });
      probe ??= new ProbeGuard(p);
      probeLabel ||= `probe ${p.kind} ℓ=${p.layer}`;
    }
    if (probe && (probe.probe.dModel !== engine.dModel || probe.probe.layer > engine.numLayers)) {
      throw new SafekeepError(`--probe: d_model ${probe.probe.dModel}, layer ${probe.probe.layer} do not fit this model (d_model ${engine.dModel}, ${engine.numLayers} layers)`);
    }
    const backend = new LocalBackend(engine, tokenizer, args.booleans.has('no-thinking') ? { templateKwargs: { enable_thinking: false } } : {});
    const server = createLocalServer({
      backend, method, modelName: basename(modelDir),
      ...(probe ? { probe } : {}),
      defaultMaxTokens: numberValue(args, 'max-tokens', 256),
      judgeMaxTokens: numberValue(args, 'judge-max-tokens', 8),
      onUnparseable: oneOf('unparseable', args.values.get('unparseable'), ['unsafe', 'safe'] as const, 'unsafe'),
    });
    await listenUntilStopped(server, host, port, `${modelDir} (local engine, guard ${method}${probe ? `, ${probeLabel}` : ''})`);
  } finally {
    await engine.dispose();
  }
  return 0;
}

