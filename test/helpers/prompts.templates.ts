/**
 * Test helper: the real templates of ../shared/templates as PromptTokenizers, plus each template's tool wrapper
 * written out by hand from the template source (independent ground truth for the configuration diff tests).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ToolSpec } from '../../src/data/types.ts';
import { loadPromptTokenizer, npmTokenizerDir, type PromptTokenizer } from '../../src/prompts/tokenizer.ts';

/** JSON as Python's json.dumps / Jinja `tojson` writes it without indent: ", " and ": " separators. */
export function pyJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(pyJson).join(', ')}]`;
  if (v && typeof v === 'object') return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${pyJson(x)}`).join(', ')}}`;
  return JSON.stringify(v);
}

export interface TemplateCase {
  name: string;
  tok: PromptTokenizer;
  /** does the template keep system messages as such (else folded into the user turn) */
  systemSupported: boolean;
  /** text a system message `sys` adds to a chatbot prompt with no system message */
  systemInsertion(sys: string): string;
  /** the tool region (what the flattened text replaces) for these tools */
  toolRegion(tools: readonly ToolSpec[]): string;
  /** agent(schema) from +instructions: apply the template's tool wrapper by hand */
  addTools(plusInstructions: string, tools: readonly ToolSpec[]): string;
}

const LLAMA_PREAMBLE =
  'Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\n' +
  'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.Do not use variables.\n\n';

const QWEN_PRE = '\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>';
const QWEN_POST =
  '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>';

function mistralHfTool(t: ToolSpec): string {
  const fn = t.function as unknown as Record<string, unknown>;
  const parts = Object.entries(fn)
    .filter(([k]) => k !== 'return')
    .map(([k, v]) => (typeof v === 'string' ? `"${k}": "${v}"` : `"${k}": ${pyJson(v)}`));
  return `{"type": "function", "function": {${parts.join(', ')}}}`;
}

/** Insert `ins` right before the last occurrence of `marker` (which must exist). */
function insertBeforeLast(s: string, marker: string, ins: string): string {
  const at = s.lastIndexOf(marker);
  if (at < 0) throw new Error(`marker ${marker} not found`);
  return s.slice(0, at) + ins + s.slice(at);
}

/** The four real templates; `withVocab` gives the Mistral ones the Llama-3 vocabulary as a stand-in. */
export async function templateCases(templatesDir: string, withVocab: boolean): Promise<TemplateCase[]> {
  const empty = mkdtempSync(join(tmpdir(), 'safekeep-mistral-'));
  const llamaVocab = withVocab ? npmTokenizerDir('llama3') : undefined;
  return [
    {
      name: 'llama-3.1',
      tok: await loadPromptTokenizer(npmTokenizerDir('llama3'), { template: join(templatesDir, 'llama-3.1-instruct.jinja') }),
      systemSupported: true,
      systemInsertion: (sys) => sys,
      toolRegion: (tools) => tools.map((t) => JSON.stringify(t, null, 4)).join('\n\n'),
      addTools: (p, tools) =>
        p
          .replace('<|start_header_id|>system<|end_header_id|>\n\n', '<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n')
          .replace(
            '<|start_header_id|>user<|end_header_id|>\n\n',
            `<|start_header_id|>user<|end_header_id|>\n\n${LLAMA_PREAMBLE}${tools.map((t) => JSON.stringify(t, null, 4) + '\n\n').join('')}`,
          ),
    },
    {
      name: 'qwen3',
      tok: await loadPromptTokenizer(npmTokenizerDir('qwen3'), { template: join(templatesDir, 'qwen3.jinja') }),
      systemSupported: true,
      systemInsertion: (sys) => `<|im_start|>system\n${sys}<|im_end|>\n`,
      toolRegion: (tools) => tools.map(pyJson).join('\n'),
      addTools: (p, tools) => {
        const i = p.indexOf('<|im_end|>');
        return p.slice(0, i) + `${QWEN_PRE}${tools.map((t) => '\n' + pyJson(t)).join('')}${QWEN_POST}` + p.slice(i);
      },
    },
    {
      name: 'mistral-v0.3-hf',
      tok: await loadPromptTokenizer(empty, { template: join(templatesDir, 'mistral-7b-instruct-v0.3.hf.jinja'), tokenizerDir: llamaVocab }),
      systemSupported: false,
      systemInsertion: (sys) => `${sys}\n\n`,
      toolRegion: (tools) => tools.map(mistralHfTool).join(', '),
      addTools: (p, tools) => insertBeforeLast(p, ' [INST] ', ` [AVAILABLE_TOOLS] [${tools.map(mistralHfTool).join(', ')}] [/AVAILABLE_TOOLS]`),
    },
    {
      name: 'mistral-common-v3',
      tok: await loadPromptTokenizer(empty, { template: join(templatesDir, 'mistral-common-v3', 'v3_spm.jinja'), tokenizerDir: llamaVocab }),
      systemSupported: true,
      systemInsertion: (sys) => `${sys}\n\n`,
      toolRegion: (tools) => tools.map(pyJson).join(', '),
      addTools: (p, tools) => insertBeforeLast(p, '[INST] ', `[AVAILABLE_TOOLS] ${pyJson(tools)}[/AVAILABLE_TOOLS]`),
    },
  ];
}

/** Is `longer` = `shorter` with `ins` inserted at one position? */
export function isInsertion(shorter: string, longer: string, ins: string): boolean {
  if (longer.length !== shorter.length + ins.length) return false;
  let p = 0;
  while (p < shorter.length && shorter[p] === longer[p]) p++;
  let s = 0;
  while (s < shorter.length - 0 && shorter[shorter.length - 1 - s] === longer[longer.length - 1 - s]) s++;
  for (let k = Math.max(0, shorter.length - s); k <= p; k++) {
    if (longer.slice(k, k + ins.length) === ins && longer.slice(0, k) === shorter.slice(0, k) && longer.slice(k + ins.length) === shorter.slice(k)) return true;
  }
  return false;
}
