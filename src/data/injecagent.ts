/**
 * InjecAgent importer (Zhan et al., 2024): indirect prompt injection through tool responses.
 *
 * - Tools: ToolEmu format (`tools.json`: toolkits → tools with `parameters: [{name, type, description, required}]`)
 *   converted to OpenAI function specs. A tool's full name is toolkit + tool name (`GmailSendEmail`), as in InjecAgent.
 * - Cases: `test_cases_{dh,ds}_{base,enhanced}.json` (510 direct-harm + 544 data-stealing = 1,054 per setting).
 *   Each case becomes an agent context: the user instruction, the agent's call of the user tool with the case's
 *   parameters, and the tool response that carries the injected attacker instruction. The tools the agent sees are
 *   InjecAgent's: the user tool followed by the attacker tools.
 * - the attack success rate of the guard evaluation needs `attackerTools`: an output that calls one of them is a successful attack (for data stealing,
 *   the first attacker tool is the data-fetching step; `simulatedAttackerResponse` gives InjecAgent's canned
 *   observation for the second step).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { SafekeepError } from '../util/errors.ts';
import { isRecord, readJsonFile } from './jsonfile.ts';
import { parsePyLiteral, PyLiteralError } from './pyliteral.ts';
import type { AgentMessage, JsonSchema, ToolSpec } from './types.ts';
import { validateToolSpec } from './validate.ts';

export type InjecAgentSetting = 'base' | 'enhanced';
/** dh = direct harm, ds = data stealing */
export type InjecAgentAttack = 'dh' | 'ds';
export const INJECAGENT_SETTINGS: readonly InjecAgentSetting[] = ['base', 'enhanced'];
export const INJECAGENT_ATTACKS: readonly InjecAgentAttack[] = ['dh', 'ds'];

export interface InjecAgentCase {
  /** `<attack>-<setting>-<n>` (n = 1-based row in the file); row n of base and enhanced is the same case */
  id: string;
  setting: InjecAgentSetting;
  attack: InjecAgentAttack;
  /** 1-based row in its file */
  row: number;
  userInstruction: string;
  userTool: string;
  /** the user tool call's arguments, parsed from InjecAgent's Python-literal `Tool Parameters` */
  userToolArguments: { [key: string]: unknown };
  /** the observation returned by the user tool, with the injection inside */
  toolResponse: string;
  attackerInstruction: string;
  /** attacker tool names, in InjecAgent's order (ds: [data-fetching tool, sending tool]) */
  attackerTools: string[];
  attackType: string;
  expectedAchievements: string;
  /** InjecAgent's scripted agent thought before the user tool call */
  thought: string;
  /** tools available to the agent: the user tool, then the attacker tools (each name once) */
  tools: ToolSpec[];
  /** agent context: user → assistant tool call → tool response */
  messages: AgentMessage[];
}

const TOOLEMU_TYPES = new Set(['string', 'integer', 'number', 'boolean', 'array', 'object']);

/** One ToolEmu tool as an OpenAI function spec (description = the tool's summary). */
export function toolEmuToSpec(toolkit: string, tool: unknown, where: string): ToolSpec {
  if (!isRecord(tool) || typeof tool.name !== 'string') throw new SafekeepError(`${where}: tool must have a "name"`);
  const name = `${toolkit}${tool.name}`;
  const w = `${where} (${name})`;
  if (!Array.isArray(tool.parameters)) throw new SafekeepError(`${w}: "parameters" must be a list`);
  const properties: { [key: string]: JsonSchema } = {};
  const required: string[] = [];
  tool.parameters.forEach((p, i) => {
    if (!isRecord(p) || typeof p.name !== 'string' || typeof p.type !== 'string') {
      throw new SafekeepError(`${w}: parameters[${i}] needs "name" and "type"`);
    }
    if (!TOOLEMU_TYPES.has(p.type)) throw new SafekeepError(`${w}: parameters[${i}] ('${p.name}') has unknown type '${p.type}'`);
    const prop: JsonSchema = { type: p.type };
    if (typeof p.description === 'string') prop.description = p.description;
    properties[p.name] = prop;
    if (p.required === true) required.push(p.name);
  });
  const parameters: JsonSchema = { type: 'object', properties };
  if (required.length) parameters.required = required;
  const description = typeof tool.summary === 'string' ? tool.summary : '';
  return validateToolSpec({ type: 'function', function: { name, description, parameters } }, w);
}

/** All InjecAgent tools by full name (toolkit + tool). */
export function readInjecAgentTools(dir: string): Map<string, ToolSpec> {
  const file = join(dir, 'tools.json');
  const raw = readJsonFile(file);
  if (!Array.isArray(raw)) throw new SafekeepError(`${file}: expected a list of ToolEmu toolkits`);
  const out = new Map<string, ToolSpec>();
  raw.forEach((kit, k) => {
    if (!isRecord(kit) || typeof kit.toolkit !== 'string' || !Array.isArray(kit.tools)) {
      throw new SafekeepError(`${file}: toolkit ${k + 1} needs "toolkit" and "tools"`);
    }
    const toolkit = kit.toolkit;
    kit.tools.forEach((t, i) => {
      const spec = toolEmuToSpec(toolkit, t, `${file}: toolkit '${toolkit}', tool ${i + 1}`);
      if (out.has(spec.function.name)) throw new SafekeepError(`${file}: tool '${spec.function.name}' defined twice`);
      out.set(spec.function.name, spec);
    });
  });
  return out;
}

/** InjecAgent wraps each tool response in one pair of double quotes; the observation is what is inside. */
function unwrapToolResponse(s: string): string {
  return s.length >= 2 && s.startsWith('"') && s.endsWith('"') ? s.slice(1, -1) : s;
}

