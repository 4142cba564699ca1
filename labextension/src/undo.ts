/**
 * Undo for cells, in the frontend: the command "Undo the last cell's changes to the state"
 * (Kernel menu and Ctrl+Alt+Z, declared in schema/undo.json) sends the cell `%undo`, and the
 * command "Undo back to this cell" (a code cell's context menu) sends `%undo --to N`, N the
 * cell's execution count; the sandbox kernel reads them on the host
 * (rewyn_kernel/kernel/undo.py), and the command shows what it answered.
 *
 * Each execute_reply of the sandbox kernel says in its metadata whether an undo is there
 * (`{rewyn_kernel: {undo: {available, cell, reach, undone?}}}`: `reach`, the executions an undo
 * can go back to); an UndoState per notebook keeps the latest, and which of its cells ran as
 * which execution, so that the status line under a cell can say "undo available" or "undone"
 * (status.ts), and the context menu offers "Undo back to this cell" only on a cell it can go
 * back to. Nothing of it is saved in the notebook: a checkpoint lives only as long as its
 * kernel.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { IChangedArgs } from '@jupyterlab/coreutils';
import { NotebookPanel } from '@jupyterlab/notebook';
import { Kernel, KernelMessage } from '@jupyterlab/services';

import { isObject, KERNEL_IMPLEMENTATION, METADATA_KEY } from './event';

export const UNDO_COMMAND = 'rewyn-kernel:undo';
export const UNDO_LABEL = "Undo the last cell's changes to the state";
export const UNDO_TO_COMMAND = 'rewyn-kernel:undo-to';
export const UNDO_TO_LABEL = 'Undo back to this cell';
const MAX_CELLS = 1000;
/** A cell the kernel reads as an undo (as UNDO_CELL in undo.py): its reply's count is not its. */
const UNDO_CELL = /^\s*%undo(?:[ \t][^\n]*)?\s*$/;

/** The undo part of an execute_reply's metadata, checked; null when it has none. */
export function replyUndo(
  metadata: unknown
): { available: number; cell: number | null; reach: number[]; undone: number[] } | null {
  const holder = isObject(metadata) ? metadata[METADATA_KEY] : undefined;
  const undo = isObject(holder) ? holder['undo'] : undefined;
  if (!isObject(undo) || typeof undo['available'] !== 'number') {
    return null;
  }
  const cell = typeof undo['cell'] === 'number' ? undo['cell'] : null;
  const numbers = (value: unknown): number[] =>
    Array.isArray(value)
      ? value.filter((n): n is number => typeof n === 'number').slice(-MAX_CELLS)
      : [];
  return {
    available: Math.max(0, Math.floor(undo['available'])),
    cell,
    reach: numbers(undo['reach']),
    undone: numbers(undo['undone'])
  };
}

/** What a notebook's sandbox kernel last said of undo, by the notebook's cell ids. */
export class UndoState {
  constructor(panel: NotebookPanel) {
    const sessionContext = panel.sessionContext;
    sessionContext.kernelChanged.connect(this.onKernelChanged, this);
    this.attach(sessionContext.session?.kernel ?? null);
    panel.disposed.connect(() => {
      sessionContext.kernelChanged.disconnect(this.onKernelChanged, this);
      this.attach(null);
      UndoState.states.delete(panel);
    });
    UndoState.states.set(panel, this);
  }

  /** The state of ``panel``'s notebook, if the extension watches it. */
  static of(panel: NotebookPanel): UndoState | undefined {
    return UndoState.states.get(panel);
  }

  /** Call ``listener`` whenever the state changes, until ``panel`` is disposed. */
  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  private emit(): void {
    for (const listener of this.listeners) {
      listener();
    }
  }

  /** Whether the notebook's kernel is the sandbox kernel (the command applies). */
  get ours(): boolean {
    return this._ours;
  }

  /** How many cells an undo can go back now. */
  get available(): number {
    return this._available;
  }

  /** What the status line under cell ``cellId`` says of undo ('' for nothing). */
  noteFor(cellId: string): string {
    if (this._available > 0 && this.nextCell === cellId) {
      const more = this._available > 1 ? ` (${this._available} cells back)` : '';
      return `undo available${more}: Kernel › ${UNDO_LABEL} (Ctrl+Alt+Z)`;
    }
    return this.undoneCells.has(cellId) ? "its changes to the state were undone" : '';
  }

  /** The execution count `%undo --to` takes to go back to before cell ``cellId``'s last run,
   * or null when the kernel cannot go back there (it kept no state from before it). */
  reachFor(cellId: string): number | null {
    let latest: number | null = null;
    for (const [count, id] of this.cells) {
      if (id === cellId && (latest === null || count > latest)) {
        latest = count;
      }
    }
    return latest !== null && this.reach.has(latest) ? latest : null;
  }

