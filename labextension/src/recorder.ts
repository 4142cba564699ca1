/**
 * Copies each sandboxed execution's compact record from the execute_reply into the metadata of
 * the cell that ran it, so that saving the notebook keeps it, as `rewyn-kernel run` does
 * headless (the whole event goes to the kernel's run log).
 *
 * No frontend saves reply metadata, and a reply does not say which cell it belongs to; the
 * request does: JupyterLab and Notebook 7 put the cell's id in the execute_request's metadata
 * (`cellId`). So the recorder watches the kernel connection's messages in both directions and
 * pairs each reply with its request by msg_id.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { IChangedArgs } from '@jupyterlab/coreutils';
import { NotebookPanel } from '@jupyterlab/notebook';
import { Kernel, KernelMessage } from '@jupyterlab/services';
import { JSONObject } from '@lumino/coreutils';

import { KERNEL_IMPLEMENTATION, METADATA_KEY, replyRecord, withRecord } from './event';

/** Requests whose reply has not come are forgotten past this many (oldest first). */
const MAX_PENDING = 1000;

export class CellEventRecorder {
  constructor(private readonly panel: NotebookPanel) {
    const sessionContext = panel.sessionContext; // shared by every view of the notebook
    sessionContext.kernelChanged.connect(this.onKernelChanged, this);
    this.attach(sessionContext.session?.kernel ?? null);
    panel.disposed.connect(() => {
      sessionContext.kernelChanged.disconnect(this.onKernelChanged, this);
      this.attach(null);
    });
  }

  private onKernelChanged(
    _: ISessionContext,
    change: IChangedArgs<Kernel.IKernelConnection | null, Kernel.IKernelConnection | null, 'kernel'>
  ): void {
    this.attach(change.newValue);
  }

  private attach(kernel: Kernel.IKernelConnection | null): void {
    this.kernel?.anyMessage.disconnect(this.onMessage, this);
    this.pending.clear();
    this.kernel = kernel;
    kernel?.anyMessage.connect(this.onMessage, this);
  }

  private onMessage(kernel: Kernel.IKernelConnection, args: Kernel.IAnyMessageArgs): void {
    const { msg, direction } = args;
    if (direction === 'send') {
      if (msg.header.msg_type === 'execute_request') {
        this.remember(msg.header.msg_id, msg.metadata);
      }
      return;
    }
    if (msg.header.msg_type !== 'execute_reply') {
      return;
    }
    const requestId = (msg.parent_header as Partial<KernelMessage.IHeader>).msg_id;
    const cellId = requestId === undefined ? undefined : this.pending.get(requestId);
    if (requestId === undefined || cellId === undefined) {
      return;
    }
    this.pending.delete(requestId);
    if ((msg.content as { status?: unknown }).status === 'aborted') {
      return; // queued behind an error: it ran nothing (the kernel sends no event either)
    }
    const event = replyRecord(msg.metadata);
    if (event === null) {
      return;
    }
    // Another kernel could send the same key; only the sandbox kernel's events are recorded.
    // `info` is settled long before any reply, so events keep the order of their replies.
    kernel.info.then(
      info => {
        if (info.implementation === KERNEL_IMPLEMENTATION) {
          this.record(cellId, event);
        }
      },
      () => undefined
    );
  }

  private remember(requestId: string, metadata: unknown): void {
    const cellId = (metadata as { cellId?: unknown } | undefined)?.cellId;
    if (typeof cellId !== 'string') {
      return; // not sent by a notebook cell (a console, the debugger, another extension)
    }
    if (this.pending.size >= MAX_PENDING) {
      const oldest = this.pending.keys().next();
      if (!oldest.done) {
        this.pending.delete(oldest.value);
      }
    }
    this.pending.set(requestId, cellId);
  }

  private record(cellId: string, event: JSONObject): void {
    const cells = this.panel.content.model?.cells;
    if (this.panel.isDisposed || cells === undefined) {
      return;
    }
    for (const cell of cells) {
      if (cell.id === cellId) {
        const record = withRecord(cell.getMetadata(METADATA_KEY), event);
        if (record !== null) {
          cell.setMetadata(METADATA_KEY, record);
        }
        return;
      }
    }
    // The cell was deleted while it ran: there is nowhere to keep the event.
  }

  private kernel: Kernel.IKernelConnection | null = null;
  private readonly pending = new Map<string, string>();
}
