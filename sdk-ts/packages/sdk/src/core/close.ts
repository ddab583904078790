// Close-code classification (§D11, §D13.1).

/** Normal closure: `session_replaced`, `revoked`, or an app disconnecting. */
export const CLOSE_NORMAL = 1000;
/** Going away: `app_backgrounded` from the app, `daemon_shutdown` from the daemon. */
export const CLOSE_GOING_AWAY = 1001;
/** Policy violation: every terminal rejection. */
export const CLOSE_POLICY_VIOLATION = 1008;

/**
 * Whether a close ends a session for good: code 1008 and nothing else, decided from the code
 * alone, never from the reason (§D11). Missing and unknown codes are retried within grace.
 */
export function isTerminalCloseCode(code: number | null | undefined): boolean {
  return code === CLOSE_POLICY_VIOLATION;
}
