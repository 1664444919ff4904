/**
 * `safekeep s3 transform --from DESCRIPTION.md --out skills/NAME --endpoint URL --endpoint-model M [--max-rounds 3]
 *    [--force] [--api-key-env VAR] [--timeout-ms 120000] [--retries 2] [--max-tokens 2048] [--no-thinking]`
 * S³'s transform agent (src/s3/authoring/transform.ts): method model → skill write (validated by the skill parser) →
 * generated test cases run by the guard → refine with the failures, up to --max-rounds rounds. Every round's skill,
 * cases and results stay under skills/NAME/transform/; an existing skills/NAME is replaced only with --force.
 * The generated cases are split into tuning cases (the refine loop sees their failures) and held-out cases (never
 * shown to it; every round is judged on them too). transform/transform.json names the draft and the final round, so
 * `s3 fidelity --skill skills/NAME` prints the Draft vs Final rows of S³'s Table 3.
 * Exit 0 when the chosen round passes every tuning and held-out case, 1 when some still fail (the skill is written
 * either way).
 */
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { numberValue, parseArgs, requireValue, type FlagTable } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { transformSkill } from '../../s3/authoring/transform.ts';
import { checkEndpointUrl, endpointBackend, noThinkingBody } from '../backend.ts';

export const summary = 'S³ transform agent: a defense description → a tested SKILL.md folder (LLM endpoint)';

export const flags: FlagTable = {
  usage: 's3 transform --from DESCRIPTION.md --out skills/NAME --endpoint URL --endpoint-model M [flags]',
  flags: [
    { name: 'from', value: 'FILE', help: 'the defense\'s description (paper text, docs)' },
    { name: 'out', value: 'DIR', help: 'the skill folder to create; its name is the skill name' },
    { name: 'endpoint', value: 'URL', help: 'OpenAI-compatible endpoint of the transforming LLM (also the guard\'s LLM for llm checks)' },
    { name: 'endpoint-model', value: 'NAME', help: 'model name at the endpoint' },
    { name: 'max-rounds', value: 'N', default: '3', help: 'skill write + test rounds in all (refines = rounds − 1)' },
    { name: 'force', boolean: true, help: 'replace an existing --out folder (and its transform history)' },
    { name: 'api-key-env', value: 'VAR', help: 'environment variable holding the endpoint API key' },
    { name: 'timeout-ms', value: 'MS', default: '120000', help: 'endpoint timeout' },
    { name: 'retries', value: 'N', default: '2', help: 'endpoint retries' },
    { name: 'max-tokens', value: 'N', default: '2048', help: 'answer budget of each transform call' },
    { name: 'no-thinking', boolean: true, help: 'send chat_template_kwargs enable_thinking=false (Qwen3 endpoints)' },
  ],
  example: 's3 transform --from skills/tool-rules/DESCRIPTION.md --out skills/tool-rules-transformed --endpoint http://127.0.0.1:8000/v1 --endpoint-model Qwen/Qwen3-8B',
};

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const from = resolve(requireValue(args, 'from'));
  if (!existsSync(from)) throw new SafekeepError(`--from ${from}: no such file`);
  const description = readFileSync(from, 'utf8');
  if (description.trim() === '') throw new SafekeepError(`--from ${from}: the description is empty`);
  const endpoint = checkEndpointUrl('endpoint', requireValue(args, 'endpoint'));
  // one transform call at a time, each a long answer: a longer timeout, fewer retries, never cached
  const { backend } = endpointBackend(args, endpoint, requireValue(args, 'endpoint-model'), { timeoutMs: 120_000, retries: 2, concurrency: 1, extraBody: noThinkingBody(args) });
  const r = await transformSkill({
    description,
    out: resolve(requireValue(args, 'out')),
    backend,
    maxRounds: numberValue(args, 'max-rounds', 3),
    force: args.booleans.has('force'),
    maxTokens: numberValue(args, 'max-tokens', 2048),
    log: (l) => process.stderr.write(`${l}\n`),
  });
  const tuning = r.cases.filter((c) => !c.heldOut).length;
  const held = r.cases.length - tuning;
  const failing = (rd: (typeof r.rounds)[number], h: boolean) => rd.results.filter((x) => x.heldOut === h && !x.pass).map((x) => x.id).join(', ') || 'all';
  for (const rd of r.rounds) {
    process.stdout.write(rd.parseError
      ? `round ${rd.round}: invalid skill — ${rd.parseError}\n`
      : `round ${rd.round}: ${tuning - rd.failures}/${tuning} tuning cases pass${rd.failures ? ` (failing: ${failing(rd, false)})` : ''}; held-out ${held - rd.heldOutFailures}/${held}${rd.heldOutFailures ? ` (failing: ${failing(rd, true)})` : ''}\n`);
  }
  process.stdout.write(`skill (round ${r.chosen}, ${r.passed ? 'all cases pass' : 'some cases still fail'}): ${r.skillDir}\nhistory: ${r.skillDir}/transform/\n`);
  return r.passed ? 0 : 1;
}
