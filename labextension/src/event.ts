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
 * A cell keeps its latest CELL_EVENTS_KEPT events, and of those only as many of the newest as
 * fit in CELL_EVENTS_BUDGET characters of JSON (the newest is always kept); `events_dropped`
 * counts the others. The frontend sends a cell's metadata with every execute_request, so an
 * unbounded list would grow each request (and the notebook) with every re-run. Same rule as
 * append_cell_event in rewyn_kernel/kernel/record.py; tests/test_labextension.py runs both on
 * the same cases.
 */
export const CELL_EVENTS_KEPT = 20;
export const CELL_EVENTS_BUDGET = 16 * 1024;

/**
 * The cell's record with `event` appended to its events, other keys kept; null when the event
 * is there already (the same reply seen twice changes nothing).
 */
export function withEvent(record: unknown, event: JSONObject): PartialJSONObject | null {
  const base: PartialJSONObject = isObject(record) ? record : {};
  const known = Array.isArray(base['events']) ? base['events'] : [];
  const id = event['id'];
  if (typeof id === 'string' && known.some(old => isObject(old) && old['id'] === id)) {
    return null;
  }
  const events = [...known, event];
  let keep = Math.min(events.length, CELL_EVENTS_KEPT);
  let size = 0;
  for (let index = events.length - 1; index >= events.length - keep; index--) {
    size += JSON.stringify(events[index]).length;
    if (size > CELL_EVENTS_BUDGET && index < events.length - 1) {
      keep = events.length - 1 - index;
      break;
    }
  }
  const excess = events.length - keep;
  if (excess === 0) {
    return { ...base, events };
  }
  const dropped = base['events_dropped'];
  const before = Number.isSafeInteger(dropped) && (dropped as number) > 0 ? (dropped as number) : 0;
  return { ...base, events: events.slice(excess), events_dropped: before + excess };
}
