// The web lease store (§T9): `sessionStorage["appduct:lease"]`, so a reload of the same tab
// resumes and a new tab does not. Storage that throws (privacy modes) behaves as empty.

import type { LeaseStore } from "../core/types.js";

export const LEASE_KEY = "appduct:lease";

interface StorageLike {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

export function createSessionStorageLeaseStore(storage: () => StorageLike | undefined): LeaseStore {
  return {
    read: () => {
      try {
        return storage()?.getItem(LEASE_KEY) ?? null;
      } catch {
        return null;
      }
    },
    write: (value) => {
      try {
        storage()?.setItem(LEASE_KEY, value);
      } catch {
        // No storage: the session simply does not survive a reload.
      }
    },
    clear: () => {
      try {
        storage()?.removeItem(LEASE_KEY);
      } catch {
        // Nothing to clear.
      }
    },
  };
}
