/**
 * What goes on the error stream. remotecommand v4/v5 expects one metav1.Status JSON document (client-go
 * reads it to EOF); v1–v3 expect plain text and nothing on success. Port-forward errors are a JSON
 * object `{"closeConnection":…,"message":…}` followed by a newline (json.Encoder).
 */

/** The subset of metav1.Status the streaming clients read. Field order follows the Go struct. */
export interface Status {
  metadata: Record<string, never>;
  status: 'Success' | 'Failure';
  message?: string;
  reason?: string;
  details?: { causes: { reason?: string; message: string }[] };
  code?: number;
}

export function successStatus(): Status {
  return { metadata: {}, status: 'Success' };
}

/**
 * The exit code of a finished command. `StatusCause.Type` serialises as "reason"; client-go parses the
 * cause message as a uint8 and crictl prints "command terminated with exit code N".
 */
export function exitCodeStatus(code: number): Status {
  return {
    metadata: {},
    status: 'Failure',
    message: `command terminated with non-zero exit code: exit status ${code}`,
    reason: 'NonZeroExitCode',
    details: { causes: [{ reason: 'ExitCode', message: String(code) }] },
  };
}

/** apierrors.NewInternalError(err). */
export function internalErrorStatus(message: string): Status {
  return {
    metadata: {},
    status: 'Failure',
    message: `Internal error occurred: ${message}`,
    reason: 'InternalError',
    details: { causes: [{ message }] },
    code: 500,
  };
}

/** The error stream bytes for a status in protocol version `version` (1–5); empty means write nothing. */
export function encodeStatus(status: Status, version: number): Buffer {
  if (version >= 4) return Buffer.from(JSON.stringify(status));
  return status.status === 'Success' ? Buffer.alloc(0) : Buffer.from(status.message ?? '');
}

/** A port-forward failure as the error stream carries it; closeConnection is omitted when false. */
export function encodePortForwardError(message: string, closeConnection: boolean): Buffer {
  const body = closeConnection ? { closeConnection: true, message } : { message };
  return Buffer.from(JSON.stringify(body) + '\n');
}
