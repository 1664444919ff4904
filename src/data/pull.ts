/**
 * `safekeep data pull agentharm`: AgentHarm from the Hugging Face hub (dataset `ai-safety-institute/AgentHarm`)
 * into data/agentharm/ (or $SAFEKEEP_DATA/agentharm, or --dest):
 *   benchmark/*.json            the behaviors (harmful, benign, chat; test_public + validation) at `revision`
 *   tools-src/benchmark/…/*.py  the tool sources, at AGENTHARM_TOOLS_REVISION (later revisions dropped them)
 *   tools.json                  the tool sources converted to OpenAI function specs (agentharm-tools.ts)
 *   .gitignore                  `*`, so nothing fetched is ever committed (the licence forbids redistribution)
 * Downloads are resumable and verified (src/hub/download.ts); a second run reuses what is there.
 *
 * Nothing half-made takes the name: the copy is assembled and validated in a hidden sibling
 * `.<name>.pulling/` (where a failed run's files wait to be resumed) and only then renamed into place, so a failed
 * pull never leaves a `data/agentharm/` that would shadow a good copy elsewhere (the shared one).
 */
import { cpSync, existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { writeFileAtomic } from '../util/atomic.ts';
import { basename, dirname, join } from 'node:path';
import type { HubTimeouts } from '../hub/api.ts';
import { downloadHubFiles } from '../hub/download.ts';
import { SafekeepError } from '../util/errors.ts';
import { readAgentHarm } from './agentharm.ts';
import { buildAgentHarmTools } from './agentharm-tools.ts';
import { pullDestination, type DataDirs } from './locate.ts';

export const AGENTHARM_REPO = 'ai-safety-institute/AgentHarm';
/** The last hub revision that still carries benchmark/{harmful,benign}_tools/*.py. */
export const AGENTHARM_TOOLS_REVISION = '2184d2dc592faf2f64d0a892cce1380c26da5aca';

interface PullAgentHarmOptions {
  destDir?: string;
  revision?: string;
  toolsRevision?: string;
  token?: string;
  endpoint?: string;
  progress?: boolean;
  /** data folder overrides (the default destination is pullDestination('agentharm', dirs)) */
  dirs?: DataDirs;
  timeouts?: HubTimeouts;
}

interface PullAgentHarmResult {
  dir: string;
  commit: string;
  toolsCommit: string;
  downloaded: number;
  harmful: number;
  benign: number;
  harmfulTools: number;
  benignTools: number;
}


export async function pullAgentHarm(o: PullAgentHarmOptions = {}): Promise<PullAgentHarmResult> {
  const final = o.destDir ?? pullDestination('agentharm', o.dirs);
  const dir = join(dirname(final), `.${basename(final)}.pulling`);
  // a complete earlier copy seeds the staging folder, so its verified files are reused rather than fetched again
  if (!existsSync(dir) && existsSync(final)) cpSync(final, dir, { recursive: true });
  mkdirSync(dir, { recursive: true });
  const ignore = join(dir, '.gitignore');
  if (!existsSync(ignore)) writeFileAtomic(ignore, '# fetched by `safekeep data pull agentharm`; not ours to redistribute\n*\n');
  const common = { repoId: AGENTHARM_REPO, repoType: 'dataset' as const, token: o.token, endpoint: o.endpoint, progress: o.progress, timeouts: o.timeouts };

  const behaviors = await downloadHubFiles({
    ...common,
    revision: o.revision ?? 'main',
    destDir: dir,
    include: (p) => /^benchmark\/[^/]+\.json$/.test(p) || p === 'LICENSE' || p === 'README.md',
  });
  if (!behaviors.files.includes('benchmark/harmful_behaviors_test_public.json')) {
    throw new SafekeepError(`${AGENTHARM_REPO}@${o.revision ?? 'main'}: no benchmark/harmful_behaviors_test_public.json on the hub`);
  }

  const srcDir = join(dir, 'tools-src');
  const tools = await downloadHubFiles({
    ...common,
    revision: o.toolsRevision ?? AGENTHARM_TOOLS_REVISION,
    destDir: srcDir,
    include: (p) => /^benchmark\/(harmful|benign)_tools\/[^/]+\.py$/.test(p),
  });
  if (tools.files.length === 0) {
    throw new SafekeepError(`${AGENTHARM_REPO}@${o.toolsRevision ?? AGENTHARM_TOOLS_REVISION}: no benchmark/*_tools/*.py (tool sources) on the hub`);
  }
  const specs = buildAgentHarmTools(join(srcDir, 'benchmark'));
  writeFileAtomic(join(dir, 'tools.json'), JSON.stringify(specs, null, 1) + '\n');

  // validate the whole copy now (every target function must have a spec), so a bad pull fails here, not later
  const ah = readAgentHarm(dir);
  // into place: the old copy steps aside first, so the name always holds a whole copy or nothing
  const old = join(dirname(final), `.${basename(final)}.old`);
  rmSync(old, { recursive: true, force: true });
  if (existsSync(final)) renameSync(final, old);
  renameSync(dir, final);
  rmSync(old, { recursive: true, force: true });
  return {
    dir: final,
    commit: behaviors.commit,
    toolsCommit: tools.commit,
    downloaded: behaviors.downloaded + tools.downloaded,
    harmful: ah.harmful.length,
    benign: ah.benign.length,
    harmfulTools: specs.harmful_tools.length,
    benignTools: specs.benign_tools.length,
  };
}
