/**
 * `safekeep serve --upstream URL [--port 8080] [--host 127.0.0.1] [--judge-model M] [--judge-upstream URL]
 *    [--method safekeep|safejudge | --skills DIR[,DIR] [--no-guard-decision] [--mitigation recover|block]]
 *    [--api-key-env VAR] [--judge-api-key-env VAR] [--timeout-ms 60000] [--prefill none|continue|prefix]
 *    [--unparseable unsafe|safe] [--judge-max-tokens 8]`
 * OpenAI-compatible proxy applying the SafeKeep guard — or, with `--skills`, S³ stage-specific skills at every stage
 * (input, tool observations, tool calls, final answer) — in front of any chat-completions endpoint
 * (see src/guard/proxy.ts). One JSON log line per request (and per S³ stage decision) on stderr. Stops on
 * SIGINT/SIGTERM. Keys: `--api-key-env` for the upstream (else the client's own header is forwarded),
 * `--judge-api-key-env` for a separate judge host (which never receives the client's header).
 */
import type { AddressInfo } from 'node:net';
import { numberValue, parseArgs, requireValue, type FlagTable } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { createGuardProxy } from '../../guard/proxy.ts';
import type { PrefillMode } from '../../guard/backends/openai.ts';
import { loadSkills, skillDirsFromFlag } from '../../guard/s3/skill-file.ts';
import { requireChecks } from '../../guard/s3/guard.ts';
import { repoRoot } from '../../data/locate.ts';

export const summary = 'OpenAI-compatible proxy: the SafeKeep guard, or S³ skills at every stage, in front of an endpoint';

export const flags: FlagTable = {
  usage: 'serve --upstream URL [flags]',
  flags: [
    { name: 'upstream', value: 'URL', help: 'OpenAI-compatible endpoint to guard' },
    { name: 'port', value: 'P', default: '8080', help: 'listen port (0 = any free port)' },
    { name: 'host', value: 'H', default: '127.0.0.1', help: 'listen address' },
    { name: 'judge-model', value: 'NAME', default: 'the request\'s model', help: 'model name for the judge call' },
    { name: 'judge-upstream', value: 'URL', default: '--upstream', help: 'endpoint of the judge' },
    { name: 'method', value: 'safekeep|safejudge', default: 'safekeep', help: 'judge with prose specs (safekeep) or JSON schemas (safejudge)' },
    { name: 'skills', value: 'DIR[,DIR]', help: 'S³: skill folders (or names under skills/) checked at every stage; excludes --method' },
    { name: 'no-guard-decision', boolean: true, help: 'S³: run every skill that passes its filter (no guard-agent pick)' },
    { name: 'mitigation', value: 'recover|block', default: 'recover', help: 'S³: recover (strip/replace, let the task go on) or block (end with a refusal)' },
    { name: 'api-key-env', value: 'VAR', help: 'environment variable holding the upstream API key (else the client\'s own header is forwarded)' },
    { name: 'judge-api-key-env', value: 'VAR', help: 'environment variable holding the judge host\'s key (never the client\'s header)' },
    { name: 'timeout-ms', value: 'MS', default: '60000', help: 'upstream timeout' },
    { name: 'prefill', value: 'none|continue|prefix', default: 'none', help: 'how the judge verdict is prefilled' },
    { name: 'unparseable', value: 'unsafe|safe', default: 'unsafe', help: 'verdict when the judge answer cannot be parsed' },
    { name: 'judge-max-tokens', value: 'N', default: '8', help: 'judge generation budget' },
  ],
  example: 'serve --upstream http://localhost:8000/v1 --port 8080',
};

function oneOf<T extends string>(name: string, v: string | undefined, allowed: readonly T[], fallback: T): T {
  if (v === undefined) return fallback;
  if (!(allowed as readonly string[]).includes(v)) throw new SafekeepError(`--${name} must be one of ${allowed.join(', ')}, got '${v}'`);
  return v as T;
}

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
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
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) => reject(new SafekeepError(`cannot listen on ${host}:${port}: ${e.code ?? e.message}`)));
    server.listen(port, host, () => resolve());
  });
  const addr = server.address() as AddressInfo;
  process.stdout.write(`safekeep serve: http://${host}:${addr.port}/v1 → ${upstream}${skills ? ` (S³ skills: ${skills.map((s) => `${s.name}@${s.stage}`).join(', ')})` : ''}\n`);
  await new Promise<void>((resolve) => {
    const stop = () => server.close(() => resolve());
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  return 0;
}
