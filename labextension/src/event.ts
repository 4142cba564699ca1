/**
 * What the sandbox kernel sends and what a notebook keeps of it. The Python side of the same
 * contract is rewyn_kernel/kernel/record.py: the reply metadata holds
 * `{rewyn_kernel: {event}}`, a cell's metadata `{rewyn_kernel: {events: [...]}}` (appended per
 * execution), and the persisted output a summary of the event under EVENT_MIME.
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
 * A cell keeps its latest this many events and counts older ones in `events_dropped`: the
 * frontend sends a cell's metadata with every execute_request, so an unbounded list would grow
 * each request (and the notebook) with every re-run. Same rule as CELL_EVENTS_KEPT in record.py.
 */
export const CELL_EVENTS_KEPT = 20;

/**
 * The cell's record with `event` appended to its events, other keys kept; null when the event
 * is there already (the same reply seen twice changes nothing).
 */
export function withEvent(record: unknown, event: JSONObject): PartialJSONObject | null {
  const base: PartialJSONObject = isObject(record) ? record : {};
  const known = Array.isArray(base['events']) ? base['events'] : [];
  if (known.some(old => isObject(old) && old['id'] === event['id'])) {
    return null;
  }
  const events = [...known, event];
  const excess = events.length - CELL_EVENTS_KEPT;
  if (excess <= 0) {
    return { ...base, events };
  }
  const dropped = base['events_dropped'];
  const before = typeof dropped === 'number' && Number.isInteger(dropped) ? dropped : 0;
  return { ...base, events: events.slice(excess), events_dropped: before + excess };
}
