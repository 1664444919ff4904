/**
 * The seed paper's own figures (data/paper/paper-numbers.json, a project file: the report never needs ../shared),
 * for printing beside measured ones, and the paper's citation. Every table of the file names the model(s) and the
 * data its figures came from; a measured model is matched to the paper's column by name (`paperModel`).
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const PAPER_NUMBERS_FILE = join(resolve(dirname(fileURLToPath(import.meta.url)), '..', '..'), 'data', 'paper', 'paper-numbers.json');

interface PaperTable { title: string; models: string[]; data: string }

export interface PaperNumbers {
  paper: { title: string; authors: string[]; year: number; short: string };
  tables: {
    section_3_1: PaperTable & { refusal_percent: { chatbot: number; agent: number }; auroc: Record<string, number> };
    /** rows: label → one AUROC per model, in `models` order */
    table_1: PaperTable & { rows: Record<string, number[]> };
    table_2: PaperTable & { rows: Record<string, number[]> };
    /** rows: [alpha, refusal %, harmful execution %, invalid %] */
    table_3: PaperTable & { columns: string[]; rows: number[][] };
    /** rows: model → method → one figure per column */
    table_4: PaperTable & { columns: string[]; column_labels: string[]; rows: Record<string, Record<string, number[]>> };
  };
}

export const PAPER_TITLE = 'Tool Specifications Matter: Uncovering and Mitigating Safety Risks in AI Agents';
/** How every report and the README cite the paper. */
export const PAPER_CITATION = `Pan et al. (2026), “${PAPER_TITLE}”`;

let cached: PaperNumbers | null | undefined;

/** The paper's figures, or null when the project file is missing (an installed copy without data/). */
export function paperNumbers(file = PAPER_NUMBERS_FILE): PaperNumbers | null {
  if (file === PAPER_NUMBERS_FILE && cached !== undefined) return cached;
  const v = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as PaperNumbers) : null;
  if (file === PAPER_NUMBERS_FILE) cached = v;
  return v;
}

/** The paper's model a measured model name stands for (by family and size), or null. */
export function paperModel(name: string, models: readonly string[]): string | null {
  const n = name.toLowerCase().replace(/[^a-z0-9.]/g, '');
  const keys: [RegExp, RegExp][] = [
    [/llama3\.?1.*8b/, /llama3\.1-8b/i],
    [/qwen3.*8b/, /qwen3-8b/i],
    [/mistral.*7b/, /mistral-7b/i],
    [/gemini/, /gemini/i],
    [/gpt5/, /gpt5/i],
  ];
  for (const [ours, theirs] of keys) if (ours.test(n)) return models.find((m) => theirs.test(m)) ?? null;
  return null;
}

/** Table 1's paper row for one of our configurations. */
export function paperTable1Row(config: string): string | null {
  // names differ between reproduce (+role, agent.schema) and analyses (agent-role, agent-full)
  if (config === 'chatbot') return 'Chatbot';
  if (config.includes('long')) return 'Chatbot-Long (length control)';
  if (config.includes('role')) return '+ Role description';
  if (config.includes('instructions')) return '+ Tool-use instructions';
  if (config.startsWith('agent')) return '+ Tool specifications';
  return null;
}

/** Table 2's paper row for one of our representations. */
export function paperTable2Row(config: string): string | null {
  if (config.endsWith('flattened')) return 'After representation conversion (flattened)';
  if (config.endsWith('pseudoword')) return 'After semantic randomization (pseudowords)';
  if (config.endsWith('schema') || config === 'agent') return 'Original tool specifications';
  return null;
}

/**
 * The paper's figures for one row of a table whose rows hold one value per model: the matched model's value, else
 * every model's value in the file's order ("0.740 / 0.786 / 0.815").
 */
export function paperCell(values: readonly number[] | undefined, models: readonly string[], model: string | null, digits: number): string {
  if (!values) return '–';
  if (model) {
    const i = models.indexOf(model);
    return i >= 0 && values[i] !== undefined ? values[i]!.toFixed(digits) : '–';
  }
  return values.map((v) => v.toFixed(digits)).join(' / ');
}

/** The header of a paper column: the model it is for, or every model in order. */
export function paperHeader(what: string, models: readonly string[], model: string | null): string {
  return `Paper ${what} (${model ?? models.map((m) => m.split(/[-.]/)[0]).join(' / ')})`;
}
