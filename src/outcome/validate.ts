/**
 * Tool-call argument validation against the tool's JSON Schema (ajv, draft-07 keywords as used by OpenAI
 * function specs). Unknown keywords in a provided schema are ignored (strict: false); a schema ajv cannot compile
 * is a SafekeepError naming the tool. Validators are cached per schema text.
 */
import { Ajv as AjvClass } from 'ajv';
import type { ToolSpec } from '../data/types.ts';
import { SafekeepError } from '../util/errors.ts';
import type { CallCheck, ParsedCall } from './types.ts';

const ajv = new AjvClass({ strict: false, allErrors: true });
type Validator = ReturnType<typeof ajv.compile>;
const cache = new Map<string, Validator>();

function validatorFor(tool: ToolSpec): Validator {
  const key = JSON.stringify(tool.function.parameters ?? {});
  let v = cache.get(key);
  if (!v) {
    try {
      v = ajv.compile(tool.function.parameters ?? {});
    } catch (e) {
      throw new SafekeepError(`tool ${tool.function.name}: parameters are not a valid JSON Schema (${(e as Error).message})`);
    }
    cache.set(key, v);
  }
  return v;
}

/** Check one call against the provided tools. */
export function checkCall(call: ParsedCall, tools: readonly ToolSpec[]): CallCheck {
  const tool = tools.find((t) => t.function.name === call.name);
  if (!tool) return { call, known: false, argsValid: false, errors: [`unknown tool ${call.name}`] };
  const v = validatorFor(tool);
  const ok = v(call.arguments) as boolean;
  const errors = ok ? [] : (v.errors ?? []).map((e) => `${call.name}${e.instancePath || ''} ${e.message ?? 'invalid'}`.trim());
  return { call, known: true, argsValid: ok, errors };
}