  private onKernelChanged(
    _: ISessionContext,
    change: IChangedArgs<Kernel.IKernelConnection | null, Kernel.IKernelConnection | null, 'kernel'>
  ): void {
    this.attach(change.newValue);
  }

  private attach(kernel: Kernel.IKernelConnection | null): void {
    this.kernel?.anyMessage.disconnect(this.onMessage, this);
    this.kernel?.statusChanged.disconnect(this.onStatus, this);
    this.kernel = kernel;
    this.reset();
    this._ours = false;
    kernel?.anyMessage.connect(this.onMessage, this);
    kernel?.statusChanged.connect(this.onStatus, this);
    kernel?.info.then(
      info => {
        if (this.kernel === kernel) {
          this._ours = info.implementation === KERNEL_IMPLEMENTATION;
          this.emit();
        }
      },
      () => undefined
    );
    this.emit();
  }

  private onStatus(_: Kernel.IKernelConnection, status: Kernel.Status): void {
    if (status === 'restarting' || status === 'autorestarting' || status === 'dead') {
      this.reset(); // (a restart drops every checkpoint)
      this.emit();
    }
  }

  private reset(): void {
    this.requests.clear();
    this.cells.clear();
    this.undoneCells.clear();
    this.undoRequests.clear();
    this.reach.clear();
    this._available = 0;
    this.nextCell = null;
  }

  private onMessage(_: Kernel.IKernelConnection, args: Kernel.IAnyMessageArgs): void {
    const { msg, direction } = args;
    if (direction === 'send') {
      const cellId = (msg.metadata as { cellId?: unknown } | undefined)?.cellId;
      if (msg.header.msg_type === 'execute_request' && typeof cellId === 'string') {
        bounded(this.requests, msg.header.msg_id, cellId);
      }
      const code = (msg.content as { code?: unknown }).code;
      if (msg.header.msg_type === 'execute_request' && typeof code === 'string') {
        if (UNDO_CELL.test(code)) {
          bounded(this.undoRequests, msg.header.msg_id, true); // (it uses no execution count)
        }
      }
      return;
    }
    if (msg.header.msg_type !== 'execute_reply' || !this._ours) {
      return;
    }
    const requestId = (msg.parent_header as Partial<KernelMessage.IHeader>).msg_id ?? '';
    const cellId = this.requests.get(requestId);
    this.requests.delete(requestId);
    const isUndo = this.undoRequests.delete(requestId);
    const count = (msg.content as { execution_count?: unknown }).execution_count;
    if (cellId !== undefined && typeof count === 'number' && !isUndo) {
      bounded(this.cells, count, cellId);
      this.undoneCells.delete(cellId);
    }
    const undo = replyUndo(msg.metadata);
    if (undo === null) {
      return;
    }
    for (const undone of undo.undone) {
      const id = this.cells.get(undone);
      if (id !== undefined) {
        this.undoneCells.add(id);
      }
    }
    this._available = undo.available;
    this.reach = new Set(undo.reach);
    this.nextCell = undo.cell === null ? null : (this.cells.get(undo.cell) ?? null);
    this.emit();
  }

  private static readonly states = new WeakMap<NotebookPanel, UndoState>();
  private kernel: Kernel.IKernelConnection | null = null;
  private _ours = false;
  private _available = 0;
  private nextCell: string | null = null;
  private readonly requests = new Map<string, string>();
  private readonly cells = new Map<number, string>();
  private readonly undoneCells = new Set<string>();
  private readonly undoRequests = new Map<string, boolean>();
  private reach = new Set<number>();
  private readonly listeners: (() => void)[] = [];
}

function bounded<K, V>(map: Map<K, V>, key: K, value: V): void {
  if (map.size >= MAX_CELLS) {
    const oldest = map.keys().next();
    if (!oldest.done) {
      map.delete(oldest.value);
    }
  }
  map.set(key, value);
}

/**
 * Send `%undo` (``to``: `%undo --to N`, back to before the cell with execution count N) to
 * ``panel``'s kernel; resolve to what it said and whether it undid anything. (Not stored in the
 * history: the command, not a cell, asked.)
 */
export async function undoLastCell(
  panel: NotebookPanel,
  to: number | null = null
): Promise<{ ok: boolean; text: string }> {
  const kernel = panel.sessionContext.session?.kernel;
  if (!kernel) {
    return { ok: false, text: 'The notebook has no kernel.' };
  }
  const texts: string[] = [];
  const future = kernel.requestExecute({
    code: to === null ? '%undo' : `%undo --to ${Math.floor(to)}`,
    silent: false,
    store_history: false,
    allow_stdin: false,
    stop_on_error: false
  });
  future.onIOPub = (msg: KernelMessage.IIOPubMessage): void => {
    if (KernelMessage.isStreamMsg(msg)) {
      texts.push(msg.content.text);
    }
  };
  const reply = await future.done;
  const text = texts.join('').trim() || 'The kernel did not say what it did.';
  return { ok: reply.content.status === 'ok', text };
}
