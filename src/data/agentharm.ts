/**
 * AgentHarm importer (Andriushchenko et al., 2025). Reads a copy laid out as on the Hugging Face hub
 * (`benchmark/*.json`) or as in ../shared/data/agentharm (`dataset/*.json`), plus the tool specs (`tools.json`:
 * `{"harmful_tools": [...], "benign_tools": [...]}`, OpenAI function specs).
 *
 * Harmful and benign behaviors share ids (`1-1` ↔ `1-1`), giving 176 (test_public) + 32 (validation) natural pairs.
 * The two sides mostly share target functions; where they differ (e.g. `query_onion_search` vs
 * `query_google_search`), the pair's tools are the union: the harmful side's target functions first (specs from
 * `harmful_tools`), then the benign-only ones (specs from `benign_tools`). A name present on both sides with
 * different specs keeps the harmful side's spec in the pair; the raw behaviors keep their own side's specs.
 * The four variants of one base behavior (`N-1..N-4`: detailed/short prompt × with/without hint) share a group, so
 * they land on the same side of the split.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import { isRecord, readJsonFile } from './jsonfile.ts';
import type { Pair, ToolSpec } from './types.ts';
import { validatePair, validateToolSpec } from './validate.ts';

export type AgentHarmSplit = 'test_public' | 'validation';
const AGENTHARM_SPLITS: readonly AgentHarmSplit[] = ['test_public', 'validation'];
type BehaviorKind = 'harmful' | 'benign';

/** One AgentHarm behavior as the benchmark defines it (Table 4 runs these). */
interface AgentHarmBehavior {
  /** AgentHarm's id, e.g. '1-1' (shared by the harmful and the benign behavior) */
  id: string;
  split: AgentHarmSplit;
  kind: BehaviorKind;
  idOriginal: string;
  name: string;
  /** AgentHarm's category as written there, e.g. 'Disinformation' */
  category: string;
  prompt: string;
  targetFunctions: string[];
  /** harmful behaviors of this copy: the subset of targetFunctions that does the harm (when the copy has it) */
  harmfulTools?: string[];
  detailedPrompt: boolean;
  hintIncluded: boolean;
  /** specs of `targetFunctions`, in that order, from this behavior's side of the tools file */
  tools: ToolSpec[];
}

interface AgentHarmTools {
  harmful: Map<string, ToolSpec>;
  benign: Map<string, ToolSpec>;
}

export interface AgentHarm {
  dir: string;
  harmful: AgentHarmBehavior[];
  benign: AgentHarmBehavior[];
}

/** The folder holding the behavior files (`dataset/` or `benchmark/`), or null. */
function agentHarmBehaviorDir(dir: string): string | null {
  for (const sub of ['dataset', 'benchmark', '.']) {
    const d = join(dir, sub);
    if (existsSync(join(d, 'harmful_behaviors_test_public.json'))) return d;
  }
  return null;
}

export function isAgentHarmDir(dir: string): boolean {
  return agentHarmBehaviorDir(dir) !== null;
}

function toolMap(list: unknown, where: string): Map<string, ToolSpec> {
  if (!Array.isArray(list)) throw new SafekeepError(`${where}: expected a list of tool specs`);
  const m = new Map<string, ToolSpec>();
  list.forEach((t, i) => {
    const spec = validateToolSpec(t, `${where}[${i}]`);
    m.set(spec.function.name, spec);
  });
  return m;
}

export function readAgentHarmTools(dir: string): AgentHarmTools {
  const file = join(dir, 'tools.json');
  if (!existsSync(file)) {
    throw new SafekeepError(
      `${dir}: AgentHarm copy has no tools.json ({"harmful_tools": [...], "benign_tools": [...]}); ` +
        'run `safekeep data pull agentharm` to fetch and convert the tool specs',
    );
  }
  const raw = readJsonFile(file);
  if (!isRecord(raw)) throw new SafekeepError(`${file}: expected {"harmful_tools": [...], "benign_tools": [...]}`);
  return { harmful: toolMap(raw.harmful_tools, `${file}: harmful_tools`), benign: toolMap(raw.benign_tools, `${file}: benign_tools`) };
}

function strList(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((x) => typeof x === 'string');
}