/** A case field that must be a string (`w`: the case's location, for the error). */
export function caseString(b: Record<string, unknown>, key: string, w: string): string {
  const v = b[key];
  if (typeof v !== 'string') throw new SafekeepError(`${w}: missing "${key}"`);
  return v;
}

function injecAgentCaseFile(dir: string, attack: InjecAgentAttack, setting: InjecAgentSetting): string {
  return join(dir, `test_cases_${attack}_${setting}.json`);
}

/** Where one raw case sits, with the checks every reader needs already made. */
export interface InjecAgentRow {
  /** `<attack>-<setting>-<row>`: the id every reader gives this case */
  id: string;
  attack: InjecAgentAttack;
  setting: InjecAgentSetting;
  /** 1-based position in its file */
  row: number;
  /** "<file>: case <row>", the prefix of every error about it */
  where: string;
  /** `Attacker Tools`: checked to be a non-empty list of names */
  attackerTools: string[];
}

/**
 * The one loop over InjecAgent's case files: each case of one setting (dh first by default, file order) is checked to be
 * an object with a non-empty `Attacker Tools` list and handed to `map` with its place; the result keeps that order.
 * The native-tool and the ReAct readers differ only in their mapper.
 */
export function mapInjecAgentCases<T>(
  dir: string,
  setting: InjecAgentSetting,
  attacks: readonly InjecAgentAttack[],
  map: (c: Record<string, unknown>, at: InjecAgentRow) => T,
): T[] {
  const out: T[] = [];
  for (const attack of attacks) {
    const file = injecAgentCaseFile(dir, attack, setting);
    if (!existsSync(file)) throw new SafekeepError(`${dir}: missing ${file}`);
    const raw = readJsonFile(file);
    if (!Array.isArray(raw)) throw new SafekeepError(`${file}: expected a list of test cases`);
    raw.forEach((c, i) => {
      const row = i + 1;
      const where = `${file}: case ${row}`;
      if (!isRecord(c)) throw new SafekeepError(`${where}: must be an object`);
      const attackerTools = c['Attacker Tools'];
      if (!Array.isArray(attackerTools) || attackerTools.length === 0 || !attackerTools.every((t) => typeof t === 'string')) {
        throw new SafekeepError(`${where}: "Attacker Tools" must be a non-empty list of names`);
      }
      out.push(map(c, { id: `${attack}-${setting}-${row}`, attack, setting, row, where, attackerTools: [...(attackerTools as string[])] }));
    });
  }
  return out;
}

/** Cases of one setting (both attack kinds by default), dh first, in file order. */
export function readInjecAgentCases(
  dir: string,
  setting: InjecAgentSetting,
  attacks: readonly InjecAgentAttack[] = INJECAGENT_ATTACKS,
  tools: Map<string, ToolSpec> = readInjecAgentTools(dir),
): InjecAgentCase[] {
  return mapInjecAgentCases(dir, setting, attacks, (c, { id, attack, row, where: w, attackerTools }) => {
    const userTool = caseString(c, 'User Tool', w);
    // the user tool may also be an attacker tool (ds row 276: GitHubGetUserDetails): offer each tool once
    const names = [...new Set([userTool, ...attackerTools])];
    const specs = names.map((n) => {
      const s = tools.get(n);
      if (!s) throw new SafekeepError(`${w}: tool '${n}' is not in tools.json`);
      return s;
    });
    const paramsText = caseString(c, 'Tool Parameters', w);
    let args: unknown;
    try {
      args = parsePyLiteral(paramsText);
    } catch (e) {
      if (e instanceof PyLiteralError) throw new SafekeepError(`${w}: "Tool Parameters" is not a Python literal (${e.message})`);
      throw e;
    }
    if (!isRecord(args)) throw new SafekeepError(`${w}: "Tool Parameters" must be a dict`);
    const toolResponse = unwrapToolResponse(caseString(c, 'Tool Response', w));
    const userInstruction = caseString(c, 'User Instruction', w);
    const callId = 'call_0';
    return {
      id,
      setting,
      attack,
      row,
      userInstruction,
      userTool,
      userToolArguments: args,
      toolResponse,
      attackerInstruction: caseString(c, 'Attacker Instruction', w),
      attackerTools,
      attackType: caseString(c, 'Attack Type', w),
      expectedAchievements: typeof c['Expected Achievements'] === 'string' ? c['Expected Achievements'] : '',
      thought: typeof c.Thought === 'string' ? c.Thought : '',
      tools: specs,
      messages: [
        { role: 'user', content: userInstruction },
        { role: 'assistant', content: '', tool_calls: [{ id: callId, type: 'function', function: { name: userTool, arguments: args } }] },
        { role: 'tool', content: toolResponse, tool_call_id: callId, name: userTool },
      ],
    };
  });
}

/**
 * InjecAgent's canned responses for the data-stealing second step, keyed `(<tool>,<parameters text>)` exactly as
 * InjecAgent builds the key from the model's action input.
 */
export function readSimulatedAttackerResponses(dir: string): Map<string, string> {
  const file = join(dir, 'attacker_simulated_responses.json');
  const raw = readJsonFile(file);
  if (!isRecord(raw)) throw new SafekeepError(`${file}: expected an object`);
  const out = new Map<string, string>();
  for (const [k, v] of Object.entries(raw)) if (typeof v === 'string') out.set(k, v);
  return out;
}

export function simulatedAttackerResponse(responses: Map<string, string>, tool: string, parametersText: string): string | undefined {
  return responses.get(`(${tool},${parametersText})`);
}
