/**
 * `safekeep data pull agentharm [--revision R] [--tools-revision R] [--dest DIR] [--quiet]`: fetch AgentHarm from the
 * Hugging Face hub into data/agentharm/ ($SAFEKEEP_DATA/agentharm when set), convert its tool sources to tools.json,
 * and validate the copy. HF_TOKEN / HF_ENDPOINT as for `safekeep pull`.
 */
import { resolve } from 'node:path';
import { parseArgs, type FlagTable } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { AGENTHARM_REPO, pullAgentHarm } from '../../data/pull.ts';
import { dataDirsEnv, hubEnv, quietEnv } from '../env.ts';

export const summary = 'download a benchmark dataset (agentharm) from the Hugging Face hub into data/';

export const flags: FlagTable = {
  usage: 'data pull agentharm [--revision R] [--tools-revision R] [--dest DIR] [--quiet]',
  positionals: 'the dataset to download (agentharm)',
  flags: [
    { name: 'revision', value: 'R', default: 'main', help: 'dataset revision (branch, tag or commit)' },
    { name: 'tools-revision', value: 'R', default: 'main', help: 'revision of the AgentHarm tool sources' },
    { name: 'dest', value: 'DIR', default: 'data/agentharm ($SAFEKEEP_DATA/agentharm)', help: 'destination folder' },
    { name: 'quiet', boolean: true, help: 'no progress on stderr' },
  ],
  example: 'data pull agentharm',
};

const DATASETS = ['agentharm'] as const;

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  const usage = `usage: safekeep data pull <${DATASETS.join('|')}> [--revision R] [--tools-revision R] [--dest DIR] [--quiet]`;
  if (args.positionals.length !== 1) throw new SafekeepError(usage);
  const name = args.positionals[0]!;
  if (name !== 'agentharm') throw new SafekeepError(`unknown dataset '${name}' (known: ${DATASETS.join(', ')}); ${usage}`);
  const dest = args.values.get('dest');
  const { endpoint, token, timeouts, offline } = hubEnv();
  if (offline) throw new SafekeepError('data pull: HF_HUB_OFFLINE is set, so nothing is downloaded (unset it to pull)');
  const r = await pullAgentHarm({
    destDir: dest === undefined ? undefined : resolve(dest),
    revision: args.values.get('revision'),
    toolsRevision: args.values.get('tools-revision'),
    progress: !args.booleans.has('quiet') && !quietEnv(),
    dirs: dataDirsEnv(),
    endpoint,
    token,
    timeouts,
  });
  process.stdout.write(
    `${AGENTHARM_REPO}@${r.commit.slice(0, 12)} (tools @${r.toolsCommit.slice(0, 12)}) → ${r.dir}: ` +
      `${r.harmful} harmful + ${r.benign} benign behaviors, ${r.harmfulTools} + ${r.benignTools} tool specs; ` +
      `${r.downloaded} files downloaded\n`,
  );
  return 0;
}
