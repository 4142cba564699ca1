/**
 * What the sandbox kernel sends and what a notebook keeps of it. The Python side of the same
 * contract is rewyn_kernel/kernel/record.py: the reply metadata holds
 * `{rewyn_kernel: {event, record}}`, a cell's metadata `{rewyn_kernel: {record}}` (the latest
 * execution's compact record, replaced on each run), and the optional persisted output a
 * summary of the event under EVENT_MIME.
 *
 * A cell an MCP agent added to a live notebook also holds `{rewyn_kernel: {agent}}`: who wrote
 * it, and, for a cell that waits for the person's approval, why and the decision (agentOf,
 * withRejection; the server's side is rewyn_kernel/mcp/live/).
 */
import { JSONObject, PartialJSONObject } from '@lumino/coreutils';

export const METADATA_KEY = 'rewyn_kernel';
export const EVENT_MIME = 'application/vnd.rewyn.sandbox-event+json';
export const EVENT_TYPE = 'SANDBOX_EXECUTED';
/** `implementation` in the sandbox kernel's kernel_info_reply, whatever its kernelspec's name. */
export const KERNEL_IMPLEMENTATION = 'rewyn-kernel';

export function isObject(value: unknown): value is JSONObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The event an execute_reply carries in its metadata, or null when it carries none. */
export function replyEvent(metadata: unknown): JSONObject | null {
  if (!isObject(metadata)) {
    return null;
  }
  const record = metadata[METADATA_KEY];
  const event = isObject(record) ? record['event'] : undefined;
  if (!isObject(event) || event['type'] !== EVENT_TYPE || typeof event['id'] !== 'string') {
    return null;
  }
  return event;
}

/**
 * The compact record an execute_reply carries next to the event (how the execution ended,
 * where, how long, the code's hash), or null. Only a record with a string id counts.
 */
export function replyRecord(metadata: unknown): JSONObject | null {
  if (!isObject(metadata)) {
    return null;
  }
  const holder = metadata[METADATA_KEY];
  const record = isObject(holder) ? holder['record'] : undefined;
  if (!isObject(record) || typeof record['id'] !== 'string') {
    return null;
  }
  return record;
}

/**
 * The cell's metadata entry with `record` as its latest execution's record, other keys kept;
 * null when that record is there already (the same reply seen twice changes nothing). Same
 * rule as set_cell_record in rewyn_kernel/kernel/record.py; tests/test_labextension.py runs
 * both on the same cases.
 */
export function withRecord(entry: unknown, record: JSONObject): PartialJSONObject | null {
  const base: PartialJSONObject = isObject(entry) ? entry : {};
  const known = base['record'];
  if (isObject(known) && known['id'] === record['id']) {
    return null;
  }
  return { ...base, record };
}

/** The states of an agent's cell, as the MCP server writes them. */
export const AGENT_STATES = [
  'running',
  'done',
  'interrupted',
  'pending',
  'approved',
  'edited',
  'rejected',
  'expired',
  'withdrawn'
] as const;
export type AgentState = (typeof AGENT_STATES)[number];
export const AGENT_RISKS = ['low', 'medium', 'high'] as const;
export type AgentRisk = (typeof AGENT_RISKS)[number];

export const MAX_AGENT_NAME = 100;
export const MAX_AGENT_TEXT = 2000;

/** An agent's cell as its metadata says, every field checked and bounded. */
export interface IAgentCell {
  name: string;
  call: string;
  /** null: missing or not a state this extension knows */
  state: AgentState | null;
  /** null: missing or not a known level */
  risk: AgentRisk | null;
  reason: string;
  note: string;
  /** the person's decision is written (the server has yet to act on it, or has) */
  decided: boolean;
  /** the call's number in the server's run log ("call N"), or null */
  number: number | null;
  /** the agent's client id in the shared document's awareness, or null */
  client: number | null;
}

/**
 * The agent's part of a cell's metadata entry, or null when the cell is not an agent's. The
 * metadata is the notebook file's, and the agent chose its name and wrote the policy's reason
 * through the server: strings are cut to their bounds and stripped of control and
 * direction-changing characters, which could make the text read as something else.
 */
export function agentOf(entry: unknown): IAgentCell | null {
  const agent = isObject(entry) ? entry['agent'] : undefined;
  if (!isObject(agent)) {
    return null;
  }
  const state = agent['state'];
  const risk = agent['risk'];
  const decision = agent['decision'];
  return {
    name: cleanText(agent['name'], MAX_AGENT_NAME, true) || 'an agent',
    call: cleanText(agent['call'], MAX_AGENT_NAME, true),
    state: AGENT_STATES.find(known => known === state) ?? null,
    risk: AGENT_RISKS.find(known => known === risk) ?? null,
    reason: cleanText(agent['reason'], MAX_AGENT_TEXT, false),
    note: cleanText(agent['note'], MAX_AGENT_TEXT, false),
    decided: isObject(decision) && typeof decision['action'] === 'string',
    number: wholeNumber(agent['number']),
    client: wholeNumber(agent['client'])
  };
}

function wholeNumber(value: unknown): number | null {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : null;
}

/**
 * The cell's metadata entry with the person's rejection of the agent's proposed cell in
 * `agent.decision` (the other keys of the entry and of `agent` kept), or null when the cell is
 * not an agent's pending cell or a decision is there already. The note is cut to
 * MAX_AGENT_TEXT characters.
 */
export function withRejection(entry: unknown, note: string): PartialJSONObject | null {
  const cell = agentOf(entry);
  if (!isObject(entry) || cell === null || cell.state !== 'pending' || cell.decided) {
    return null;
  }
  const agent = entry['agent'] as JSONObject;
  const decision = { action: 'reject', note: note.slice(0, MAX_AGENT_TEXT) };
  return { ...entry, agent: { ...agent, decision } };
}

// C0 and C1 controls, zero-width and direction marks, embeddings, overrides and isolates.
const HIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069]/g;

/** A string field cut to `limit` characters ('' when not a string); `oneLine` drops line breaks. */
function cleanText(value: unknown, limit: number, oneLine: boolean): string {
  if (typeof value !== 'string') {
    return '';
  }
  let text = value.slice(0, limit).replace(HIDDEN, '');
  if (oneLine) {
    text = text.replace(/\s+/g, ' ').trim();
  }
  return value.length > limit ? `${text}…` : text;
}
