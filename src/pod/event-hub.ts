/**
 * Fan-out of container lifecycle events to GetContainerEvents subscribers (the kubelet's evented PLEG).
 *
 * Publishing never waits for a subscriber. Each subscriber's transport buffers what it cannot send yet
 * (`write()` returning false means its buffer is over the high-water mark); a subscriber whose writes keep
 * being refused for more than `maxBacklog` events in a row is too far behind and is closed, so its
 * buffer stays bounded and it can resubscribe (the kubelet then relists). Events reach every subscriber
 * in publish order.
 */
import type { Logger } from '../common/logger.js';

/** Where a subscriber's events go (structurally the API's StreamSink). */
export interface EventSink<T> {
  /** False when the transport's buffer is full (the message is still queued). */
  write(message: T): boolean;
  end(): void;
  onClose(listener: () => void): void;
  readonly closed: boolean;
}

export interface EventHubOptions {
  /** Consecutive refused writes after which a subscriber is dropped (default 1000). */
  maxBacklog?: number;
  log: Logger;
}

interface Subscriber<T> {
  sink: EventSink<T>;
  /** Writes refused in a row. */
  backlog: number;
}

export class EventHub<T> {
  private readonly subscribers = new Set<Subscriber<T>>();
  private readonly maxBacklog: number;

  constructor(private readonly options: EventHubOptions) {
    this.maxBacklog = options.maxBacklog ?? 1000;
  }

  /** Adds a subscriber until its sink closes; returns an unsubscribe function. */
  subscribe(sink: EventSink<T>): () => void {
    const sub: Subscriber<T> = { sink, backlog: 0 };
    this.subscribers.add(sub);
    const remove = () => void this.subscribers.delete(sub);
    sink.onClose(remove);
    this.options.log.debug('event subscriber added', { subscribers: this.subscribers.size });
    return remove;
  }

  /** Number of live subscribers. */
  get size(): number {
    return this.subscribers.size;
  }

  /** Sends the event to every subscriber, dropping those too far behind. */
  publish(event: T): void {
    for (const sub of this.subscribers) {
      if (sub.sink.closed) {
        this.subscribers.delete(sub);
        continue;
      }
      if (sub.sink.write(event)) {
        sub.backlog = 0;
        continue;
      }
      sub.backlog++;
      if (sub.backlog > this.maxBacklog) {
        this.subscribers.delete(sub);
        this.options.log.warn('dropping a container event subscriber that fell behind', { backlog: sub.backlog });
        sub.sink.end();
      }
    }
  }

  /** Ends every subscription (daemon shutdown). */
  close(): void {
    for (const sub of this.subscribers) sub.sink.end();
    this.subscribers.clear();
  }
}
