/** Our role, tool-use instruction and length-filler texts, stored as data in `data/prompts/`. */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SafekeepError } from '../util/errors.ts';
import { sha256Hex } from '../util/hash.ts';

export interface PromptTexts {
  /** agent role description (`+role` and later) */
  role: string;
  /** tool-use instructions (`+instructions` and later) */
  instructions: string;
  /** benign role-description text for `chatbot-long` */
  filler: string;
  /** sha256 of each text, for manifests */
  hashes: { role: string; instructions: string; filler: string };
}

/** `data/prompts/` of this repository. */
const defaultPromptTextsDir = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'data', 'prompts');

const FILES = { role: 'agent-role.txt', instructions: 'tool-use-instructions.txt', filler: 'length-filler.txt' } as const;

/** Load the three texts (trailing whitespace trimmed) from `dir` (default `data/prompts/`). */
export function loadPromptTexts(dir: string = defaultPromptTextsDir): PromptTexts {
  const read = (name: string): string => {
    const file = join(dir, name);
    if (!existsSync(file)) throw new SafekeepError(`${file}: prompt text missing`);
    const text = readFileSync(file, 'utf8').trim();
    if (!text) throw new SafekeepError(`${file}: prompt text is empty`);
    return text;
  };
  const role = read(FILES.role);
  const instructions = read(FILES.instructions);
  const filler = read(FILES.filler);
  return { role, instructions, filler, hashes: { role: sha256Hex(role), instructions: sha256Hex(instructions), filler: sha256Hex(filler) } };
}
