/**
 * `safekeep pull <owner/name> [--revision R]`: download a checkpoint from the Hugging Face hub into
 * models/<owner>--<name>/ ($SAFEKEEP_MODELS overrides models/). HF_TOKEN for gated repos, HF_ENDPOINT for mirrors.
 */
import { parseArgs, type FlagTable } from '../args.ts';
import { SafekeepError } from '../../util/errors.ts';
import { pullModel } from '../../hub/pull.ts';
import { formatBytes } from '../../hub/progress.ts';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { hubEnv, quietEnv } from '../env.ts';

export const summary = 'download a model (safetensors, config, tokenizer) from the Hugging Face hub into models/';

export const flags: FlagTable = {
  usage: 'pull <owner/name> [--revision R] [--out DIR] [--quiet]',
  positionals: 'the Hugging Face repo id',
  flags: [
    { name: 'revision', value: 'R', default: 'main', help: 'branch, tag or commit' },
    { name: 'out', value: 'DIR', default: 'models/<owner>--<name>', help: 'destination folder' },
    { name: 'quiet', boolean: true, help: 'no progress on stderr' },
  ],
  example: 'pull Qwen/Qwen3-0.6B',
};

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv, flags);
  if (args.positionals.length !== 1) throw new SafekeepError('usage: safekeep pull <owner/name> [--revision R] [--out DIR] [--quiet]');
  const repoId = args.positionals[0]!;
  const r = await pullModel(repoId, { ...hubEnv(), revision: args.values.get('revision'), destDir: args.values.get('out'), progress: !args.booleans.has('quiet') && !quietEnv() });
  const bytes = r.files.reduce((a, f) => a + statSync(join(r.dir, f)).size, 0);
  process.stdout.write(`${repoId}@${r.commit.slice(0, 12)} → ${r.dir} (${r.files.length} files, ${formatBytes(bytes)}; ${r.downloaded} downloaded, ${r.files.length - r.downloaded} already present)\n`);
  return 0;
}
