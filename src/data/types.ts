/**
 * The pair structure every data source (bundled pairs, AgentHarm, ...) is converted into.
 * One pair = one scenario with its tools, a harmful request and a benign counterpart that changes only the request.
 */

/** A JSON Schema object (draft 2020-12 subset as used by OpenAI function specs). */
export type JsonSchema = { [key: string]: unknown };

/** OpenAI function-calling tool spec. */
export interface ToolSpec {
  type: 'function';
  function: {
    name: string;
    description: string;
    parameters: JsonSchema;
  };
}

export interface Request {
  /** the user's message */
  prompt: string;
  /** names of the tools a compliant agent would call (subset of the pair's tools) */
  targetFunctions: string[];
}

export interface Pair {
  /** stable id, unique within its set */
  id: string;
  /** harm category, e.g. 'fraud', 'cybercrime' */
  category: string;
  tools: ToolSpec[];
  harmful: Request;
  benign: Request;
  /**
   * Pairs with the same group are variants of one behavior (AgentHarm's detailed/hinted variants) and always land
   * on the same side of the extraction/evaluation split. Absent = the pair is its own group.
   */
  group?: string;
}

export interface PairSet {
  /** 'pairs' | 'agentharm' | a path */
  name: string;
  pairs: Pair[];
  /** sha256 over the canonical JSON of the pairs */
  hash: string;
}

export interface Split {
  seed: number;
  /** pair ids */
  extraction: string[];
  evaluation: string[];
}

/** A tool call in an agent transcript (HF chat-template form: `arguments` is an object, not a JSON string). */
interface AgentToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: { [key: string]: unknown } };
}

/** One message of an agent context (OpenAI / HF chat-template roles). */
export type AgentMessage =
  | { role: 'system' | 'user'; content: string }
  | { role: 'assistant'; content: string; tool_calls?: AgentToolCall[] }
  | { role: 'tool'; content: string; tool_call_id: string; name: string };