function readBehaviorFile(file: string, split: AgentHarmSplit, kind: BehaviorKind, tools: Map<string, ToolSpec>): AgentHarmBehavior[] {
  const doc = readJsonFile(file);
  const list = isRecord(doc) ? doc.behaviors : undefined;
  if (!Array.isArray(list)) throw new SafekeepError(`${file}: expected {"behaviors": [...]}`);
  const seen = new Set<string>();
  return list.map((b, i) => {
    const w = `${file}: behavior ${i + 1}`;
    if (!isRecord(b)) throw new SafekeepError(`${w}: must be an object`);
    const id = b.id;
    if (typeof id !== 'string' || !id) throw new SafekeepError(`${w}: missing "id"`);
    const wi = `${w} (id '${id}')`;
    if (seen.has(id)) throw new SafekeepError(`${wi}: duplicate id`);
    seen.add(id);
    for (const key of ['prompt', 'category', 'name'] as const) {
      if (typeof b[key] !== 'string' || !(b[key] as string).trim()) throw new SafekeepError(`${wi}: missing "${key}"`);
    }
    if (!strList(b.target_functions) || b.target_functions.length === 0) {
      throw new SafekeepError(`${wi}: missing "target_functions" (a non-empty list of names)`);
    }
    const specs = b.target_functions.map((f) => {
      const s = tools.get(f);
      if (!s) throw new SafekeepError(`${wi}: target function '${f}' has no spec in the ${kind} tools of tools.json`);
      return s;
    });
    const beh: AgentHarmBehavior = {
      id,
      split,
      kind,
      idOriginal: String(b.id_original ?? ''),
      name: b.name as string,
      category: b.category as string,
      prompt: b.prompt as string,
      targetFunctions: [...b.target_functions],
      detailedPrompt: b.detailed_prompt === true,
      hintIncluded: b.hint_included === true,
      tools: specs,
    };
    if (kind === 'harmful' && strList(b.harmful_tool)) beh.harmfulTools = [...b.harmful_tool];
    return beh;
  });
}

/** Reads the harmful and benign behaviors of the given splits (default: test_public + validation). */
export function readAgentHarm(dir: string, splits: readonly AgentHarmSplit[] = AGENTHARM_SPLITS): AgentHarm {
  const bdir = agentHarmBehaviorDir(dir);
  if (!bdir) throw new SafekeepError(`${dir}: not an AgentHarm copy (no dataset/ or benchmark/harmful_behaviors_test_public.json)`);
  const tools = readAgentHarmTools(dir);
  const out: AgentHarm = { dir, harmful: [], benign: [] };
  for (const split of splits) {
    for (const kind of ['harmful', 'benign'] as const) {
      const file = join(bdir, `${kind}_behaviors_${split}.json`);
      if (!existsSync(file)) throw new SafekeepError(`${dir}: missing ${file}`);
      out[kind].push(...readBehaviorFile(file, split, kind, tools[kind]));
    }
  }
  return out;
}

const SPLIT_PREFIX: Record<AgentHarmSplit, string> = { test_public: 'test', validation: 'val' };

/** Pair id of a behavior: `test-1-1`, `val-2-1` (AgentHarm ids repeat across splits). */
function agentHarmPairId(split: AgentHarmSplit, id: string): string {
  return `${SPLIT_PREFIX[split]}-${id}`;
}

/** Harmful and benign behaviors with the same split and id, as pairs (harmful order). */
export function agentHarmPairs(ah: AgentHarm): Pair[] {
  const benign = new Map(ah.benign.map((b) => [`${b.split}/${b.id}`, b]));
  const pairs: Pair[] = [];
  for (const h of ah.harmful) {
    const b = benign.get(`${h.split}/${h.id}`);
    if (!b) continue;
    const tools = [...h.tools];
    const names = new Set(h.targetFunctions);
    b.targetFunctions.forEach((f, i) => {
      if (!names.has(f)) { names.add(f); tools.push(b.tools[i]!); }
    });
    const id = agentHarmPairId(h.split, h.id);
    const base = h.id.split('-')[0]!;
    pairs.push(
      validatePair(
        {
          id,
          category: h.category.toLowerCase(),
          tools,
          harmful: { prompt: h.prompt, targetFunctions: h.targetFunctions },
          benign: { prompt: b.prompt, targetFunctions: b.targetFunctions },
          group: `${SPLIT_PREFIX[h.split]}-${base}`,
        },
        `${ah.dir}: pair ${id}`,
      ),
    );
  }
  return pairs;
}
